"""Replaying a trace, without root: the timed operations (in place after the first step), the
agent's `shape.replay` against a netlink double and a scripted clock, and the orchestrator's replay,
loop and check through the strict fake host."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from agent import verbs
from appliance import shaper as shaper_mod
from appliance import trace_player as replay_appliance
from appliance.tc_ops import CLASS_ID, FRESH, ROOT_ID, PortState
from appliance.trace_player import plan_replay
from contracts.agent_api import ShapeReplay, ShapeReplayPlan
from contracts.errors import UserError
from contracts.profiles import LinkSpec
from contracts.trace import OUTAGE_BPS, ReplayPlan, TraceStep
from contracts.units import expected_goodput
from testbed import cli
from testbed.link import trace_replay as replay_mod
from testbed.link.trace_check import htb_intervals, iperf3_intervals, iperf3_samples, summary
from tests.fake_answers import class_counters, replay_done
from tests.fakes import IPERF

HZ = 250
BASE = LinkSpec(100_000_000, 100_000_000)
SHAPED = PortState(exists=True, htb=True, htb_class=True)
PLAN = ReplayPlan(
    (
        TraceStep(0.0, 20_000_000, 10_000_000),
        TraceStep(0.1, 0, 40_000_000),
        TraceStep(0.2, 5_000_000, 5_000_000),
    ),
    0.5,
    "t.csv",
)


def test_first_step_from_the_ports_state_then_only_in_place_changes():
    timed = plan_replay(PLAN, BASE, "up0", "down0", {"up0": FRESH, "down0": SHAPED}, HZ)
    assert [t.t_s for t in timed] == [0.0, 0.1, 0.2]
    first = [op.tc() for op in timed[0].ops]
    assert first[0] == "tc qdisc replace dev up0 root handle 1: htb default 10"  # a fresh port
    assert first[1].startswith("tc class add dev up0 parent 1: classid 1:10 htb rate 20mbit ceil 20mbit")
    assert first[2].startswith("tc class change dev down0 parent 1: classid 1:10 htb rate 10mbit")
    for step in timed[1:]:
        assert [(op.action, op.kind) for op in step.ops] == [("change-class", "htb")] * 2
    outage = timed[1].ops[0]
    assert outage.ifname == "up0" and dict(outage.params)["rate"] == OUTAGE_BPS  # HTB cannot hold 0


def test_a_trace_with_delay_keeps_netem_in_place_at_zero():
    plan = ReplayPlan((TraceStep(0, 10**7, 10**7, 30.0, None), TraceStep(1, 10**7, 10**7)), 2.0)
    timed = plan_replay(plan, BASE, "u", "d", {"u": SHAPED, "d": SHAPED}, HZ)
    assert [op.tc().split(" dev ")[0] + " " + op.kind for op in timed[1].ops] == [
        "tc class change htb",
        "tc qdisc replace netem",
        "tc class change htb",
        "tc qdisc replace netem",
    ]
    assert "delay 0ms" in timed[1].ops[1].tc() and not any(op.action == "del" for t in timed for op in t.ops)


class Stats:
    def __init__(self, sent: int) -> None:
        self.sent = sent

    def get_attr(self, name: str):
        return {"TCA_STATS_BASIC": {"bytes": self.sent, "packets": self.sent // 1514}, "TCA_STATS_QUEUE": {}}[
            name
        ]


class Cls(dict):
    def __init__(self, sent: int) -> None:
        super().__init__(handle=CLASS_ID, parent=ROOT_ID)
        self.stats = Stats(sent)

    def get_attr(self, name: str):
        return {"TCA_KIND": "htb", "TCA_STATS2": self.stats}[name]


class Clock:
    """Monotonic time that moves only when the replay sleeps (or a request takes `cost`)."""

    def __init__(self, now: float = 100.0, cost: float = 0.0) -> None:
        self.now, self.cost, self.sleeps = now, cost, []

    def __call__(self) -> float:
        self.now += self.cost
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(round(seconds, 9))
        self.now += seconds


class Netlink:
    """The calls a replay makes on its netlink socket: ports' lookups and classes, with counters
    that grow at the rate in force (from the clock), and every tc request recorded with its time."""

    def __init__(self, clock: Clock, ports: dict[str, int], netem: bool = True) -> None:
        self.clock, self.index, self.netem = clock, {"lo": 1, **ports}, netem
        self.rate = dict.fromkeys(ports.values(), 0)
        self.sent = dict.fromkeys(ports.values(), 0.0)
        self.since = clock.now
        self.requests: list[tuple[float, str, int, dict]] = []

    def __call__(self):
        return self

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        return None

    def _advance(self) -> None:
        for index, rate in self.rate.items():
            self.sent[index] += rate / 8 * (self.clock.now - self.since)
        self.since = self.clock.now

    def link_lookup(self, ifname: str) -> list[int]:
        return [self.index[ifname]] if ifname in self.index else []

    def get_qdiscs(self, index: int) -> list:
        return []  # fresh ports: the first step puts our HTB there

    def get_classes(self, index: int) -> list:
        self._advance()
        return [Cls(round(self.sent[index]))] if self.rate[index] else []

    def tc(self, action: str, kind: str | None = None, index: int | None = None, **kw) -> None:
        if index == 1:
            if not self.netem:
                from pyroute2.netlink.exceptions import NetlinkError

                raise NetlinkError(2)
            return
        self._advance()
        self.requests.append((round(self.clock.now, 9), action, index, kw))
        if kind == "htb" and "rate" in kw:
            self.rate[index] = int(kw["rate"].removesuffix("bit"))


@pytest.fixture
def agent_socket(monkeypatch):
    """The agent's one netlink socket, a double, on a scripted clock; ports up0 (2) and down0 (3)."""
    clock = Clock()
    kernel = Netlink(clock, {"up0": 2, "down0": 3})
    monkeypatch.setattr(verbs, "_netlink", [kernel])

    def if_nametoindex(name: str) -> int:
        if name not in kernel.index:
            raise OSError(19, "No such device")
        return kernel.index[name]

    monkeypatch.setattr(shaper_mod, "socket", SimpleNamespace(if_nametoindex=if_nametoindex))
    monkeypatch.setattr(verbs, "kernel_hz", lambda: HZ)
    # the agent's clocks (the modules' `time`, not the interpreter's): wall = monotonic + 1e6
    clocks = SimpleNamespace(monotonic=clock, time=lambda: clock.now + 1_000_000.0, sleep=clock.sleep)
    monkeypatch.setattr(verbs, "time", clocks)
    monkeypatch.setattr(replay_appliance, "time", clocks)
    return clock, kernel


