"""`testbed shape --trace`: replay a link trace on a running testbed, and check what it achieved.

The orchestrator chooses the start instant (`trace_t` 0, in wall-clock seconds) a little ahead of
its request, so the appliance's agent has it before the first step is due; each pass of a looped
trace starts where the previous one ended on that same time axis, so every row of every pass refers
to the one instant. The agent applies the steps and answers when the pass is over
(`appliance.trace_player`). Afterwards the link is put back as it was before the replay.

With a check, an iperf3 flow loads one direction of the link for the whole replay, and the answer's
counters (and iperf3's own intervals) are compared with the trace interval by interval
(`testbed.link.trace_check`).
"""

from __future__ import annotations

import json
import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from contracts.agent_answers import ReplayDone
from contracts.command import Result
from contracts.errors import UserError
from contracts.trace import ReplayPlan
from testbed.backends.lab import Lab
from testbed.link.trace_check import IntervalCheck, htb_intervals, iperf3_intervals, iperf3_samples
from testbed.link.validate import iperf3_result

LEAD_S = 0.5  # the start instant ahead of the request: the agent's round trip is milliseconds
FLOW_LEAD_S = 2.0  # with a check: the flow's time to fill the link's queue before the first step


@dataclass
class Replay:
    """What a replay did: its start instant, each pass's answer, and the check's intervals."""

    plan: ReplayPlan
    start: float  # wall-clock seconds: trace_t 0
    passes: list[ReplayDone] = field(default_factory=list)
    checks: list[IntervalCheck] = field(default_factory=list)
    flow: dict | None = None  # the check's iperf3 flow: direction, and its result or error

    def lateness(self) -> float:
        """The latest any step (or end sample) came after its time, in seconds."""
        late = [
            s.applied_s - (k * self.plan.end_s + s.t_s) for k, p in enumerate(self.passes) for s in p.steps
        ]
        return max(late, default=0.0)

    def as_dict(self) -> dict:
        return {
            "plan": self.plan.as_dict(),
            "start": self.start,
            "passes": [p.to_json() for p in self.passes],
            "flow": self.flow,
            "checks": [c.as_dict() for c in self.checks],
        }


def dry_run(lab: Lab, plan: ReplayPlan) -> list[str]:
    """What the appliance would apply, step by step, from its ports' state now (one pass)."""
    where = lab.host("appliance").where
    lines = []
    for step in lab.replay_plan(plan):
        lines += [f"at trace_t {step.t_s:g} s on {where}: {cmd}" for cmd in step.commands]
    lines.append(f"at trace_t {plan.end_s:g} s: end of the trace")
    return lines


def replay(
    lab: Lab,
    plan: ReplayPlan,
    loops: int = 1,
    lead_s: float = LEAD_S,
    on_pass: Callable[[int, ReplayDone], None] = lambda k, answer: None,
    clock: Callable[[], float] = time.time,
    start: float | None = None,
    stop: threading.Event | None = None,
) -> Replay:
    """Play `plan` `loops` times (0: until interrupted, or until `stop` is set, seen between passes)
    from one start instant (`start`, wall clock; default `lead_s` from now); restore the link."""
    before = lab.link_in_force()
    start = clock() + lead_s if start is None else start
    done = Replay(plan, start)
    k = 0
    while (loops == 0 or k < loops) and not (stop is not None and stop.is_set()):
        answer = lab.replay_trace(plan, start + k * plan.end_s)
        done.passes.append(answer)
        on_pass(k, answer)
        k += 1
    lab.shape(before)
    return done


def checked_replay(lab: Lab, plan: ReplayPlan, loops: int, direction: str) -> Replay:
    """`replay` under an iperf3 flow in `direction` (up: client -> server), then the check."""
    if loops == 0:
        raise UserError("--check needs a number of passes", "give --loop N with --check, or drop --check")
    duration = math.ceil(FLOW_LEAD_S + LEAD_S + loops * plan.end_s + 1)
    client = lab.host("client")
    argv = client.python(
        "client.iperf",
        "--server",
        str(lab.inv.host("server").address.ip),
        "--port",
        str(lab.inv.iperf3_port),
        "--duration",
        str(duration),
        "--omit",
        "0",
    )
    if direction == "down":
        argv.append("--reverse")
    flow: dict = {}

    def run_flow() -> None:
        # the link is measured, not the device: outside the client's CPU limit
        flow["result"] = client.run(argv, check=False, limited=False, timeout=duration + 60)
        flow["returned"] = time.time()

    thread = threading.Thread(target=run_flow, name="trace check flow", daemon=True)
    thread.start()
    try:
        done = replay(lab, plan, loops, lead_s=FLOW_LEAD_S + LEAD_S)
    finally:
        thread.join()
    result: Result = flow["result"]
    outcome = iperf3_result(result)
    port = lab.up_if if direction == "up" else lab.down_if
    for k, answer in enumerate(done.passes):
        done.checks += htb_intervals(plan, answer, {direction: port}, k)
    if isinstance(outcome, str):
        done.flow = {"direction": direction, "error": outcome}
        return done
    data = json.loads(result.stdout)
    samples = iperf3_samples(data)
    # iperf3's time 0, in wall-clock time: its process returned just after its last interval
    iperf3_zero = flow["returned"] - samples[-1][1]
    offset = done.start - iperf3_zero  # trace_t 0 in iperf3's time (its process's exit: +- tens of ms)
    for k in range(len(done.passes)):
        done.checks += iperf3_intervals(
            plan, samples, offset + k * plan.end_s, direction, lab.inv.link.mtu, k
        )
    done.flow = {
        "direction": direction,
        "goodput_bps": outcome[0],
        "retransmits": outcome[1],
        "offset_s": offset,
        "samples": samples,  # iperf3's intervals (start, end, bytes) in its own time
    }
    return done
