"""The lab for an inventory's backend: namespaces on this machine, or a real lab over SSH."""

from __future__ import annotations

from testbed.inventory import Inventory
from testbed.lab import Lab, NetnsLab


def open_lab(inv: Inventory) -> Lab:
    if inv.backend == "ssh":
        from testbed.ssh_lab import SshLab  # fabric and paramiko only for a real lab

        return SshLab(inv)
    return NetnsLab(inv)