def replay_verb(plan: ReplayPlan, down_if: str, start: float):
    """The agent's `shape.replay` of `plan` on the double's ports, from `start` (wall clock)."""
    return verbs.VERBS["shape.replay"](
        ShapeReplay(plan=plan, link=BASE, up_if="up0", down_if=down_if, start=start)
    )


def test_agent_replay_applies_each_step_at_its_time_and_samples_the_counters(agent_socket):
    clock, kernel = agent_socket
    start = clock.now + 1_000_000.0 + 2.0  # in wall-clock time, 2 s from now
    answer = replay_verb(PLAN, "down0", start)
    assert answer.start == start
    # each step's requests went out at start + t_s on the monotonic clock (the start was 2 s ahead)
    at = sorted({t for t, *_ in kernel.requests})
    assert at == pytest.approx([102.0, 102.1, 102.2])
    assert [s.applied_s for s in answer.steps] == pytest.approx([0.0, 0.1, 0.2])
    assert answer.end.sampled_s == pytest.approx(0.5)
    assert [len(s.commands) for s in answer.steps] == [4, 2, 2]  # root+class per port, then in place
    # the counters show what each step let through: e.g. down at 40 Mbit/s for 0.1 s
    checks = htb_intervals(PLAN, answer, {"up": "up0", "down": "down0"})
    down = [round(c.achieved_bps) for c in checks if c.direction == "down"]
    assert down == pytest.approx([10_000_000, 40_000_000, 5_000_000], rel=1e-5)
    up_outage = next(c for c in checks if c.direction == "up" and c.t_s == 0.1)
    assert up_outage.error_pct is None and up_outage.achieved_bps == pytest.approx(OUTAGE_BPS)
    # the 100-ms intervals are flagged, not judged; the last one holds 300 ms
    assert [c.short for c in checks if c.direction == "down"] == [True, True, False]


def test_a_late_step_is_applied_at_once_and_its_time_recorded(agent_socket):
    clock, kernel = agent_socket
    clock.cost = 0.03  # every request takes 30 ms: steps fall behind
    start = clock.now + 1_000_000.0
    answer = replay_verb(PLAN, "down0", start)
    late = [s.applied_s - s.t_s for s in answer.steps]
    assert all(x > 0 for x in late)  # recorded as they happened, not as planned
    assert answer.steps[0].sampled_s >= answer.steps[0].applied_s  # counters after the change


