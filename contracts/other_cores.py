"""The host's other cores held while a short stage is timed: no other testbed's work beside it.

Testbeds on one host (replicas) time one CPU stage at a time (`contracts.cpu_lock`), and that stage
holds its own core under SCHED_FIFO; the other testbeds' untimed work (transfers through their
userspace switches, request bodies read into memory, replies written) still runs on the other cores,
and the timed stage shares the last-level cache and the memory bus with it. A stage of a millisecond
of memory-bound work moves with that by more than the device tolerance: in the 4-testbed fidelity
check of 2026-11-27, 10 of its 11 flagged trials were stages under 2 ms of host CPU (RAW encodes of a
1200x1200 result, the client's gRPC decode at 1200, log's kernel at 400) 10-33% off in one trial.
Measured on the 2-core VM (2026-11-28, 20 figures each, the stage under SCHED_FIFO and timed as a
trial times it, a memory copy looping on the other core): RAW's encode of a 1200x1200 result took
0.77-1.22 ms, and 0.41-0.74 ms with this module's spinner holding the other core (0.42-0.88 with
nothing else running that morning); in the 4-testbed fidelity check run right after, against the
shipped code run next, 20 kinds of work outside the tolerance instead of 36, and 62% of trials
flagged instead of 81% (`docs/measurements.md`, issue 44's tenth-session paragraph).

So while a stage's repeated runs are timed (`contracts.short_work`: a short stage's blocks, a stage
of milliseconds run again), its thread is pinned to its core and every other core is held by a
spinner at the same real-time priority: a process per core (`serve`), started by the sweep for its
testbeds on one host (`testbed.sweep.spinners`), that sleeps on a FIFO beside the CPU lock
(`fifo_path`) and, on `HOLD`, loops reading it (without blocking) until `LET_GO` or `MAX_HOLD_S`. The hold spans only
the repeated runs: about `contracts.short_work.BUDGET_S` for a short stage, at most `HOLD_UNDER_S`
of runs for one of milliseconds; for that long the other testbeds' processes wait (their links keep
draining the packets already queued in the kernel), and their lock-free time is the rest.

Only a thread that holds its core (`cpu_lock.holding_core`) holds the others: not a paced stage,
whose sharing of the cores is the experiment, nor a stage under a CPU quota. With no spinner (one
testbed, or none started) a hold does nothing.
"""

from __future__ import annotations

import errno
import os
import select
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager

from contracts.cpu_lock import ENV, RT_PRIORITY, holding_core

FIFO_SUFFIX = ".core"  # `<lock>.core<N>`: the FIFO of core N's spinner
HOLD, LET_GO = b"h", b"l"
MAX_HOLD_S = 0.2  # a spinner lets go by itself after this long: a holder that died holds nothing
HOLD_UNDER_S = 0.01  # a stage of milliseconds is run again under a hold when one run is under this
IDLE_CHECK_S = 1.0  # how often an idle spinner looks whether its FIFO is still there


_HOLDERS: dict[str | None, OtherCores] = {}


def fifo_path(lock_path: str, core: int) -> str:
    """The FIFO of the spinner of `core` for the lock at `lock_path`."""
    return f"{lock_path}{FIFO_SUFFIX}{core}"


def single_threaded_blas() -> bool:
    """Whether this process's BLAS runs on its calling thread only (`contracts.profiles.blas_env` with
    one thread): a kernel timed under a hold must be, or BLAS's other threads wait for the held cores."""
    return os.environ.get("OPENBLAS_NUM_THREADS") == "1" and os.environ.get("OMP_NUM_THREADS") == "1"


def current_core() -> int:
    """The core the calling thread runs on now (`/proc/thread-self/stat`, field 39)."""
    with open("/proc/thread-self/stat", "rb") as f:
        stat = f.read()
    return int(stat[stat.rindex(b")") + 2 :].split()[36])


class OtherCores:
    """The spinners of the lock at `lock_path` as a holder sees them (None: no lock, no spinners)."""

    def __init__(self, lock_path: str | None) -> None:
        self.lock_path = lock_path
        self._fds: dict[int, int] = {}

    @classmethod
    def from_env(cls) -> OtherCores:
        """This process's holder for the lock in its environment (one per lock path)."""
        path = os.environ.get(ENV) or None
        if path not in _HOLDERS:
            _HOLDERS[path] = cls(path)
        return _HOLDERS[path]

    def _fd(self, core: int) -> int | None:
        if core not in self._fds:
            try:
                self._fds[core] = os.open(fifo_path(self.lock_path, core), os.O_WRONLY | os.O_NONBLOCK)
            except OSError as exc:  # no such FIFO, or no spinner reading it: nothing to hold that core
                if exc.errno not in (errno.ENOENT, errno.ENXIO):
                    raise
                return None
        return self._fds[core]

    def _send(self, cores: list[int], what: bytes) -> list[int]:
        sent = []
        for core in cores:
            if (fd := self._fd(core)) is None:
                continue
            try:
                os.write(fd, what)
                sent.append(core)
            except OSError:  # the spinner went away (its sweep ended): open again next time
                os.close(self._fds.pop(core))
        return sent

    @contextmanager
    def held(self) -> Iterator[list[int]]:
        """The calling thread pinned to its core and the other cores held for the block, when it
        holds its core; it gets the cores held (none: nothing was done)."""
        if self.lock_path is None or not holding_core():
            yield []
            return
        affinity = os.sched_getaffinity(0)
        mine = current_core()
        os.sched_setaffinity(0, {mine})
        held = self._send([c for c in range(os.cpu_count() or 1) if c != mine], HOLD)
        try:
            yield held
        finally:
            self._send(held, LET_GO)
            os.sched_setaffinity(0, affinity)


def serve(lock_path: str, core: int) -> None:
    """Core `core`'s spinner: pinned there at `RT_PRIORITY` under SCHED_FIFO, asleep on its FIFO, and
    on `HOLD` looping until `LET_GO` (or `MAX_HOLD_S`). Ends when its FIFO is removed."""
    path = fifo_path(lock_path, core)
    try:
        os.mkfifo(path, 0o600)
    except FileExistsError:
        pass
    os.sched_setaffinity(0, {core})
    try:
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(RT_PRIORITY))
    except OSError:  # no CAP_SYS_NICE: it still takes its turns, less well
        pass
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    keep = os.open(path, os.O_WRONLY | os.O_NONBLOCK)  # a writer always open: no end of file to wake on
    try:
        while os.path.exists(path):
            if not select.select([fd], [], [], IDLE_CHECK_S)[0]:
                continue
            if os.read(fd, 64).endswith(HOLD):
                _spin(fd)
    finally:
        os.close(keep)
        os.close(fd)


def _spin(fd: int) -> None:
    deadline = time.monotonic() + MAX_HOLD_S
    while time.monotonic() < deadline:
        try:
            got = os.read(fd, 64)
        except BlockingIOError:
            continue
        if got.endswith(LET_GO):
            return


if __name__ == "__main__":
    serve(sys.argv[1], int(sys.argv[2]))
