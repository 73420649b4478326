"""The server's stage clock: how long decode, compute and encode of one request took.

Durations are milliseconds measured with `time.perf_counter` (and CPU time, the thread's for
marshalling and the process's for the kernel: `contracts.short_work.cpu_clock`), sent in the `Server-Timing` header (format in `contracts.stages`). Only stages that ran are reported, so an error after decoding still
says how long decoding took.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path

from contracts.cpu_lock import CpuLock
from contracts.device import DeviceProfile
from contracts.errors import UserError
from contracts.short_work import cpu_clock, per_run_cpu_s
from contracts.stages import (
    SERVER_LOCK_WAIT,
    SERVER_QUEUE,
    SERVER_RETIME,
    asks_retime,
    format_server_timing,
    retime_expected,
)

CPU_LOCK = CpuLock.from_env()  # replicas on one host (contracts.cpu_lock); none otherwise


class StageTarget:
    """What a stage learns about its own work while it runs: the device's seconds for it (a paced
    server), None otherwise; and the work itself, to time again when its run was short."""

    def __init__(self, clock: StageClock, kind: str) -> None:
        self.clock, self.kind = clock, kind
        self.target_s: float | None = None
        self.again: Callable[[], object] | None = None

    def repeatable(self, work: Callable[[], object]) -> None:
        """The stage's work, as it can run again: a short run's CPU time is then the mean over repeated
        runs of it (`contracts.short_work`), what a scaled server device multiplies."""
        self.again = work

    def work(self, op: str, size: int, codec: str | None = None, data_bytes: int = 0) -> None:
        """The stage's work: `op` on `size` x `size` matrices, `data_bytes` of matrix data through
        `codec` (decode and encode); a paced server's stage then lasts the device's time for it."""
        pace = self.clock.pace
        if pace is None:
            return
        try:
            self.target_s = pace.work_s(self.kind, op, size, codec, data_bytes)
        except KeyError as exc:  # a profile without this work: `python -m server --pace` checks its own
            raise RuntimeError(f"the paced server device {pace.name} has no figure for {exc}") from None


class StageClock:
    """Collects stage durations of one request, in the order the stages ran: wall time, and the
    process's CPU time (what a server device's `scaled` mode scales; requests compute one at a time,
    so it is the stage's own, BLAS threads included).

    With `pace` (a server device, `python -m server --pace PROFILE`) a stage whose work was named
    (`StageTarget.work`) lasts at least the device's time for that work: the host's part under the
    CPU lock, then a sleep for the rest, outside the lock (other requests' stages may compute
    meanwhile) and inside the request's work slot (the server is busy with it, as the device would
    be). The stage's `dur` is then the device's time; what the host took of it is `host`."""

    KINDS = {"decode": "decode", "compute": "kernel", "encode": "encode"}  # a stage's kind of work

    def __init__(
        self,
        pace: DeviceProfile | None = None,
        retime: bool = False,
        expected: Mapping[str, float] | None = None,
        thread_clock: bool = False,
    ) -> None:
        self.pace = pace
        # every stage on the calling thread's CPU clock, its kernel too (`thread_clock`): a call whose
        # work is its thread's alone, in a server whose other threads read other connections meanwhile
        self.thread_clock = thread_clock
        self.retime = retime  # the request asked (`RETIME_HEADER`): a stage's work is timed again
        # a scaled stage holds its core (`contracts.cpu_lock`); a paced one shares the device's cores
        self.holds_core = retime and pace is None
        self.expected = dict(expected or {})  # its kinds' expected CPU seconds: far above, again
        self.ms: dict[str, float] = {}
        self.cpu_ms: dict[str, float] = {}
        self.host_ms: dict[str, float] = {}

    @classmethod
    def asked(cls, headers: Mapping[str, str], pace: DeviceProfile | None = None) -> StageClock:
        """The clock a request's headers ask for (`RETIME_HEADER`: its stages timed again, with what
        each kind of work is expected to take)."""
        return cls(pace, retime=asks_retime(headers), expected=retime_expected(headers))

    @contextmanager
    def stage(self, name: str) -> Iterator[StageTarget]:
        target = StageTarget(self, self.KINDS.get(name, name))
        # the thread's for marshalling, the process's for a kernel (BLAS's threads are its)
        clock = time.thread_time if self.thread_clock else cpu_clock(target.kind)
        # replicas on this host: the stage holds the host's CPU lock; waiting for it happens before
        # the clocks start, inside the request, and is reported (`cpulock`) for communication to exclude
        # scaled, not paced: its core too (`contracts.cpu_lock`)
        with CPU_LOCK.held(unpreempted=self.holds_core) as waited:
            start, cpu = time.perf_counter(), clock()
            if CPU_LOCK.path is not None:  # the wait, reported so that communication excludes it
                self.wait(waited)
            try:
                yield target
            finally:  # a stage that failed still took time, and still counts
                self.cpu_ms[name] = (clock() - cpu) * 1000.0
                self.ms[name] = (time.perf_counter() - start) * 1000.0
            again, target.again = target.again, None  # its data is not kept past the stage
            if (
                self.retime and again is not None and target.target_s is None
            ):  # scaled: CPU time is the figure
                begun = time.perf_counter()
                expected = self.expected.get(target.kind)
                self.cpu_ms[name] = per_run_cpu_s(again, self.cpu_ms[name] / 1000.0, clock, expected) * 1000.0
                self.ms[SERVER_RETIME] = (
                    self.ms.get(SERVER_RETIME, 0.0) + (time.perf_counter() - begun) * 1000.0
                )
        if target.target_s is not None:  # paced (reached only when the stage succeeded)
            self.host_ms[name] = self.ms[name]
            left = target.target_s - (time.perf_counter() - start)
            if left > 0:
                time.sleep(left)
            self.ms[name] = (time.perf_counter() - start) * 1000.0

    def wait(self, seconds: float) -> None:
        """Count a wait for the replicas' CPU lock (`cpulock`)."""
        self.ms[SERVER_LOCK_WAIT] = self.ms.get(SERVER_LOCK_WAIT, 0.0) + seconds * 1000.0

    @contextmanager
    def queued(self, slots: AbstractContextManager | None) -> Iterator[None]:
        """Hold one of the server's work slots for the stages inside; the wait for it (the body has
        arrived: this is the server's queueing, not the network's) is the `queue` entry."""
        if slots is None:
            yield
            return
        start = time.perf_counter()
        with slots:
            self.ms[SERVER_QUEUE] = (time.perf_counter() - start) * 1000.0
            yield

    def header(self) -> str:
        return format_server_timing(self.ms, self.cpu_ms, self.host_ms)


def load_pace(path: str | Path | None) -> DeviceProfile | None:
    """The server device a paced server keeps to (`--pace`: a profile as JSON, `DeviceProfile.as_dict`)."""
    if path is None:
        return None
    try:
        return DeviceProfile.from_dict(json.loads(Path(path).read_text()))
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise UserError(
            f"--pace {path}: not a device profile as JSON ({exc})", "write it with DeviceProfile.as_dict"
        ) from None