def test_agent_refuses_delay_without_netem_before_changing_anything(agent_socket):
    clock, kernel = agent_socket
    kernel.netem = False
    plan = ReplayPlan((TraceStep(0, 10**7, 10**7, 20.0, None),), 1.0)
    with pytest.raises(UserError, match="no sch_netem") as refused:
        replay_verb(plan, "down0", clock.now + 1e6)
    assert "\n" not in str(refused.value) and kernel.requests == []


def test_agent_refuses_a_missing_port(agent_socket):
    with pytest.raises(UserError, match="appliance port gone0 does not exist"):
        replay_verb(PLAN, "gone0", 0.0)


def test_dry_run_verb_is_what_the_replay_applies(agent_socket):
    clock, kernel = agent_socket
    steps = verbs.VERBS["shape.replay.plan"](
        ShapeReplayPlan(plan=PLAN, link=BASE, up_if="up0", down_if="down0")
    )
    timed = plan_replay(PLAN, BASE, "up0", "down0", {"up0": FRESH, "down0": FRESH}, HZ)
    assert [s.to_json() for s in steps] == [t.as_dict() for t in timed]
    assert kernel.requests == []  # the dry run changed nothing
    answer = replay_verb(PLAN, "down0", clock.now + 1e6)
    assert [s.commands for s in answer.steps] == [s.commands for s in steps]
    assert len(kernel.requests) == sum(len(s.commands) for s in steps)  # one request per command


def test_replay_loop_on_one_time_axis_and_the_link_restored(netns):
    answers = []

    def shape_replay(plan, link, up_if, down_if, start):
        answers.append(start)
        return replay_done(start, [(0.0, {})], 0.5, {}, late_s=0.001)

    appliance = netns.hosts["appliance"].reply("shape.replay", shape_replay)
    done = replay_mod.replay(netns, PLAN, loops=3, lead_s=0.5, clock=lambda: 1000.0)
    assert answers == [1000.5, 1001.0, 1001.5]  # each pass starts where the last ended
    assert done.start == 1000.5 and len(done.passes) == 3
    assert done.lateness() == pytest.approx(0.001)
    assert appliance.verbs()[-1] == "shape.apply"  # the link as it was before (the inventory's)
    assert appliance.args("shape.apply")[-1]["link"]["up_rate"] == netns.inv.link.up_rate
    assert appliance.args("shape.replay")[0]["plan"] == PLAN.as_dict()


def test_dry_run_prints_the_appliance_plan(netns):
    netns.hosts["appliance"].reply(
        "shape.replay.plan", [{"t_s": 0.0, "commands": ["tc a"]}, {"t_s": 0.1, "commands": ["tc b"]}]
    )
    lines = replay_mod.dry_run(netns, PLAN)
    assert lines[0] == "at trace_t 0 s on fake appliance: tc a"
    assert lines[1].startswith("at trace_t 0.1 s on ") and lines[-1] == "at trace_t 0.5 s: end of the trace"


def test_checked_replay_with_a_captured_iperf3_flow(netns):
    """The check's flow runs client.iperf (scripted with a captured result); the replay's counters
    say the down port sent 9% under the rate in one interval, within 10%: the check finds both."""
    plan = ReplayPlan((TraceStep(0, 10**7, 2 * 10**7), TraceStep(1, 10**7, 4 * 10**7)), 2.0)
    captured = (Path(__file__).parents[1] / "data" / "captured" / "iperf3-down-100mbit.json").read_text()
    client = netns.hosts["client"].on(*IPERF, answer=(0, captured))
    down = netns.down_if

    def shape_replay(plan, link, up_if, down_if, start):
        sent = [0, 2_500_000, 2_500_000 + 4_550_000]  # 20 Mbit/s for 1 s, then 36.4 of 40 Mbit/s
        # HTB held packets back in every interval: the link, not the flow, set the pace
        steps = [(t, {down: class_counters(sent[i], i)}) for i, t in enumerate((0, 1))]
        return replay_done(start, steps, 2.0, {down: class_counters(sent[2], 2)})

    netns.hosts["appliance"].reply("shape.replay", shape_replay)
    done = replay_mod.checked_replay(netns, plan, loops=1, direction="down")
    (argv,) = client.ran(*IPERF)
    assert "--reverse" in argv and argv[argv.index("--omit") + 1] == "0"
    htb = [c for c in done.checks if c.measure == "htb"]
    assert [round(c.error_pct, 1) for c in htb] == [0.0, -9.0]
    verdict = summary(done.checks, tolerance_pct=10)
    assert verdict["htb.down"]["failed"] == [] and verdict["htb.down"][
        "worst_pct_at_least_1s"
    ] == pytest.approx(9.0)
    assert summary(done.checks, tolerance_pct=5)["htb.down"]["failed"] == [1.0]
    assert done.flow["direction"] == "down" and done.flow["goodput_bps"] > 0


