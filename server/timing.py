"""The server's stage times as the standard `Server-Timing` header, written here and parsed by the client.

Durations are milliseconds (the header's unit) measured with `time.perf_counter`; the client turns
them into seconds. Only stages that ran are reported, so an error after decoding still says how long
decoding took.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from contextlib import contextmanager

STAGES = ("decode", "compute", "encode")

_METRIC = re.compile(r"^\s*([!#$%&'*+\-.^_`|~0-9A-Za-z]+)\s*(?:;(.*))?$")
_DUR = re.compile(r"^\s*dur\s*=\s*\"?([0-9.eE+\-]+)\"?\s*$")


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
        return ", ".join(f"{name};dur={ms:.3f}" for name, ms in self.ms.items())


def parse_server_timing(value: str | None) -> dict[str, float]:
    """`decode;dur=1.5, compute;dur=20` -> {"decode": 0.0015, "compute": 0.02} (seconds).

    Follows the header's grammar loosely: metrics without `dur` and unknown parameters (`desc`) are
    skipped; a malformed metric is skipped rather than failing a trial whose result is fine.
    """
    out: dict[str, float] = {}
    for metric in (value or "").split(","):
        m = _METRIC.match(metric)
        if not m:
            continue
        for param in (m.group(2) or "").split(";"):
            d = _DUR.match(param)
            if d:
                try:
                    out[m.group(1)] = float(d.group(1)) / 1000.0
                except ValueError:
                    pass
                break
    return out
