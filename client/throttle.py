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

import time
from dataclasses import dataclass

from client.cpulimit import CpuLimit
from contracts.device import key
from contracts.errors import UserError


@dataclass(frozen=True)
class Period:
    period_s: float
    quota_s: float

    @property
    def off_s(self) -> float:
        """How long the process waits, throttled, in every period it spends its whole quota."""
        return self.period_s - self.quota_s


def in_force(limit: CpuLimit | None = None) -> Period | None:
    """The quota of `limit`, by default the cgroup this process runs in (as `python -m client.cpulimit`
    hands it down), if any."""
    limit = limit or CpuLimit.own()
    if limit is None:
        return None
    try:
        held = limit.read()
    except (OSError, ValueError):
        return None
    if not held or held.get("quota_us", -1) <= 0:
        return None
    return Period(held["period_us"] / 1e6, held["quota_us"] / 1e6)


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
    """What runs before each timed stage of this process: under per-work quotas (throttle mode), the
    quota of the stage's kind of work is put in force; then `align`, with the quota read afresh.

    One quota cannot serve every kind of work: a host is not uniformly faster than the device (it
    may compute 200x faster but marshal JSON only 4x faster, and the ratio changes with the size), so
    each kind of work gets the fraction of a core its own calibrated slowdown calls for (`quotas`,
    keyed as `contracts.device.key`, with `base` for what no key covers: the request between the
    client's stages). The process writes its own cgroup, which needs root, as the agent has.
    """

    def __init__(self, limit: CpuLimit | None = None, quotas: dict[str, float] | None = None) -> None:
        self.limit = limit or CpuLimit.own()
        self.quotas = quotas or {}
        self.work: tuple[str, int, str | None] = ("", 0, None)  # (op, size, method) of the trial in hand
        self.fraction: float | None = None  # the quota this process last put in force
        if self.quotas and self.limit is None:
            raise UserError(
                "per-work CPU quotas need the cgroup the process runs in",
                "run it through python -m client.cpulimit --name CGROUP -- ...",
            )

    def trial(self, op: str, size: int, method: str | None = None) -> None:
        """The trial whose stages follow: their kinds of work are keyed by its op, size and method."""
        self.work = (op, size, method)

    def put(self, fraction: float) -> None:
        """Put `fraction` of a core in force for this process's cgroup (written only when it changes:
        a write restarts the kernel's period)."""
        if fraction != self.fraction:
            CpuLimit(self.limit.name, fraction, path=self.limit.path).apply()
            self.fraction = fraction

    def __call__(self, kind: str | None = None) -> bool:
        """Before a timed stage of `kind` (kernel, encode, decode; request: no alignment, the
        request waits on the network)."""
        if self.limit is None:
            return False
        if self.quotas and kind is not None:
            op, size, method = self.work
            codec = None if kind in ("kernel", "request") else method
            self.put(self.quotas.get(key(kind, op, size, codec), self.quotas["base"]))
        if kind == "request":
            return False
        return align(in_force(self.limit))
