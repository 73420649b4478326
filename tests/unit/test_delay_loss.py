"""Delay and loss as dimensions (issue 48, item 3), without root: their lists, the plan and its
groups, the round trip and loss judged from real ping output (tests/data/captured/, taken through
netem in the stock-kernel guest), a sweep on the fake testbed that validates and records them, the
refusal where the kernel has no netem, and runs of the format before them."""

from __future__ import annotations

import json
import statistics
from dataclasses import replace

import pytest

from contracts.errors import UserError
from contracts.grid import LinkPoint, parse_delays, parse_losses
from contracts.profiles import NETEM_FIX, NETEM_MISSING, LinkSpec
from contracts.run import TRIALS_MARK, read_manifest, read_trials
from contracts.run_format import FORMAT_VERSION
from testbed.backends.lab import Lab
from testbed.cli import build_parser
from testbed.cli import sweep as sweep_cli
from testbed.experiment import load_experiment, planned_trials
from testbed.link import validate as validate_mod
from testbed.link.delay_loss import (
    LOSS,
    RTT_PING,
    RTT_TCP,
    Ping,
    judge_loss,
    judge_rtt,
    one_way_loss_pct,
    parse_handshakes,
    parse_ping,
    require_netem,
    round_trip_loss,
)
from testbed.overrides import override
from testbed.sweep.plan import plan_trials, rate_groups
from testbed.sweep.rounds import Rounds
from tests.fakes import CAPTURED, FAKE_SWEEP
from tests.helpers import trials_by_id

LINK = LinkSpec(20_000_000, 20_000_000, delay_ms=25.0, loss_pct=10.0)  # what the capture was shaped to
NETEM = parse_ping((CAPTURED / "ping-netem-delay-loss.txt").read_text())  # 25 ms, 10% each way
PLAIN = parse_ping((CAPTURED / "ping-plain.txt").read_text())  # the same veth pair without netem


# ------------------------------------------------------------------ the lists and the points
def test_delays_and_losses_parse_as_sorted_distinct_numbers_from_text_or_lists():
    assert parse_delays("50,0,25ms,25") == (0.0, 25.0, 50.0)
    assert parse_delays([10, 2.5]) == (2.5, 10.0)
    assert parse_losses("0,1%,5") == (0.0, 1.0, 5.0)


@pytest.mark.parametrize(
    ("parse", "text", "said"),
    [
        (parse_delays, "fast", "'fast' is not a delay"),
        (parse_delays, "-5", "out of range"),
        (parse_delays, "nan", "out of range"),
        (parse_losses, "100", "out of range"),
        (parse_losses, "", "no losses given"),
    ],
)
def test_a_bad_delay_or_loss_is_refused_in_one_line(parse, text, said):
    with pytest.raises(UserError, match=said) as refused:
        parse(text, "--x")
    assert "\n" not in str(refused.value) and refused.value.fix


def test_a_link_point_is_labelled_and_seeded_as_rates_were_without_delay_or_loss():
    assert LinkPoint(20.0).label() == "20 Mbit/s"
    assert LinkPoint(20.0, 25.0, 1.0).label() == "20 Mbit/s, 25 ms delay, 1% loss"
    assert LinkPoint(20.0).seed_text() == str(20.0)  # the seed a rate group had before delays
    assert LinkSpec(1, 1, delay_ms=5.0).at_rate(20_000_000, None, 2.0) == LinkSpec(
        20_000_000, 20_000_000, delay_ms=5.0, loss_pct=2.0
    )


EXPERIMENT = """\
name: delays
ops: [mul]
sizes: [100]
rates: [10, 40]
delays: [25, 0]
losses: [0, 5]
methods: [json, raw]
reps: 2
"""


@pytest.fixture
def delays_exp(tmp_path):
    path = tmp_path / "delays.yaml"
    path.write_text(EXPERIMENT)
    return load_experiment(path)


