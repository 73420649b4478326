"""One client device's cores, shared by its outstanding requests: the device-time queue of concurrency.

In scaled mode a stage's time is this host's CPU time for it times the device's slowdown, computed
after the fact: the host's encode of a mul 800 request takes 30 ms of wall time where the paper's
client takes 0.9 s. With one request in flight nothing depends on when the device would have finished.
With C requests in flight from one device (the energy-performance study's concurrency), everything
does: the device's cores are shared by their stages, so a request's encode waits for the others', and
the requests' transfers start (and share the link) when the device is done with them, not when this
host is.

So with concurrency each of a client's C workers paces its two stages (`Pacer`): the host does the
work (under the host-wide CPU lock, as every timed stage), its device time is its CPU time times the
slowdown, and the stage takes the first of the device's cores free (`DeviceCores`, a timeline in a
file of the client's, shared by its workers through `flock`), then sleeps until the device would have
finished. The stage's time is the wait for a core plus the device's work: what the request saw. The
same monotonic clock (CLOCK_MONOTONIC, `time.perf_counter`) serves every process on the host.
"""

from __future__ import annotations

import fcntl
import json
import os
import time
from collections.abc import Callable


class DeviceCores:
    """The device's `cores` cores as the times each is next free, in a file its workers share."""

    def __init__(self, path: str, cores: int) -> None:
        if cores < 1:
            raise ValueError(f"a device has at least one core, not {cores}")
        self.path, self.cores = path, cores

    def take(self, ready: float, device_s: float) -> float:
        """A stage ready at `ready` (perf_counter seconds) needing `device_s` of one core: on the core
        free first, from when both it and the stage are; returns when the stage ends there."""
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            free = self._read(fd)
            core = min(range(self.cores), key=free.__getitem__)
            end = max(ready, free[core]) + device_s
            free[core] = end
            os.lseek(fd, 0, os.SEEK_SET)
            os.ftruncate(fd, 0)
            os.write(fd, json.dumps(free).encode())
            return end
        finally:
            os.close(fd)  # the lock goes with the descriptor

    def _read(self, fd: int) -> list[float]:
        data = os.read(fd, 1 << 16)
        try:
            free = [float(v) for v in json.loads(data)] if data else []
        except (ValueError, TypeError):
            free = []  # a file this class did not write: every core free
        return (free + [0.0] * self.cores)[: self.cores]


class Pacer:
    """Paces a worker's client stages to its device's time on its shared cores.

    `device_s(kind, cpu_s)` is the device's seconds for a stage of `kind` ("encode", "decode") that
    took `cpu_s` of this host's CPU: the trial's scaler's slowdown, set for each trial."""

    def __init__(self, cores: DeviceCores) -> None:
        self.cores = cores
        self.device_s: Callable[[str, float], float] | None = None

    def stage(self, kind: str, ready: float, cpu_s: float) -> float:
        """After the host did a stage that became ready at `ready`: wait until the device would have
        finished it, and return then (the stage's end)."""
        if self.device_s is None:
            return time.perf_counter()
        end = self.cores.take(ready, self.device_s(kind, cpu_s))
        left = end - time.perf_counter()
        if left > 0:
            time.sleep(left)
        return time.perf_counter()
