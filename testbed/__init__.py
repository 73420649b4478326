"""Network-emulation testbed controller for computation-offloading experiments."""

from contracts import __version__

__all__ = ["__version__"]