def test_an_experiments_delays_and_losses_are_dimensions_of_its_grid(delays_exp):
    exp = delays_exp
    assert (exp.delays_ms, exp.losses_pct, exp.needs_netem) == ((0.0, 25.0), (0.0, 5.0), True)
    trials = plan_trials(exp)
    assert len(trials) == planned_trials(exp) == 2 + 2 * 2 * 2 * 2 * 2  # local, then 8 points x 2 methods
    groups = rate_groups(exp, trials)
    assert [p and (p.rate_mbps, p.delay_ms, p.loss_pct) for p, _ in groups] == [
        None, (10, 0, 0), (10, 0, 5), (10, 25, 0), (10, 25, 5), (40, 0, 0), (40, 0, 5), (40, 25, 0), (40, 25, 5)
    ]  # fmt: skip
    for point, group in groups[1:]:
        assert {t.link for t in group} == {point} and len(group) == 4
    cells = {t.cell for t in trials}
    assert len(cells) == 1 + 16  # a cell per point and method: never pooled across delays or losses
    # no delay or loss in the experiment: the plan, its cells and its order are what they were
    plain = replace(exp, delays_ms=(), losses_pct=())
    assert all(t.delay_ms is None and t.loss_pct is None for t in plan_trials(plain))
    assert [t.cell[:5] for t in plan_trials(plain)] == [t.cell for t in plan_trials(plain)]
    assert not plain.needs_netem and not replace(exp, delays_ms=(0.0,), losses_pct=(0.0,)).needs_netem


def test_flags_give_delays_and_losses_as_rates_are_given(delays_exp):
    exp = override(delays_exp, {"delays": "0,50", "losses": "1"})
    assert (exp.delays_ms, exp.losses_pct) == ((0.0, 50.0), (1.0,))
    args = build_parser().parse_args(["sweep", "--delays", "0,25", "--losses", "0,5"])
    assert (args.delays, args.losses) == ("0,25", "0,5")
    args = build_parser().parse_args(["validate", "--rates", "20", "--delays", "50", "--losses", "5"])
    assert (args.delays, args.losses) == ("50", "5")
    with pytest.raises(UserError, match="--delays"):
        override(delays_exp, {"delays": "slow"})


def test_an_adaptive_round_is_grouped_by_point_of_the_link(delays_exp):
    exp = replace(delays_exp, min_reps=2, reps=4)
    trials = plan_trials(exp)
    blocks = Rounds(exp, trials, {}).round_blocks()
    assert len(blocks) == 9 and {p for p, _ in blocks} == {None, *exp.link_points()}
    assert all({t.link for t in block} == {p} for p, block in blocks)


# ------------------------------------------------------------------ judging real ping output
def test_ping_output_through_netem_parses_to_its_replies_and_summary():
    assert (NETEM.sent, NETEM.received, len(NETEM.rtts_ms)) == (40, 35, 35)
    assert statistics.median(NETEM.rtts_ms) == pytest.approx(50.8)
    assert (PLAIN.sent, PLAIN.received, len(PLAIN.rtts_ms)) == (10, 10, 10)
    lost = parse_ping((CAPTURED / "ping-unreachable.txt").read_text())
    assert lost == Ping(5, 0, ())
    with pytest.raises(ValueError, match="no ping statistics"):
        parse_ping("ping: connect: Network is unreachable\n")


def test_the_round_trip_is_twice_the_delay_plus_the_links_own_within_the_tolerance():
    own = statistics.median(PLAIN.rtts_ms)
    check = judge_rtt(RTT_PING, list(NETEM.rtts_ms), own, LINK, 20.0, 5.0)
    assert check.ok and check.expected == pytest.approx(50 + own, abs=1e-3)
    assert check.measured == pytest.approx(50.8) and check.samples == 35
    # told 40 ms one way, the same pings are far short of the 80 ms it would make
    wrong = judge_rtt(RTT_PING, list(NETEM.rtts_ms), own, replace(LINK, delay_ms=40.0), 20.0, 5.0)
    assert not wrong.ok and "50.8 vs 80.4 ms" in wrong.describe()
    # 1.4 ms off (told 24.5 ms one way): within 5%, not within 0.5% (nor the 1 ms floor): the rate's rule
    near = replace(LINK, delay_ms=24.5)
    assert judge_rtt(RTT_PING, list(NETEM.rtts_ms), own, near, 20.0, 5.0).ok
    assert not judge_rtt(RTT_PING, list(NETEM.rtts_ms), own, near, 20.0, 0.5).ok


