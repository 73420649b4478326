"""The lab for an inventory's backend: namespaces on this machine, or a real lab over SSH."""

from __future__ import annotations

from contracts.hosts import Backend
from testbed.backends.lab import Lab
from testbed.backends.netns import NetnsLab
from testbed.inventory import Inventory


def open_lab(inv: Inventory) -> Lab:
    if inv.backend == Backend.SSH:
        from testbed.backends.ssh import SshLab  # fabric and paramiko only for a real lab

        return SshLab(inv)
    return NetnsLab(inv)
