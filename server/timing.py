"""The server's stage clock: how long decode, compute and encode of one request took.

Durations are milliseconds measured with `time.perf_counter`, sent in the `Server-Timing` header
(format in `contracts.trials`). Only stages that ran are reported, so an error after decoding still
says how long decoding took.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

from contracts.trials import format_server_timing


class StageClock:
    """Collects stage durations of one request, in the order the stages ran."""

    def __init__(self) -> None:
        self.ms: dict[str, float] = {}

    @contextmanager
    def stage(self, name: str) -> Iterator[None]:
        start = time.perf_counter()
        try:
            yield
        finally:  # a stage that failed still took time, and still counts
            self.ms[name] = (time.perf_counter() - start) * 1000.0

    def header(self) -> str:
        return format_server_timing(self.ms)