def test_without_added_delay_the_round_trip_holds_within_a_millisecond_of_the_links_own():
    no_delay = replace(LINK, delay_ms=None)
    assert judge_rtt(RTT_TCP, [0.9, 1.1, 1.2], 0.4, no_delay, 20.0, 5.0).ok
    assert not judge_rtt(RTT_TCP, [2.0, 2.1, 2.2], 0.4, no_delay, 20.0, 5.0).ok
    missing = judge_rtt(RTT_TCP, [], 0.4, no_delay, 20.0, 5.0, "ConnectionRefusedError: refused")
    assert not missing.ok and missing.measured is None and "refused" in missing.describe()


def test_loss_is_judged_within_the_binomial_interval_of_the_pings_lost():
    assert round_trip_loss(10.0) == pytest.approx(0.19)
    assert one_way_loss_pct(round_trip_loss(5.0)) == pytest.approx(5.0)
    check = judge_loss(NETEM, LINK, 20.0)  # 5 of 40 round trips lost: 6.5% a direction
    assert check.ok and check.measure == LOSS and check.measured == pytest.approx(6.46, abs=0.01)
    assert check.low < 10.0 < check.high and check.low > 0
    assert not judge_loss(NETEM, replace(LINK, loss_pct=None), 20.0).ok  # 5 of 40 lost is not no loss
    assert not judge_loss(NETEM, replace(LINK, loss_pct=30.0), 20.0).ok
    clean = Ping(200, 200, (0.4,) * 200)
    assert judge_loss(clean, replace(LINK, loss_pct=0.0), 20.0).ok
    assert not judge_loss(clean, replace(LINK, loss_pct=5.0), 20.0).ok


def test_handshake_times_parse_from_the_client_modules_json():
    times, errors = parse_handshakes(json.dumps({"connect_ms": [50.1, 50.4], "errors": ["timeout"]}))
    assert (times, errors) == ([50.1, 50.4], ["timeout"])
    with pytest.raises(ValueError):
        parse_handshakes("[]")


# ------------------------------------------------------------------ on the fake testbed
def netem_link(lab, *, netem: bool = True, own_ms: float = 0.4) -> None:
    """The appliance's kernel has netem (or not); the client's pings and handshakes take what the link
    was last shaped to: twice its delay plus `own_ms`, losing what its loss makes them lose."""
    appliance = lab.hosts["appliance"]
    appliance.reply("shape.netem", netem)

    def shaped() -> dict:
        return appliance.args("shape.apply")[-1]["link"]

    def ping(argv):
        link, count = shaped(), int(argv[argv.index("-c") + 1])
        rtt = 2 * (link["delay_ms"] or 0) + own_ms
        lost = round(count * round_trip_loss(link["loss_pct"] or 0))
        lines = [
            f"64 bytes from 10.0.0.2: icmp_seq={i} ttl=64 time={rtt:.3g} ms"
            for i in range(lost + 1, count + 1)
        ]
        summary = f"{count} packets transmitted, {count - lost} received, {100 * lost / count:g}% packet loss"
        return 0 if not lost else 1, "\n".join(["PING 10.0.0.2", *lines, "", summary, ""])

    def handshakes(argv):
        rtt = 2 * (shaped()["delay_ms"] or 0) + own_ms + 0.1
        return 0, json.dumps({"connect_ms": [rtt] * int(argv[argv.index("--count") + 1]), "errors": []})

    lab.hosts["client"].on("ping", answer=ping)
    lab.hosts["client"].on("python", "-m", "client.handshake", answer=handshakes)


