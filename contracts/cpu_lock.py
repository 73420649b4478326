"""One timed CPU stage at a time on a host: the lock that keeps replicas' measurements apart.

Several testbeds on one host (replicas) would otherwise run their timed CPU stages at once and slow
each other. Every process that times CPU work (the client's trial worker, the offload server) takes
the host-wide lock named in its environment (`TESTBED_CPU_LOCK`) exactly around each timed stage:
before the stage's clocks start and after they stop, so the time spent waiting counts in no stage.
(On the server it falls inside the request, between its body's arrival and its reply: the server
reports it, `contracts.stages.SERVER_LOCK_WAIT`, and communication, the request's wall time minus the
server's measured stages, excludes it too.) Without the variable there is nothing to wait for.

`flock` on a file: the kernel releases it when its holder dies, and network namespaces share the
file system, so the lock is host-wide across the replicas' namespaces.

**A scaled stage runs unpreempted** (`held(unpreempted=True)`, `unpreempted_thread`). The lock keeps
other testbeds' timed stages away, not their untimed work (transfers through the userspace switch,
request bodies read into memory, fresh cgi processes), which the scheduler lays on the timed stage's
core in slices: each slice leaves the stage's caches cold, and the CPU time the slowdown multiplies
grows with it. Measured on the 2-core VM (2026-11-27, a memory copy looping on each core, 8 fresh
processes each): the log of a 1200x1200 matrix, timed as a trial times it, took 1.12-1.75 ms of CPU
under the default policy, 1.03-1.24 under SCHED_FIFO, 0.88-1.05 on the quiet machine; of a
400x400 one, 0.079-0.130 against 0.083-0.090 (quiet: 0.079-0.090); nice -20 came between. The
fidelity check on 4 testbeds had put such stages 10-47% off their targets in either direction, and
41% of its trials flagged; with this, 24% (2026-11-27, 22:22). So a scaled stage (its CPU time is
the figure) holds its core at the lowest real-time priority while it holds the lock: one such thread
on the host at a time, so another core is always the rest's, and the kernel's real-time throttling
leaves the rest 5% of this one. One testbed has no lock file, but its client's and server's stages
follow one another (the smoke grid: 3 of 42 trials flagged without this, 0 with it). Not for stages
paced on shared cores (several clients or requests at once: the client's `pacer`, a paced server),
whose sharing of the cores by the scheduler is the experiment (`holds_core` on the clients and the
server's `StageClock` says which). Children do not inherit it (`SCHED_RESET_ON_FORK`); a child timed
as a stage takes it itself (`hold_the_core` as its `preexec_fn`). Not under a CPU quota
(`CGROUP_ENV`: throttle mode's cgroup, whose `cpu.max` a real-time thread would escape), and not
where the host refuses it (no CAP_SYS_NICE): then the stage runs as before, and the fidelity
table says what that cost.
"""

from __future__ import annotations

import fcntl
import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

ENV = "TESTBED_CPU_LOCK"
# set by `client.cpulimit.main` for the command it runs under a CPU quota: the directory of its cgroup,
# as a path that still leads there inside `ip netns exec` (which mounts its own /sys, without cgroups)
CGROUP_ENV = "TESTBED_CPU_CGROUP"
RT_PRIORITY = 1  # above every task of the default policy, below every real-time one the system has
REFERENCES_SUFFIX = ".refs"  # the host's reference runs beside the lock (`client.host_references`)
_HOLDING = threading.local()  # `holding`: this thread holds its core (`unpreempted_thread`)


def references_path(lock_path: str | None) -> str | None:
    """The file of the host's shared reference runs beside the CPU lock at `lock_path` (None: no
    lock, so no other worker on this host to share them with)."""
    return lock_path + REFERENCES_SUFFIX if lock_path else None


class CpuLock:
    """The lock of `path`; `held()` around a timed stage. With no path it does nothing."""

    def __init__(self, path: str | None) -> None:
        self.path = path
        self._fd: int | None = None

    @classmethod
    def from_env(cls) -> CpuLock:
        return cls(os.environ.get(ENV) or None)

    def take(self) -> float:
        """Wait for the lock and hold it; the seconds waited (0 without a lock). For a hold that spans
        more than one block (the cgi stack's start-up: taken by its script, let go by `main`)."""
        if self.path is None:
            return 0.0
        if self._fd is None:
            self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        asked = time.perf_counter()
        fcntl.flock(self._fd, fcntl.LOCK_EX)
        return time.perf_counter() - asked

    def release(self) -> None:
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)

    @contextmanager
    def held(self, unpreempted: bool = False) -> Iterator[float]:
        """Hold the lock for the block; it gets the seconds waited for it, which a server reports
        (`contracts.stages.SERVER_LOCK_WAIT`) so that no stage and no communication counts them.
        `unpreempted` (a scaled stage, not paced): the calling thread holds its core too, once it has
        the lock."""
        waited = self.take()
        try:
            with unpreempted_thread(unpreempted):
                yield waited
        finally:
            self.release()


@contextmanager
def unpreempted_thread(wanted: bool = True) -> Iterator[bool]:
    """The calling thread at `RT_PRIORITY` under SCHED_FIFO for the block, its policy restored after;
    it gets whether that was done: not unless `wanted`, not under a CPU quota (`CGROUP_ENV`), not
    where the host refuses it."""
    if not wanted:
        yield False
        return
    before = os.sched_getscheduler(0), os.sched_getparam(0)
    if not hold_the_core():
        yield False
        return
    _HOLDING.holding = True
    try:
        yield True
    finally:
        _HOLDING.holding = False
        os.sched_setscheduler(0, *before)


def holding_core() -> bool:
    """Whether the calling thread holds its core now (inside `unpreempted_thread`, done): a stage
    whose host may hold its other cores too (`contracts.other_cores`)."""
    return getattr(_HOLDING, "holding", False)


def hold_the_core() -> bool:
    """The calling thread at `RT_PRIORITY` under SCHED_FIFO, its children not; whether it is (not
    under a CPU quota, `CGROUP_ENV`, nor where the host refuses it). Also a `preexec_fn`: a child
    timed as a stage (`server.cgi.fresh_start_up_s`) runs so from its exec on."""
    if os.environ.get(CGROUP_ENV):
        return False
    try:
        os.sched_setscheduler(0, os.SCHED_FIFO | os.SCHED_RESET_ON_FORK, os.sched_param(RT_PRIORITY))
    except OSError:  # EPERM: no CAP_SYS_NICE, or no real-time time in this cgroup
        return False
    return True
