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
"""

from __future__ import annotations

import fcntl
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager

ENV = "TESTBED_CPU_LOCK"
REFERENCES_SUFFIX = ".refs"  # the host's reference runs beside the lock (`client.host_references`)


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
    def held(self) -> Iterator[float]:
        """Hold the lock for the block; it gets the seconds waited for it, which a server reports
        (`contracts.stages.SERVER_LOCK_WAIT`) so that no stage and no communication counts them."""
        waited = self.take()
        try:
            yield waited
        finally:
            self.release()