def run_sweep(lab, tmp_path, monkeypatch, text: str):
    monkeypatch.setattr(sweep_cli, "open_lab", lambda inv: lab)
    monkeypatch.setattr(validate_mod.time, "sleep", lambda s: None)
    experiment = tmp_path / "delays.yaml"
    experiment.write_text(text)
    results = tmp_path / "results"
    args = build_parser().parse_args(
        [
            "--inventory",
            str(lab.inv.path),
            "sweep",
            str(experiment),
            "--results",
            str(results),
            "--no-analyze",
        ]
    )
    return args.handler(args), results


SWEEP = """\
name: fake
ops: [mul]
sizes: [100]
rates: [10]
delays: [0, 25]
losses: [0, 5]
methods: [raw]
reps: 2
warmup: 0
trial_timeout: 5
validation: {duration: 1, retries: 0}
"""


def test_a_sweep_validates_and_records_each_point_of_the_link(lab, tmp_path, monkeypatch, capsys):
    netem_link(lab)
    status, results = run_sweep(lab, tmp_path, monkeypatch, SWEEP)
    assert status == 0
    assert "1 rate(s) x 2 delay(s) x 2 loss(es) x 1 method(s)" in capsys.readouterr().out
    (run_dir,) = results.iterdir()
    rows = trials_by_id(run_dir).values()
    remote = [r for r in rows if r["method"] != "local"]
    assert {(r["delay_ms"], r["loss_pct"]) for r in remote} == {("0.0", "0.0"), ("0.0", "5.0"), ("25.0", "0.0"),
                                                                ("25.0", "5.0")}  # fmt: skip
    assert all(r["ok"] == "true" for r in rows)
    assert (run_dir / "trials.csv").read_text().startswith(f"{TRIALS_MARK}{FORMAT_VERSION}\n")
    manifest = read_manifest(run_dir / "manifest.json")
    assert manifest.experiment.delays_ms == (0.0, 25.0) and manifest.experiment.losses_pct == (0.0, 5.0)
    netem = [c for c in manifest.validation if c.measure is not None]
    # the point without delay or loss has no netem to check; the three others a round trip each way
    # of measuring it and a loss
    assert sorted({(c.delay_ms, c.loss_pct) for c in netem}) == [(0.0, 5.0), (25.0, 0.0), (25.0, 5.0)]
    assert all(c.ok for c in manifest.validation) and len(netem) == 9
    rtt = next(c for c in netem if (c.measure, c.delay_ms, c.loss_pct) == (RTT_PING, 25.0, 5.0))
    assert rtt.expected == pytest.approx(50.4) and rtt.measured == pytest.approx(50.4)
    assert {(c.delay_ms, c.loss_pct) for c in manifest.counters} == {
        (0.0, 0.0),
        (0.0, 5.0),
        (25.0, 0.0),
        (25.0, 5.0),
    }
    # each point's trials ran with its delay and loss shaped, and the rate alone validated its goodput
    shaped = [
        (a["link"]["delay_ms"], a["link"]["loss_pct"]) for a in lab.hosts["appliance"].args("shape.apply")
    ]
    assert (25.0, 5.0) in shaped and (None, None) in shaped
    # the report names the round trip and loss checks apart from the rate's, and every point's cells
    from analysis import analyze

    report = (analyze(run_dir, plots=False, out=open("/dev/null", "w")) / "report.html").read_text()
    assert "link delay and loss" in report and "0 of 9 checks" in report
    assert "Delay and loss: decisions" in report and "Delay and loss: cells" in report


