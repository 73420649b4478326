"""An RPC study's sweep (issue 46, `rpc:`): its file becomes a plan of batches (each operation at its
own sizes, over each transport and server, on shaped and unshaped links, with its calls per rate), the
run's files hold it (the unshaped rate, the new columns, standard JSON), and its bytes per call come
from the appliance's port counters around each trial."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

from analysis.report_rpc import links_note
from appliance.shaper import link_counters, plan_shaping
from appliance.tc_ops import FRESH, port_ops
from contracts.agent_answers import CounterSnapshot
from contracts.errors import UserError
from contracts.grid import UNSHAPED, parse_rates, rate_label
from contracts.manifest import Experiment as ManifestExperiment
from contracts.manifest import Manifest, Session
from contracts.profiles import LinkSpec
from contracts.rpc_study import LARGE_DATA_K, STUDY_OPS, expected_bytes
from contracts.trials_file import TrialRecord, TrialWriter, read_trials
from contracts.units import small_burst
from contracts.worker_api import TrialResult, TrialSpec
from testbed.estimate import model_for
from testbed.experiment import load_experiment, planned_trials
from testbed.sweep.plan import plan_trials, rate_groups
from testbed.sweep.rpc_wire import WireCount, shape_for_calls
from tests.helpers import write_experiment

STUDY = Path(__file__).resolve().parents[2] / "experiments" / "rpc-study.yaml"

TINY = """\
rpc:
  calls: 50
  operations:
    SayHello:
    SendRcvLargeData: [128, 8192]
