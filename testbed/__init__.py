"""Network-emulation testbed controller for computation-offloading experiments."""

__version__ = "0.1.0"