def test_a_delay_that_does_not_hold_skips_its_point_saying_what_was_measured(lab, tmp_path, monkeypatch):
    netem_link(lab)
    client = lab.hosts["client"]
    ping = client.commands[1][1]  # netem_link's ping, before its handshakes

    def slow(argv):  # the delayed link's pings come back 30 ms late
        status, out = ping(argv)
        late = lab.hosts["appliance"].args("shape.apply")[-1]["link"]["delay_ms"] == 25.0
        return status, out.replace("time=50.4 ms", "time=80.4 ms") if late else out

    client.on("ping", answer=slow)
    status, results = run_sweep(lab, tmp_path, monkeypatch, SWEEP)
    assert status == sweep_cli.EXIT_UNUSABLE
    (run_dir,) = results.iterdir()
    failed = {r["error"] for r in trials_by_id(run_dir).values() if r["ok"] != "true"}
    assert failed == {
        "link validation failed at 10 Mbit/s, 25 ms delay, 0% loss (rtt ping measured 80.4 vs 50.4 ms); rate skipped",
        "link validation failed at 10 Mbit/s, 25 ms delay, 5% loss (rtt ping measured 80.4 vs 50.4 ms); rate skipped",
    }


def test_an_experiment_with_delays_is_refused_before_any_work_where_the_kernel_lacks_netem(
    lab, tmp_path, monkeypatch
):
    netem_link(lab, netem=False)
    with pytest.raises(UserError) as refused:
        run_sweep(lab, tmp_path, monkeypatch, SWEEP)
    said = str(refused.value)
    assert "\n" not in said and "sch_netem" in said and "testbed guest --" in said
    assert said.startswith("the experiment's delays/losses: ")
    assert not (tmp_path / "results").exists()  # no run was started
    assert lab.hosts["appliance"].args("shape.apply") == [] and lab.hosts["client"].workers == []


def test_the_refusal_is_the_shapers_own_message():
    assert NETEM_MISSING.startswith("delay/loss/serialization need netem") and "testbed guest" in NETEM_FIX
    from appliance import shaper

    assert shaper.NETEM_MISSING is NETEM_MISSING and shaper.NETEM_FIX is NETEM_FIX


class _Lab:
    """The appliance's agent, answering `shape.netem` alone, behind `Lab`'s own question."""

    netem_available = Lab.netem_available

    def __init__(self, netem: bool) -> None:
        self.netem = netem

    def host(self, role):
        assert role == "appliance"
        return self

    def agent(self, request):
        assert type(request).VERB == "shape.netem"
        return self.netem


def test_require_netem_asks_the_appliance_and_refuses_in_one_line():
    require_netem(_Lab(True), "x")
    with pytest.raises(UserError, match=r"^--delays: delay/loss/serialization need netem") as refused:
        require_netem(_Lab(False), "--delays")
    assert "testbed guest -- COMMAND" in refused.value.fix


# ------------------------------------------------------------------ older runs
def test_a_run_of_format_10_reads_without_delay_or_loss_and_is_upgraded_on_resume(fake_run):
    from contracts.run import TrialRecord, TrialWriter
    from contracts.trials_file import COLUMNS

    run_dir, _manifest = fake_run
    path = run_dir / "trials.csv"
    old = [c for c in COLUMNS if c not in ("delay_ms", "loss_pct")]
    row = {c: "" for c in old} | {"op": "mul", "size": "100", "method": "raw", "ok": "true", "rate_mbps": "10",
                                   "t_total": "0.5", "trial": "4"}  # fmt: skip
    for stage in ("t_client_encode", "t_comm", "t_server_decode", "t_server_compute", "t_server_encode"):
        row[stage] = "0.1"
    row["t_client_decode"] = "0.0"
    path.write_text(f"{TRIALS_MARK}10\n{','.join(old)}\n{','.join(row[c] for c in old)}\n")
    trials = read_trials(path)
    assert trials.version == 10 and (trials.records[0].delay_ms, trials.records[0].loss_pct) == (None, None)
    writer = TrialWriter(path)  # a resumed session: the file is rewritten in this version's columns
    writer.write(TrialRecord("mul", 100, "raw", True, trial=5, rate_mbps=10.0, t_total=0.4, delay_ms=25.0))
    writer.close()
    again = read_trials(path)
    assert again.version == FORMAT_VERSION and [r.delay_ms for r in again.records] == [None, 25.0]
    data = json.loads((run_dir / "manifest.json").read_text())
    data["format_version"] = 10
    for key in ("delays_ms", "losses_pct"):
        data["experiment"].pop(key)
    (run_dir / "manifest.json").write_text(json.dumps(data))
    manifest = read_manifest(run_dir / "manifest.json")
    assert (
        manifest.format_version == 10
        and manifest.experiment.delays_ms == () == manifest.experiment.losses_pct
    )
    assert manifest.experiment == FAKE_SWEEP


