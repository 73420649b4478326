"""Replaying a link trace on the appliance: each step's in-place HTB change, applied at its time.

`plan_replay` turns a `ReplayPlan` into timed operations (`TimedOps`) from the ports' state now:
the first step may put our HTB in place (a fresh port) or netem under it; every later step is
`tc class change` on both ports (netem `replace` too, for a trace with delay or loss), so no qdisc
is deleted or re-added mid-trace. A step that drops delay and loss to zero keeps its netem at 0 ms
and 0% rather than deleting it. `--dry-run` prints this list; `replay` executes exactly it.

`replay` keeps time on the monotonic clock from a start instant the orchestrator chose (given in
wall-clock time, the one clock the two machines share, converted once on arrival). At each step it
applies the step and then reads both classes' counters (the interval's boundary: a fresh port has no
class before the first step); at the end it reads them once more. It answers what it applied and when, to the microsecond, so a late step is
seen, never hidden.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, replace

from appliance.shaper import PortShaping, Shaper, plan_shaping
from appliance.tc_ops import CLASS_HANDLE, NETEM_HANDLE, PortState, TcOp, port_ops
from contracts.profiles import LinkSpec
from contracts.trace import OUTAGE_BPS, ReplayPlan, TraceStep


@dataclass(frozen=True)
class TimedOps:
    """The operations of one step, due `t_s` seconds after the start."""

    t_s: float
    ops: tuple[TcOp, ...]

    def as_dict(self) -> dict:
        return {"t_s": self.t_s, "commands": [op.tc() for op in self.ops]}


def step_ports(step: TraceStep, base: LinkSpec, up_if: str, down_if: str, hz: int) -> list[PortShaping]:
    """Both ports' shaping for one step: the step's rates (an outage at `OUTAGE_BPS`), ceil at the
    rate and the default burst, as `Lab.set_rate` shapes a sweep's cell."""
    link = replace(
        base,
        up_rate=step.up_bps or OUTAGE_BPS,
        down_rate=step.down_bps or OUTAGE_BPS,
        ceil=None,
        burst=None,
        delay_ms=step.delay_ms,
        loss_pct=step.loss_pct,
    )
    return plan_shaping(link, up_if, down_if, hz)


def _netem_at_zero(port: PortShaping) -> TcOp:
    """netem kept in place at no delay and no loss (deleting it would change the qdisc tree mid-trace)."""
    limit = port.netem_limit or 1000
    return TcOp("replace", "netem", port.ifname, NETEM_HANDLE, CLASS_HANDLE, (("delay", 0), ("limit", limit)))


def plan_replay(
    plan: ReplayPlan,
    base: LinkSpec,
    up_if: str,
    down_if: str,
    states: dict[str, PortState],
    hz: int,
) -> list[TimedOps]:
    """Every step's operations, from the ports' `states` before the replay (see the module)."""
    timed = []
    netem = plan.needs_netem
    for i, step in enumerate(plan.steps):
        ops: list[TcOp] = []
        for port in step_ports(step, base, up_if, down_if, hz):
            if i == 0:
                state = states[port.ifname]
            else:  # what the previous step left: our HTB and its class, netem if the trace has it
                state = PortState(exists=True, htb=True, htb_class=True, netem=netem)
            port_plan = port_ops(port, state)
            if netem and not port.needs_netem:
                port_plan = [op for op in port_plan if op.kind != "netem"] + [_netem_at_zero(port)]
            ops += port_plan
        timed.append(TimedOps(step.t_s, tuple(ops)))
    return timed


def replay(
    shaper: Shaper,
    timed: list[TimedOps],
    end_s: float,
    ifnames: list[str],
    start_mono: float,
    clock: Callable[[], float] | None = None,
    sleep: Callable[[float], None] | None = None,
) -> dict:
    """Apply each step at `start_mono + t_s` on `shaper`'s socket, sampling the classes' counters
    just after each step's change and at the end; returns what happened with the actual times (seconds
    after the start). The caller checked the ports (`Shaper.check_ports`) and the plan."""
    clock, sleep = clock or time.monotonic, sleep or time.sleep
    index = shaper.indexes(ifnames)

    def wait_until(t_s: float) -> None:
        left = start_mono + t_s - clock()
        if left > 0:
            sleep(left)

    steps = []
    for step in timed:
        wait_until(step.t_s)
        shaper.execute(list(step.ops), index)
        applied = clock() - start_mono
        counters = shaper.counters(index)  # after the change: a fresh port has no class before it
        sampled = clock() - start_mono
        steps.append(
            {
                "t_s": step.t_s,
                "sampled_s": round(sampled, 6),
                "applied_s": round(applied, 6),
                "counters": counters,
                "commands": [op.tc() for op in step.ops],
            }
        )
    wait_until(end_s)
    sampled = clock() - start_mono
    return {
        "steps": steps,
        "end": {"t_s": end_s, "sampled_s": round(sampled, 6), "counters": shaper.counters(index)},
    }
