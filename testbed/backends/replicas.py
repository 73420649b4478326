"""Several embedded testbeds side by side on one host (replicas), so a sweep can share its work.

A replica is the inventory's testbed under another prefix: replica 0 keeps the inventory's own
(`tb`), replica i gets the prefix plus its number (`tb1`, `tb2`, ...). Everything of a testbed lives
in its own network namespaces, so the replicas' addresses and ports can be the inventory's own;
what is named in the root namespace (links, cgroups, the state and OVS run directories, the lock)
carries the replica's prefix. `testbed down` removes every replica it finds.

Their timed CPU stages must not overlap: every replica's client worker and server get the same
host-wide lock file (`CPU_LOCK`, through their environment), held exactly around each timed stage
(`contracts.cpu_lock`).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from contracts.cpu_lock import references_path
from contracts.errors import UserError
from contracts.hosts import Backend
from contracts.other_cores import FIFO_SUFFIX
from testbed.backends import topology
from testbed.backends.topology import Names
from testbed.inventory import Inventory

MAX_REPLICAS = 9
CPU_LOCK = "/run/testbed/cpu.lock"


def replica_prefix(prefix: str, index: int) -> str:
    return prefix if index == 0 else f"{prefix}{index}"


def replica_inventories(inv: Inventory, count: int) -> list[Inventory]:
    """The inventories of `count` replicas of `inv`'s testbed (one: `inv` itself, unchanged)."""
    if not 1 <= count <= MAX_REPLICAS:
        raise UserError(f"replicas: {count} is out of range", f"give 1 to {MAX_REPLICAS}")
    if count == 1:
        return [inv]
    if inv.backend != Backend.NETNS:
        raise UserError(
            "replicas on one host are embedded testbeds; this inventory's backend is " + repr(inv.backend),
            "use backend: netns, or give one inventory per lab (--inventory A --inventory B)",
        )
    if len(inv.prefix) > 5:
        raise UserError(
            f"prefix {inv.prefix!r} leaves no room for the replicas' numbers (at most 6 characters in all)",
            "use a prefix of at most 5 characters",
        )
    return [replace(inv, prefix=replica_prefix(inv.prefix, i), cpu_lock=CPU_LOCK) for i in range(count)]


def sweep_inventories(invs: list[Inventory], count: int) -> list[Inventory]:
    """The testbeds of a sweep: each inventory's `count` replicas. Embedded ones share this host, so
    as soon as there is more than one of them they all take the CPU lock; the prefixes, which name
    each testbed's lock on this (the control) machine, must differ."""
    out = [r for inv in invs for r in replica_inventories(inv, count)]
    prefixes = [i.prefix for i in out]
    twice = sorted({p for p in prefixes if prefixes.count(p) > 1})
    if twice:
        raise UserError(
            f"two testbeds of the sweep have the prefix {', '.join(twice)}",
            "give each inventory a prefix of its own",
        )
    if sum(i.backend == Backend.NETNS for i in out) > 1:
        out = [replace(i, cpu_lock=CPU_LOCK) if i.backend == Backend.NETNS else i for i in out]
    return out


def remove_cpu_lock(state_root: Path) -> list[str]:
    """The replicas' CPU lock file and the host's reference runs beside it, once no testbed's state is
    left beside them: `NetnsLab.down` of the last testbed, whether `testbed down` or a sweep's end
    took it down."""
    others = [p for p in state_root.iterdir() if p.is_dir()] if state_root.is_dir() else []
    if others:
        return []
    removed = []
    for name, what in (
        (Path(CPU_LOCK).name, "lock"),
        (Path(references_path(CPU_LOCK)).name, "reference runs"),
    ):
        if (state_root / name).exists():
            (state_root / name).unlink(missing_ok=True)
            removed.append(f"{what} {state_root / name}")
    # a crashed sweep's spinners' FIFOs (`testbed.sweep.spinners`)
    for fifo in sorted(state_root.glob(Path(CPU_LOCK).name + FIFO_SUFFIX + "*")):
        fifo.unlink(missing_ok=True)
        removed.append(f"spinner FIFO {fifo}")
    return removed


def present_replicas(inv: Inventory, state_root: Path) -> list[Inventory]:
    """Replicas 1.. of `inv` that have anything on this machine (namespaces or state), for `down`."""
    found = []
    for i in range(1, MAX_REPLICAS + 1):
        other = replace(inv, prefix=replica_prefix(inv.prefix, i))
        if topology.existing_namespaces(Names.of(other)) or (state_root / other.prefix).exists():
            found.append(other)
    return found