def test_shape_takes_one_delay_and_loss_with_or_without_their_unit():
    from testbed.cli.args import resolve_link

    base = LinkSpec(20_000_000, 20_000_000)
    args = build_parser().parse_args(["shape", "--rate", "20mbit", "--delay", "50ms", "--loss", "5%"])
    assert resolve_link(base, args) == replace(base, delay_ms=50.0, loss_pct=5.0)
    for flag, value, said in (("--delay", "-1", "out of range"), ("--delay", "10,20", "takes one value")):
        args = build_parser().parse_args(["shape", flag, value])
        with pytest.raises(UserError, match=said):
            resolve_link(base, args)


# ------------------------------------------------------------------ the analysis
def test_the_analysis_keeps_each_point_apart_and_decides_against_the_round_trip(tmp_path):
    import pandas as pd

    from analysis import analyze
    from analysis.cells import cell_table
    from analysis.link_delay import delay_figure
    from analysis.load import load_run
    from tests.synthetic import write_synthetic_run

    run_dir = write_synthetic_run(tmp_path / "run", sizes=(400,), rates=(40,), delays=(0, 100), reps=4)
    out = analyze(run_dir, plots=False, out=open("/dev/null", "w"))
    cells = pd.read_csv(out / "cells.csv")
    assert (cells["n"] == 4).all() and (cells["delay_ms"] == 0).all()  # the first point, not pooled
    delays = pd.read_csv(out / "delay_cells.csv")
    assert list(delays.columns[:7]) == ["op", "size", "rate_mbps", "delay_ms", "loss_pct", "rtt_ms", "method"]
    assert sorted(set(delays["rtt_ms"])) == [0, 200] and (delays["n"] == 4).all() and len(delays) == 6
    raw = delays[delays["method"] == "raw"].set_index("rtt_ms")["mean"]
    assert raw[200] - raw[0] == pytest.approx(0.6, rel=0.1)  # three round trips of 200 ms more
    vectors = pd.read_csv(out / "delay_decisions.csv", dtype=str).set_index("method")
    assert vectors.loc["raw", "rtts_ms"] == "0 200" and vectors.loc["raw", "vector"] == "10"
    # every reader of the cells (compare, predict) sees the first point alone, too
    run = load_run(run_dir)
    assert (cell_table(run.trials, run.manifest)["n"] == 4).all()
    figure = delay_figure(delays, "mul")
    assert len(figure.axes) == 1 and figure.axes[0].get_xlabel().startswith("round trip added")


def test_validates_table_gives_each_netem_check_its_target_and_accepted_interval():
    from testbed.link.validate import Check, format_table, raise_on_failure

    own = statistics.median(PLAIN.rtts_ms)
    checks = [
        Check(20.0, "up", 19.13, 19.12, -0.05, True, 3, None, 25.0, 10.0),
        judge_rtt(RTT_PING, list(NETEM.rtts_ms), own, LINK, 20.0, 5.0),
        judge_loss(Ping(40, 20, NETEM.rtts_ms[:20]), LINK, 20.0),  # half the round trips: 29% a direction
    ]
    lines = format_table(checks).splitlines()
    assert lines[1].strip() == "delay 25 ms one way, loss 10% per direction:"
    assert lines[3].split() == ["measure", "expected", "measured", "accepted", "samples"]
    assert lines[4].split()[1:4] == ["rtt", "ping", "(ms)"] and lines[4].endswith("n=35   ok")
    assert "FAIL" in lines[5] and "loss" in lines[5]
    with pytest.raises(UserError, match=r"20 Mbit/s loss \(tolerance 5%\)"):
        raise_on_failure(checks, 5.0)
