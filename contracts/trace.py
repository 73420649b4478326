"""A link trace as the appliance replays it: rate steps per direction (and netem's delay and loss).

The orchestrator parses trace files (`testbed.link.trace`: CSV or Mahimahi) into a `ReplayPlan` and
sends it as JSON; the appliance's agent validates it here, where it enters, and applies each step
at its time (`appliance.trace_player`). A step holds from its `t_s` until the next step's; `end_s` is the
trace's end (the time reference of every row is the replay's start instant, `trace_t`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from contracts.errors import UserError

# HTB cannot hold a rate of zero: an outage (no delivery in an interval) is shaped at this rate, under
# which a full frame waits 1.5 s; the check compares the achieved bytes with zero.
OUTAGE_BPS = 8_000


@dataclass(frozen=True)
class TraceStep:
    """One interval of the trace, from `t_s` (seconds after the start) until the next step's."""

    t_s: float
    up_bps: int  # client -> server; 0 is an outage
    down_bps: int  # server -> client
    delay_ms: float | None = None  # one-way, per direction (netem)
    loss_pct: float | None = None

    @property
    def needs_netem(self) -> bool:
        return bool(self.delay_ms) or bool(self.loss_pct)

    def as_list(self) -> list:
        return [self.t_s, self.up_bps, self.down_bps, self.delay_ms, self.loss_pct]


@dataclass(frozen=True)
class ReplayPlan:
    """The steps of one pass of a trace, in time order, and when the pass ends."""

    steps: tuple[TraceStep, ...]
    end_s: float
    source: str = ""  # where it came from, for messages and the record

    def __post_init__(self) -> None:
        problem = self._problem()
        if problem:
            raise UserError(f"trace {self.source or '(plan)'}: {problem}", "fix the trace file")

    def _problem(self) -> str | None:
        if not self.steps:
            return "no steps"
        if self.steps[0].t_s != 0:
            return f"the first step starts at {self.steps[0].t_s:g} s, not 0"
        for before, step in zip(self.steps, self.steps[1:], strict=False):
            if step.t_s <= before.t_s:
                return f"step at {step.t_s:g} s does not follow the one at {before.t_s:g} s"
        if not self.end_s > self.steps[-1].t_s:
            return f"ends at {self.end_s:g} s, not after its last step ({self.steps[-1].t_s:g} s)"
        for step in self.steps:
            values = (step.t_s, step.up_bps, step.down_bps, step.delay_ms or 0, step.loss_pct or 0)
            if any(not math.isfinite(v) or v < 0 for v in values):
                return f"step at {step.t_s:g} s has a negative or non-finite value"
            if (step.loss_pct or 0) > 100:
                return f"step at {step.t_s:g} s loses {step.loss_pct:g}% (over 100)"
        return None

    @property
    def needs_netem(self) -> bool:
        return any(step.needs_netem for step in self.steps)

    def interval(self, i: int) -> tuple[float, float]:
        """Where step `i` holds: from its `t_s` to the next step's (or the end)."""
        end = self.steps[i + 1].t_s if i + 1 < len(self.steps) else self.end_s
        return self.steps[i].t_s, end

    def step_at(self, t_s: float) -> TraceStep:
        """The step in force `t_s` seconds into the pass (looped: modulo its length)."""
        t = t_s % self.end_s
        chosen = self.steps[0]
        for step in self.steps:
            if step.t_s > t:
                break
            chosen = step
        return chosen

    def as_dict(self) -> dict:
        return {"steps": [s.as_list() for s in self.steps], "end_s": self.end_s, "source": self.source}

    @classmethod
    def from_dict(cls, data: dict) -> ReplayPlan:
        try:
            steps = tuple(
                TraceStep(float(t), int(up), int(down), _opt(delay), _opt(loss))
                for t, up, down, delay, loss in data["steps"]
            )
            return cls(steps, float(data["end_s"]), str(data.get("source", "")))
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"not a replay plan: {exc!r}") from None


def _opt(value) -> float | None:
    return None if value is None else float(value)
