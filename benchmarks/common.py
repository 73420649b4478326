"""What every benchmark shares: one figure per `Row`, its target and verdict.

A figure with a target is `pass` or `MISS`; one without is `info`; one that could not be measured is
`skipped` with the reason in `note`. Timings of in-process work are the minimum over repetitions
(`contracts.marshal_speed.best_time`: noise on a shared machine only ever adds time), except where
two such timings are compared at tens of microseconds a call (the codecs against a memory copy):
there each is the median of batches (`batch_time`); timings of whole trials are medians.
"""

from __future__ import annotations

import math
import operator
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field

PASS, MISS, INFO, SKIPPED = "pass", "MISS", "info", "skipped"
_OPS = {"<=": operator.le, "<": operator.lt, ">=": operator.ge, ">": operator.gt}
MB = 1e6  # throughputs are in MB/s of matrix data (10^6 bytes)
BATCH_S = 0.02  # a batch of calls lasts at least this long (`batch_time`)


@dataclass
class Row:
    section: str  # host | codecs | memory | efficiency | orchestration | rpc | runs
    figure: str  # what the value is, e.g. "enc+dec time / memory copy"
    case: str  # which measurement, e.g. "raw 800"
    value: float | None
    unit: str  # "x", "%", "ms", "MB/s"
    target: tuple[str, float] | None = None  # e.g. ("<=", 3.0)
    status: str = INFO
    note: str = ""
    details: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.status == INFO and self.target is not None and self.value is not None:
            op, limit = self.target
            self.status = PASS if _OPS[op](self.value, limit) else MISS

    @property
    def target_text(self) -> str:
        if self.target is None:
            return "-"
        op, limit = self.target
        return f"{op} {limit:g}" + (self.unit if self.unit in ("x", "%") else f" {self.unit}")

    @property
    def key(self) -> str:
        return f"{self.section}/{self.figure}/{self.case}"

    def as_dict(self) -> dict:
        return {
            "section": self.section,
            "figure": self.figure,
            "case": self.case,
            "value": self.value,
            "unit": self.unit,
            "target": self.target_text if self.target else None,
            "status": self.status,
            "note": self.note,
            "details": self.details,
        }


def skipped(section: str, figure: str, case: str, unit: str, reason: str, target=None) -> Row:
    return Row(section, figure, case, None, unit, target, SKIPPED, reason)


def median(values: list[float]) -> float:
    return statistics.median(values)


def fmt_value(value: float | None, unit: str) -> str:
    if value is None:
        return "-"
    if unit == "x":
        # three decimals below 10: a 1.10x target must not read "1x"
        return f"{value:.3f}x" if value < 10 else f"{value:.0f}x"
    if unit == "%":
        return f"{value:.3f}%" if value < 1 else f"{value:.2f}%"
    if unit == "ms":
        return f"{value:.1f} ms" if value >= 1 else f"{value:.3f} ms"
    if unit == "MB/s":
        return f"{value:.0f} MB/s"
    return f"{value:.3g} {unit}"


def batch_time(fn: Callable[[], object], batches: int, batch_s: float = BATCH_S) -> float:
    """Seconds per call of `fn`: the median over `batches` batches of the mean call in a batch of calls
    that together last at least `batch_s`. A single call of tens of microseconds is timed too coarsely
    to compare with another such call (one preemption, one page fault, is most of it; and the fastest
    of a few calls is a lucky one), so both sides of a comparison are timed alike this way."""
    calls = 1
    while (took := _batch(fn, calls)) < batch_s:  # the first batch that lasts long enough is the first
        calls = min(calls * 1000, max(calls * 2, math.ceil(calls * batch_s / max(took, 1e-9))))
    means = [took / calls] + [_batch(fn, calls) / calls for _ in range(batches - 1)]
    return statistics.median(means)


def _batch(fn: Callable[[], object], calls: int) -> float:
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    return time.perf_counter() - start