def test_cli_refuses_link_flags_with_a_trace_and_check_without_passes(tmp_path, capsys, netns):
    trace = tmp_path / "t.csv"
    trace.write_text("0,1,1\n1,1,1\n")
    inv = str(netns.inv.path)
    assert cli.main(["--inventory", inv, "shape", "--trace", str(trace), "--rate", "20", "--dry-run"]) == 2
    assert "--rate and --trace both set the link" in capsys.readouterr().err
    assert cli.main(["--inventory", inv, "shape", "--check", "--rate", "20", "--dry-run"]) == 2
    assert "go with --trace" in capsys.readouterr().err
    with pytest.raises(UserError, match="needs a number of passes"):
        replay_mod.checked_replay(
            netns, ReplayPlan.from_dict(json.loads(json.dumps(PLAN.as_dict()))), 0, "down"
        )


def test_iperf3_check_on_captured_intervals():
    """Trace intervals placed exactly on iperf3's own intervals get iperf3's own goodput; one
    straddling two gets their time-weighted mean; none is invented outside the capture. The capture
    omitted its first second, after which iperf3's clock starts again at 0."""
    data = json.loads(
        (Path(__file__).parents[1] / "data" / "captured" / "iperf3-down-100mbit.json").read_text()
    )
    sums = [i["sum"] for i in data["intervals"]]
    assert sums[0]["omitted"] and sums[1]["start"] < 0.01  # the restart
    omitted = sums[0]["end"]
    one, two = ({**s, "start": s["start"] + omitted, "end": s["end"] + omitted} for s in sums[1:])
    plan = ReplayPlan(
        (TraceStep(0, 10**8, 10**8), TraceStep(round(two["start"] - one["start"], 6), 10**8, 5 * 10**7)),
        round(two["end"] - one["start"], 6),
    )
    samples = iperf3_samples(data)
    aligned = iperf3_intervals(plan, samples, one["start"], "down")
    assert [c.achieved_bps for c in aligned] == pytest.approx(
        [one["bits_per_second"], two["bits_per_second"]], rel=1e-4
    )
    assert aligned[0].target_bps == pytest.approx(expected_goodput(10**8))
    assert aligned[0].error_pct == pytest.approx(
        (one["bits_per_second"] / expected_goodput(10**8) - 1) * 100, rel=1e-3
    )
    assert aligned[1].target_bps == pytest.approx(
        expected_goodput(5 * 10**7)
    )  # the trace's rate, not iperf3's
    # straddling: half of interval 1 and half of interval 2
    half = ReplayPlan((TraceStep(0, 10**8, 10**8),), 1.0)
    (straddle,) = iperf3_intervals(half, samples, one["start"] + 0.5, "down")
    mean = (one["bits_per_second"] + two["bits_per_second"]) / 2
    assert straddle.achieved_bps == pytest.approx(mean, rel=1e-3)
    assert iperf3_intervals(half, samples, two["end"] - 0.5, "down") == []  # past the capture's end


def test_only_busy_intervals_are_judged_and_short_ones_flagged():
    """An interval in which HTB held nothing back (no overlimits: the flow, not the link, set the
    pace, as after an outage) is listed idle, never failed; one under 0.2 s is flagged short."""
    plan = ReplayPlan(
        (TraceStep(0, 0, 10**7), TraceStep(1, 0, 10**7), TraceStep(2, 0, 10**7), TraceStep(3, 0, 10**7)), 3.19
    )

    def sample(t, sent, over):
        return (t, {"d": class_counters(sent, over)})

    # 1 s at exactly 10 Mbit/s (busy); 1 s at 8 (busy: fails); 1 s at 5 (idle); 0.19 s at 10 (busy)
    steps = [sample(0, 0, 0), sample(1, 1_250_000, 40), sample(2, 2_250_000, 90), sample(3, 2_875_000, 90)]
    answer = replay_done(0.0, steps, 3.19, {"d": class_counters(3_112_500, 95)})
    checks = htb_intervals(plan, answer, {"down": "d"})
    assert [round(c.error_pct, 6) for c in checks] == [0.0, -20.0, -50.0, 0.0]
    assert [c.idle for c in checks] == [False, False, True, False]
    assert [c.short for c in checks] == [False, False, False, True]
    verdict = summary(checks, tolerance_pct=10)["htb.down"]
    assert verdict["failed"] == [1.0] and verdict["idle"] == [2.0] and verdict["short_flagged"] == [3.0]
    assert verdict["worst_pct_at_least_1s"] == pytest.approx(20.0)
