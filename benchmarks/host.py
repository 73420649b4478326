"""How steady this host's speed was as the bench ran: the share of probes of one fixed work more than
10% slower than the fastest (`contracts.steadiness`, as a calibration records it), before the other
benchmarks and after them.

A figure, not a verdict: the host is not the tool. The bench's ratios compare two timings taken in
one run, so a host that changes speed in spells (measured on the 2-core VM, 2026-11-28: a third to
nine tenths of runs 1.6-1.9x slower, in spells up to a second) moves them less than absolute times;
this row says whether the figures below were taken on such a host, and so how far to read them.
"""

from __future__ import annotations

from benchmarks.common import Row
from contracts.steadiness import Steadiness, probe_pass
from contracts.tolerance import DEFAULT

SECTION = "host"
SLOW_PCT = DEFAULT.pct  # the device tolerance's default percent, as a calibration judges its probes
FIGURE = f"probes >{SLOW_PCT:g}% above the fastest"
CASE = "steadiness"


class Probes:
    """The probes of one bench run: a pass before the benchmarks and one after."""

    def __init__(self) -> None:
        self.figures: list[float] = []

    def take(self) -> None:
        self.figures += probe_pass()

    def row(self) -> Row:
        steady = Steadiness.of(self.figures, SLOW_PCT)
        return Row(
            SECTION,
            FIGURE,
            CASE,
            100 * steady.slow_share,
            "%",
            note=steady.describe(),
            details={"probes": steady.probes, "fastest_ms": steady.fastest_ms,
                     "median_ratio": steady.median_ratio, "worst_ratio": steady.worst_ratio},
        )  # fmt: skip


def cases(quick: bool) -> list[tuple[str, str, str, tuple | None]]:
    return [(FIGURE, CASE, "%", None)]
