"""How far an emulated device's stage may be from its target: `DeviceTolerance`, the one rule.

A stage meets its target within `max(pct% of the target, ms)`: a relative tolerance alone holds a
0.2 ms encode to 0.02 ms, less than a timer's and a scheduler's noise on any host, so short work
was flagged for what no emulation can hold. The calibration's rows (`contracts.calibration`), the
throttle mode's quota corrections, and the trials' fidelity table (`analysis.trial_fidelity`) all
judge with it; the experiment sets it (`device_tolerance_pct`, `device_tolerance_ms`), and each
calibration records the one it was judged by.
"""

from __future__ import annotations

from dataclasses import dataclass

DEFAULT_PCT = 10.0
DEFAULT_MS = 0.1


@dataclass(frozen=True)
class DeviceTolerance:
    """The allowed miss of a stage: `pct` percent of its target, or `ms` milliseconds if more.
    `ms` 0 is the relative rule alone (what calibrations recorded before the ms part)."""

    pct: float = DEFAULT_PCT
    ms: float = DEFAULT_MS

    def allowed_s(self, target_s: float) -> float:
        """The most a stage of this target may be off, in seconds."""
        return max(self.pct / 100 * target_s, self.ms / 1000)

    def missed(self, target_s: float, achieved_s: float) -> bool:
        """Whether what was achieved is outside the tolerance of the target: off by more than both
        parts (the relative part compared as the error in percent, as calibrations always did)."""
        off = abs(achieved_s - target_s)
        return abs(off / target_s * 100) > self.pct and off > self.ms / 1000

    def halved(self) -> DeviceTolerance:
        """Half of it, both parts: what the throttle mode corrects and the sampling aims within."""
        return DeviceTolerance(self.pct / 2, self.ms / 2)

    def describe(self) -> str:
        """As a report states it: "max(10%, 0.1 ms)", or "10%" for the relative rule alone."""
        return f"max({self.pct:g}%, {self.ms:g} ms)" if self.ms else f"{self.pct:g}%"


DEFAULT = DeviceTolerance()  # an experiment's unless it says otherwise, and `testbed calibrate`'s
