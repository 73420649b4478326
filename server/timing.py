"""The server's stage clock: how long decode, compute and encode of one request took.

Durations are milliseconds measured with `time.perf_counter` (and the process's CPU time with
`time.process_time`), sent in the `Server-Timing` header (format in `contracts.trials`). Only stages that ran are reported, so an error after decoding still
says how long decoding took.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

from contracts.cpu_lock import CpuLock
from contracts.trials import format_server_timing

CPU_LOCK = CpuLock.from_env()  # replicas on one host (contracts.cpu_lock); none otherwise


class StageClock:
    """Collects stage durations of one request, in the order the stages ran: wall time, and the
    process's CPU time (what a server device's `scaled` mode scales; requests compute one at a time,
    so it is the stage's own, BLAS threads included)."""

    def __init__(self) -> None:
        self.ms: dict[str, float] = {}
        self.cpu_ms: dict[str, float] = {}

    @contextmanager
    def stage(self, name: str) -> Iterator[None]:
        # replicas on this host: the stage holds the host's CPU lock; waiting for it happens before
        # the clocks start (inside the request, so in communication)
        with CPU_LOCK.held():
            start, cpu = time.perf_counter(), time.process_time()
            try:
                yield
            finally:  # a stage that failed still took time, and still counts
                self.cpu_ms[name] = (time.process_time() - cpu) * 1000.0
                self.ms[name] = (time.perf_counter() - start) * 1000.0

    def header(self) -> str:
        return format_server_timing(self.ms, self.cpu_ms)