rates: [none, 10]
reps: 2
"""


def test_the_shipped_study_plans_each_operation_at_its_own_sizes_on_every_link():
    exp = load_experiment(STUDY)
    assert exp.rpc_study and not exp.local and exp.ops == STUDY_OPS
    assert exp.sizes_of("SendRcvLargeData") == LARGE_DATA_K and exp.sizes_of("Average") == (
        10,
        100,
        1000,
        10000,
    )
    assert exp.rates_mbps == (10.0, 100.0, UNSHAPED)
    trials = plan_trials(exp)
    sizes = sum(len(exp.sizes_of(op)) for op in exp.ops)  # 1 + 4 + 4 + 7
    ways = len(exp.methods) * len(exp.servers)  # tagless and grpc, each on python and cpp
    assert len(trials) == planned_trials(exp) == sizes * ways * 3 * exp.reps == 576
    assert {(t.op, t.size) for t in trials} == {(op, n) for op in exp.ops for n in exp.sizes_of(op)}
    assert {(t.method, t.server) for t in trials} == {
        (m, s) for m in ("tagless", "grpc") for s in ("python", "cpp")
    }
    groups = rate_groups(exp, trials)
    assert [p.label() for p, _ in groups] == ["10 Mbit/s", "100 Mbit/s", "unshaped"]
    assert [exp.calls_of(p.rate_mbps) for p, _ in groups] == [100, 300, 1000]
    low, high = model_for(exp, None, None).duration_s()
    assert low == high < 15 * 60  # the bound, by the estimate


def test_one_count_of_calls_is_every_rates_and_the_default_is_the_studys(tmp_path):
    exp = load_experiment(write_experiment(tmp_path, TINY))
    assert exp.calls == exp.calls_of(10.0) == exp.calls_of(UNSHAPED) == 50 and exp.calls_at == ()
    assert exp.sizes_of("SayHello") == (7,) and exp.methods == ("tagless", "grpc")
    trials = plan_trials(exp)
    assert len(trials) == 3 * 2 * 2 * 2 and all(t.server == "python" for t in trials)
    default = load_experiment(write_experiment(tmp_path, TINY.replace("  calls: 50\n", "")))
    assert default.calls == 1000


@pytest.mark.parametrize(
    "change, says",
    [
        (("SendRcvLargeData: [128, 8192]", "SendRcvLargeData: [100]"), "has no K = 100"),
        (("SayHello:", "Sleep:"), "unknown operation 'Sleep'"),
        (("rates: [none, 10]", "rates: [none, 10]\nops: [mul]"), "drop ops"),
        (("calls: 50", "calls: {none: 50}"), "no count of calls for 10 Mbit/s"),
        (("calls: 50", "calls: 0"), "is not a count of calls"),
        (("reps: 2", "reps: 2\nclient_device: paper-p4"), "at host speed"),
        (("reps: 2", "reps: 2\nmethods: [tagless, json]"), "json is not an RPC study's transport"),
        (("reps: 2", "reps: 2\nservers: [python, go]"), "no study server in go"),
    ],
)
def test_what_an_rpc_study_cannot_run_is_refused_in_one_line(tmp_path, change, says):
    path = write_experiment(tmp_path, TINY.replace(*change))
    with pytest.raises(UserError, match=says):
        load_experiment(path)


@pytest.mark.parametrize(
    "text, says",
    [
        (
            "ops: [SayHello]\nsizes: [7]\nrates: [10]\nmethods: [grpc]\nreps: 1\n",
            "SayHello is an RPC study's",
        ),
        ("ops: [mul]\nsizes: [100]\nrates: [10]\nmethods: [tagless]\nreps: 1\n", "tagless is an RPC study's"),
        (
            "ops: [mul]\nsizes: [100]\nrates: [none, 10]\nmethods: [raw]\nreps: 1\n",
            "none .unshaped. is an RPC",
        ),
    ],
)
def test_an_offload_sweep_refuses_the_studys_ops_transport_and_unshaped_link(tmp_path, text, says):
    with pytest.raises(UserError, match=says):
        load_experiment(write_experiment(tmp_path, text))


def test_the_unshaped_link_is_none_in_a_file_inf_in_trials_and_none_in_the_manifest(tmp_path):
    assert parse_rates("none,10") == (10.0, UNSHAPED) and rate_label(UNSHAPED) == "unshaped"
    exp = load_experiment(STUDY)
    text = json.dumps(exp.as_dict(), allow_nan=False)  # standard JSON: no Infinity
    assert '"none"' in text
    assert ManifestExperiment.from_dict(json.loads(text)) == exp
    path = tmp_path / "trials.csv"
    writer = TrialWriter(path)
    row = TrialRecord(
        "SendRcvLargeData", 8192, "grpc", True, run_id="r", trial=0, rate_mbps=UNSHAPED, t_total=0.4,
        calls=100, t_call_median=0.004, t_call_p99=0.006, cpu_server_call=0.0004, wire_up=66397.5,
        wire_down=66317.0, bytes_up=62420, bytes_down=62420, server="cpp",
    )  # fmt: skip
    writer.write(row)
    writer.close()
    assert ",inf," in path.read_text()
    (back,) = read_trials(path).records
    assert back == row and math.isinf(back.rate_mbps)


def test_a_trial_spec_carries_its_batch_and_a_result_its_per_call_figures():
    spec = TrialSpec(
        trial=3, op="Average", size=10, dtype="float64", method="tagless", server="cpp", calls=300
    )
    assert TrialSpec.from_json(json.loads(json.dumps(spec.to_json()))) == spec
    assert "calls" not in TrialSpec(trial=3, op="mul", size=10, dtype="float64", method="raw").to_json()
    result = TrialResult(
        ok=True, t_total=0.2, calls=300, t_call_median=6e-4, t_call_p99=9e-4, cpu_server_call=1e-5
    )
    assert TrialResult.from_json(result.to_json()) == result


@dataclass
class Ports:
    """A lab as `WireCount` sees it: its two ports, and the counters it reads, one snapshot a call
    (one more call than scripted is a bug here: IndexError)."""

    snapshots: list
    up_if: str = "t-aup"
    down_if: str = "t-adn"

    def counters(self) -> CounterSnapshot:
        return self.snapshots.pop(0)


def snapshot(up: int, down: int, link: bool = True) -> CounterSnapshot:
    sent = {"t-aup": {"bytes": up, "packets": 1}, "t-adn": {"bytes": down, "packets": 1}}
    return CounterSnapshot(at=0.0, htb={}, ovs={}, link=sent if link else None)


def test_bytes_per_call_are_what_the_ports_sent_over_the_batch_and_its_untimed_call():
    lab = Ports([snapshot(1000, 5000), snapshot(1000 + 101 * 80, 5000 + 101 * 120)])
    ok = TrialResult(ok=True, t_total=0.1, calls=100)
    assert WireCount(lab).per_call(ok) == (80.0, 120.0)
    failed = TrialResult(ok=False, error="refused")
    assert WireCount(Ports([snapshot(0, 0), snapshot(9, 9)])).per_call(failed) is None
    assert (
        WireCount(Ports([snapshot(0, 0, link=False), snapshot(9, 9)])).per_call(ok) is None
    )  # an older agent
    assert WireCount(Ports([snapshot(900, 900), snapshot(10, 10)])).per_call(ok) is None  # a port replaced


class Link:
    """A link message as pyroute2 gives it (`get_attr`), captured from a veth in a namespace."""

    def __init__(self, attrs: dict) -> None:
        self.attrs = attrs

    def get_attr(self, name: str):
        return self.attrs.get(name)


def test_a_ports_sent_bytes_come_from_its_64_bit_statistics():
    stats = {"rx_bytes": 516, "tx_bytes": 712, "tx_packets": 8, "rx_packets": 6}
    assert link_counters(Link({"IFLA_STATS64": stats})) == {"bytes": 712, "packets": 8}
    assert link_counters(Link({})) == {"bytes": 0, "packets": 0}


def test_the_estimates_bytes_put_grpcs_tags_on_every_large_data_member():
    for k in LARGE_DATA_K:
        tagless, grpc = (
            expected_bytes("SendRcvLargeData", k, "tagless"),
            expected_bytes("SendRcvLargeData", k, "grpc"),
        )
        assert tagless[0] == 4 * k + 16 and grpc[0] - tagless[0] > 1.5 * k


def test_an_rpc_studys_link_is_shaped_with_a_burst_of_two_frames(netns):
    """The default burst (a timer tick of data: 51514 bytes at 100 Mbit/s, HZ 250) passes a
    LargeData8192 message at line rate; a study shapes with `small_burst` instead."""
    assert small_burst(1500) == 3028
    default = netns.link_at(100_000_000)
    assert default.burst is None  # derived from the rate where it is applied (`plan_shaping`)
    netns.burst = small_burst(netns.inv.link.mtu)
    link = netns.link_at(100_000_000)
    assert link.burst == 3028 and link.up_rate == link.down_rate == 100_000_000
    (up, down) = plan_shaping(link, "a-up", "a-down", hz=250)
    assert (
        up.burst == down.burst == 3028 and plan_shaping(default, "a-up", "a-down", hz=250)[0].burst == 51514
    )


def test_a_serialized_link_puts_netem_at_the_rate_under_each_ports_class():
    link = LinkSpec(10_000_000, 10_000_000, burst=3028, serialize=True)
    up, down = plan_shaping(link, "a-up", "a-down", hz=250)
    assert up.needs_netem and down.needs_netem and up.netem_limit == 1000
    (netem,) = [op for op in port_ops(up, FRESH) if op.kind == "netem"]
    assert netem.action == "replace" and dict(netem.params)["rate"] == 10_000_000
    assert "netem rate 10mbit limit 1000" in netem.tc() and netem.netlink()["rate"] == "10000000bit"
    plain = plan_shaping(replace(link, serialize=False), "a-up", "a-down", hz=250)[0]
    assert not plain.needs_netem and not [op for op in port_ops(plain, FRESH) if op.kind == "netem"]


def test_an_rpc_studys_lab_serializes_where_the_appliance_has_netem(netns, monkeypatch):
    for has in (True, False):
        monkeypatch.setattr(type(netns), "netem_available", lambda self, has=has: has)
        session = Session("now", 0, "running")
        shape_for_calls(netns, session)
        link = netns.link_at(10_000_000)
        assert link.burst == 3028 and link.serialize is has
        assert session.serialized is has  # recorded: the times depend on it


@pytest.mark.parametrize(
    ("testbeds", "recorded"), [((True, True), True), ((True, False), False), ((False, True), False)]
)
def test_a_session_is_serialized_only_where_every_testbeds_links_were(netns, monkeypatch, testbeds, recorded):
    session = Session("now", 0, "running")
    for has in testbeds:
        monkeypatch.setattr(type(netns), "netem_available", lambda self, has=has: has)
        shape_for_calls(netns, session)
    assert session.serialized is recorded


def test_the_rpc_report_says_how_the_links_were_shaped_and_an_older_run_says_nothing():
    def run_of(*sessions: Session) -> Manifest:
        return Manifest("r", "complete", experiment=None, sessions=list(sessions))

    run = run_of(Session("a", 0, "complete", serialized=True))
    assert "held for its bytes at the rate" in links_note(run)
    run.sessions.append(Session("b", 0, "complete", serialized=False))
    assert links_note(run).startswith("The sessions differ")
    assert links_note(run_of(Session("a", 0, "complete"))) is None  # from before it was recorded
    assert "HTB alone" in links_note(run_of(Session("a", 0, "complete", serialized=False)))
    assert links_note(None) is None


def test_a_netem_rate_goes_into_netems_options_and_not_the_qdiscs_estimator():
    """pyroute2 left `rate` in the request, as the qdisc's TCA_RATE, which the kernel refused (ERANGE,
    in the stock-kernel guest): the shaper's request keeps it in TCA_NETEM_RATE alone."""
    from pyroute2.requests.tc import TcIPRouteFilter

    import appliance.shaper  # noqa: F401 - installs the netem request's fix

    up = plan_shaping(LinkSpec(1_000_000, 1_000_000, serialize=True), "a-up", "a-down", hz=250)[0]
    (netem,) = [op for op in port_ops(up, FRESH) if op.kind == "netem"]
    request = {"kind": "netem", "index": 3, **netem.netlink()}
    TcIPRouteFilter("replace").finalize(request)
    assert "rate" not in request
    assert request["options"]["attrs"] == [
        ["TCA_NETEM_RATE", {"rate": 125000.0, "packet_overhead": 0, "cell_size": 0, "cell_overhead": 0}]
    ]
