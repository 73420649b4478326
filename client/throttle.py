"""Timed stages under a CPU quota start at a known point of the quota's period.

The kernel grants a cgroup its quota once per period. A stage that starts with quota left (the
process waited on the network, or on nothing) runs at full speed until the quota is spent, so its
wall time comes out short by up to a period, whatever the stage's length; a stage of ten periods was
measured 12% short on average. `align` removes that bias: it spins until the process is throttled
and let go again (the start of a period, with a fresh quota), then spends half the quota, and the
stage starts there. A stage needing `k` quotas plus `r` then takes `k` periods plus a part that is
off by at most half a period either way, and is right on average (measured, 0.04 of a core and a
25 ms period: median error 0.0-0.8% and worst 12% from 4 to 40 periods, against -30% to -3.5%
unaligned; the calibration's check and the trials align alike, so the check measures what trials
get). Costs up to a period and a half of wall time before the stage, outside every timed region.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

from client.cpulimit import CGROUP_ENV, CGROUP_ROOT, CpuLimit
from contracts.errors import UserError


@dataclass(frozen=True)
class Period:
    period_s: float
    quota_s: float

    @property
    def off_s(self) -> float:
        """How long the process waits, throttled, in every period it spends its whole quota."""
        return self.period_s - self.quota_s


def in_force(name: str | None = None, root: Path = CGROUP_ROOT) -> Period | None:
    """The quota of the cgroup this process runs in (`python -m client.cpulimit` names it), if any."""
    name = name or os.environ.get(CGROUP_ENV)
    if not name:
        return None
    try:
        limit = CpuLimit(name, 1.0, root=root).read()
    except (OSError, UserError):
        return None
    if not limit or limit.get("quota_us", -1) <= 0:
        return None
    return Period(limit["period_us"] / 1e6, limit["quota_us"] / 1e6)


def spend_cpu(seconds: float) -> None:
    start = time.process_time()
    while time.process_time() - start < seconds:
        pass


def align(period: Period | None, clock=time.perf_counter) -> bool:
    """Wait for the start of a period, then spend half its quota; False where there is nothing to align
    (no quota, a quota of a whole period) or no throttling was seen within three periods."""
    if period is None or period.off_s < 0.0005:
        return False
    gap = period.off_s / 2
    deadline = clock() + 3 * period.period_s + 0.05
    last = clock()
    while True:
        now = clock()
        if now - last > gap:
            break
        if now > deadline:
            return False
        last = now
    spend_cpu(period.quota_s / 2)
    return True


class Aligner:
    """`align` before each timed stage of this process, with the quota read afresh (a calibration may
    change it while the process runs)."""

    def __init__(self, name: str | None = None) -> None:
        self.name = name or os.environ.get(CGROUP_ENV)

    def __call__(self) -> bool:
        return align(in_force(self.name)) if self.name else False
