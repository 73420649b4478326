"""Decisions over time without root: tasks.csv, the seeded stream, the policies, the oracle and regret
on synthetic runs with known answers, and a stream run through the strict fake host."""

from __future__ import annotations

import time
from dataclasses import replace

import pandas as pd
import pytest

from analysis.load import load_run
from analysis.online import analyze_stream, oracle, policy_metrics, tasks_frame
from analysis.predict_model import fit
from contracts.errors import UserError
from contracts.stages import LOCAL
from contracts.tasks import TASKS_FILE, TaskRecord, TaskWriter, read_tasks
from contracts.worker_api import TrialResult
from testbed.link.trace import load_trace
from testbed.online.policies import MIN_WIRE_S, AlwaysRemote, Decision, Online, Policy, make_policies
from testbed.online.task_stream import PROBE_TRIAL, StreamSpec, load_stream, run_stream, task_stream
from tests.fake_answers import replay_done
from tests.synthetic import write_synthetic_run

SPEC = StreamSpec(
    name="s", trace=None, count=6, mean_gap_s=1.0, ops=("mul",), sizes=(400, 800), methods=("raw",), seed=5
)


def row(policy: str, task: int, t_total: float, decision: str = "local", **extra) -> TaskRecord:
    method = LOCAL if decision == "local" else "raw"
    values = dict(policy=policy, task=task, op="mul", size=400, arrival_s=float(task), start_s=float(task),
                  decision=decision, method=method, ok=True, end_s=task + t_total, t_total=t_total)  # fmt: skip
    return TaskRecord(**{**values, **extra})


# ------------------------------------------------------------------ tasks.csv
def test_tasks_round_trip_row_by_row_and_a_bad_value_names_its_line(tmp_path):
    path = tmp_path / TASKS_FILE
    writer = TaskWriter(path)
    rows = [
        row("local", 0, 3.0),
        row("online-raw", 0, 1.5, "remote", bytes_up=10, probe=True, probe_s=0.25, estimate_mbps=2.5),
    ]
    for r in rows:
        writer.write(r)
    writer.close()
    assert read_tasks(path) == rows
    text = path.read_text().splitlines()
    text[3] = text[3].replace("1.5", "fast", 1)
    path.write_text("\n".join(text) + "\n")
    with pytest.raises(UserError, match=r"line 4: end_s is 'fast', not a number"):
        read_tasks(path)
    path.write_text("t_total\n1\n")
    with pytest.raises(UserError, match="line 1: not a tasks file"):
        read_tasks(path)


def test_a_format_1_tasks_file_reads_with_no_probe_seconds(tmp_path):
    path = tmp_path / TASKS_FILE
    writer = TaskWriter(path)
    writer.write(row("online-raw", 0, 1.5, "remote", probe=True))
    writer.close()
    lines = path.read_text().splitlines()
    at = lines[1].split(",").index("probe_s")
    drop = [",".join(c for i, c in enumerate(line.split(",")) if i != at) for line in lines[1:]]
    path.write_text("\n".join([lines[0].replace(" 2", " 1"), *drop]) + "\n")
    (old,) = read_tasks(path)
    assert old.probe and old.probe_s is None
    path.write_text(path.read_text().replace("format 1", "format 9"))
    with pytest.raises(UserError, match="tasks format 9; this tool reads formats 1, 2"):
        read_tasks(path)


def test_a_task_record_refuses_what_cannot_have_happened():
    with pytest.raises(ValueError, match="decision local ran method raw"):
        row("local", 0, 1.0, method="raw")
    with pytest.raises(ValueError, match="before arrival_s"):
        row("local", 1, 1.0, start_s=0.5)


# ------------------------------------------------------------------ the stream
def test_the_stream_is_seeded_poisson_arrivals_from_zero():
    tasks = task_stream(SPEC)
    assert tasks == task_stream(SPEC) and len(tasks) == 6 and tasks[0].arrival_s == 0.0
    assert all(b.arrival_s > a.arrival_s for a, b in zip(tasks, tasks[1:], strict=False))
    assert {t.size for t in tasks} <= {400, 800}
    assert task_stream(replace(SPEC, seed=6)) != tasks


def test_a_stream_file_is_read_with_its_paths_relative_to_it(tmp_path):
    (tmp_path / "t.csv").write_text("t_s,up_mbps,down_mbps\n0,10,10\n5,10,10\n")
    path = tmp_path / "s.yaml"
    path.write_text(
        "trace: t.csv\ntasks: {count: 4, mean_gap_s: 2, ops: [mul], sizes: [400, 800]}\nmethods: [raw]\n"
        "policies: [local, remote]\nestimator: {window: 2}\n"
    )
    spec = load_stream(path)
    assert spec.trace == tmp_path / "t.csv" and spec.policies == ("local", "remote") and spec.window == 2
    path.write_text(path.read_text().replace("{window: 2}", "{window: 2, probe_size: 500}"))
    with pytest.raises(UserError, match="probe_size.*not between 2 and the smallest task size, 400"):
        load_stream(path)
    path.write_text(path.read_text().replace("[local, remote]", "[local, psychic]"))
    with pytest.raises(UserError, match="unknown 'psychic'"):
        load_stream(path)


# ------------------------------------------------------------------ policies
@pytest.fixture(scope="module")
def model(tmp_path_factory):
    """The predictor fitted on a synthetic sweep (the server 8x faster than the client)."""
    run_dir = write_synthetic_run(tmp_path_factory.mktemp("model") / "run", sizes=(400, 600, 800, 1000))
    run = load_run(run_dir)
    return fit(run.trials, run.manifest), run_dir


def test_the_online_policy_probes_then_decides_from_its_estimate(model):
    online = Online("raw", model[0], window=2, stale_s=5.0)
    assert online.needs_probe(0.0)  # nothing known: measure the link first
    blind = online.decide("mul", 800, 0.0)  # and if the probe failed, nothing is risked
    assert not blind.remote and blind.estimate_mbps is None
    fast = TrialResult(ok=True, t_comm=0.5, bytes_up=10_000_000, bytes_down=5_000_000)
    online.observe(fast, Decision("raw"), 1.0)
    assert not online.needs_probe(2.0)
    quick = online.decide("mul", 800, 2.0)
    assert quick.remote and quick.predicted_remote_s < quick.predicted_local_s
    slow = TrialResult(ok=True, t_comm=600.0, bytes_up=10_000_000, bytes_down=5_000_000)
    online.observe(slow, quick, 3.0)
    online.observe(slow, quick, 3.5)  # the window holds the two slow ones: the fast one is gone
    after = online.decide("mul", 800, 4.0)
    assert not after.remote and after.estimate_mbps < 1.0
    online.observe(slow, after, 5.0)  # a local task's answer teaches nothing of the link
    assert online.needs_probe(8.5) and not online.needs_probe(8.4)  # 5 s since the newest sample


def test_a_probe_quicker_than_the_per_request_constant_reads_as_a_fast_link(model):
    cgi = replace(model[0], comm=replace(model[0].comm, intercept=0.15, slope=1.0))  # a 0.15-s start-up
    online = Online("raw", cgi, window=1, stale_s=0.0)
    assert online.needs_probe(0.0) and online.needs_probe(0.0)  # stale_s 0: before every task
    probe = TrialResult(ok=True, t_comm=0.14, bytes_up=262_144, bytes_down=131_072)
    online.observe(probe, Decision("raw"), 1.0)
    assert online.estimate_bps() == pytest.approx(8 * 393_216 / MIN_WIRE_S)
    with pytest.raises(UserError, match="stale_s -1 out of range"):
        Online("raw", model[0], stale_s=-1)


def test_policies_are_made_in_the_streams_order_per_method(model):
    made = make_policies(("local", "remote", "online"), ("json", "raw"), model[0], 3, 10.0)
    assert [p.name for p in made] == ["local", "remote-json", "remote-raw", "online-json", "online-raw"]
    with pytest.raises(UserError, match="needs the predictor's model"):
        make_policies(("online",), ("raw",), None, 3, 10.0)


# ------------------------------------------------------------------ oracle and regret
def test_oracle_regret_and_wrong_decisions_on_known_answers():
    """Task 0 pays remote (1 s against 3 s), task 1 local (2 s against 5 s): the oracle totals 3 s.
    Always local loses 2 s, always remote 3 s; the online policy gets task 0 right and task 1 wrong."""
    tasks = pd.DataFrame(
        [
            r.__dict__
            for r in [
                row("local", 0, 3.0),
                row("local", 1, 2.0),
                row("remote-raw", 0, 1.0, "remote"),
                row("remote-raw", 1, 5.0, "remote"),
                row("online-raw", 0, 1.0, "remote", probe=True, probe_s=0.5),
                row("online-raw", 1, 5.0, "remote"),
            ]  # fmt: skip
        ]
    )
    best = oracle(tasks)
    assert best.set_index("task")["best"].to_dict() == {0: "remote", 1: "local"}
    metrics = policy_metrics(tasks, best).set_index("policy")
    assert metrics.loc["local", "regret_s"] == 2.0 and metrics.loc["remote-raw", "regret_s"] == 3.0
    assert metrics.loc["local", "oracle_s"] == 3.0 and metrics.loc["local", "loss_pct"] == pytest.approx(
        200 / 3
    )
    assert metrics.loc["online-raw", "wrong"] == 1 and metrics.loc["online-raw", "probes"] == 1
    # its probe's half second is the device's too: 1 + 0.5 + 5 against the oracle's 3
    assert metrics.loc["online-raw", "regret_s"] == 3.5 and metrics.loc["online-raw", "probe_s"] == 0.5
    assert metrics.loc["remote-raw", "offloaded"] == 2 and metrics.loc["local", "wrong"] == 1


def test_without_static_runs_there_is_no_oracle():
    tasks = pd.DataFrame([row("online-raw", 0, 1.0, "remote").__dict__])
    with pytest.raises(UserError, match="always-local and always-remote"):
        oracle(tasks)


# ------------------------------------------------------------------ a stream through the fake host
def test_a_stream_runs_each_policy_on_the_replayed_trace_and_is_analysed(
    lab, model, tmp_path, monkeypatch, capsys
):
    """Every policy gets the same tasks on the trace from its start; a task starts at its arrival or
    when the device is free, ends its completion time later, and its row has the trace's rate then.
    The strict fake host answers the replay (one pass per call) and the worker."""
    from testbed.online import task_stream as stream_mod

    def shape_replay(plan, link, up_if, down_if, start):
        time.sleep(0.01)
        return replay_done(start, [(0.0, {})], 0.5, {}, late_s=0.001)

    lab.hosts["appliance"].reply("shape.replay", shape_replay)

    def answer(spec):
        remote = spec["method"] != LOCAL
        t_total = 0.1 if remote else 0.15
        if spec["trial"] == PROBE_TRIAL:
            assert spec["size"] == 64 and remote  # the online policy's probe, at its size
            t_total = 0.02
        return {"trial": spec["trial"], "ok": True, "t_total": t_total, "t_comm": 0.1 if remote else None,
                "bytes_up": 2_000_000 if remote else None, "bytes_down": 1_000_000 if remote else None}  # fmt: skip

    lab.hosts["client"].worker(answer)
    trace = tmp_path / "t.csv"
    trace.write_text("t_s,up_mbps,down_mbps\n0,40,40\n0.4,2,2\n0.8,2,2\n")
    spec = replace(SPEC, trace=trace, count=4, mean_gap_s=0.05, sizes=(400,), probe_size=64, stale_s=0.0)
    monkeypatch.setattr(stream_mod, "LEAD_S", 0.05)
    run_dir = run_stream(lab, spec, model[1], tmp_path / "results")
    plan = load_trace(trace)

    tasks = read_tasks(run_dir / TASKS_FILE)
    by_policy: dict[str, list[TaskRecord]] = {}
    for t in tasks:
        by_policy.setdefault(t.policy, []).append(t)
    assert list(by_policy) == ["local", "remote-raw", "online-raw"]
    stream = task_stream(spec)
    for rows in by_policy.values():
        assert [(r.task, r.arrival_s) for r in rows] == [(t.task, t.arrival_s) for t in stream]
        for before, after in zip(rows, rows[1:], strict=False):
            assert after.start_s >= max(after.arrival_s, before.end_s) - 1e-9
        for r in rows:
            assert r.end_s == pytest.approx(r.start_s + (r.probe_s or 0) + r.t_total)
            assert r.trace_up_mbps == plan.step_at(r.start_s).up_bps / 1e6
    assert all(r.decision == "local" for r in by_policy["local"])
    assert all(r.probe and r.probe_s == 0.02 for r in by_policy["online-raw"])  # stale_s 0: every task
    assert not any(r.probe for r in by_policy["local"] + by_policy["remote-raw"])
    assert not lab.is_up()  # the stream brought it up, and takes it down
    assert "[cells 3/3] trials 12/12" in capsys.readouterr().err  # the progress line counts every task
    out = analyze_stream(run_dir)
    assert (out / "report.html").is_file() and (out / "over-time-raw.png").is_file()
    metrics = pd.read_csv(out / "online.csv")
    assert set(metrics["policy"]) == {"local", "remote-raw", "online-raw"}
    assert tasks_frame(run_dir)["ok"].all()


def test_a_policy_that_is_neither_static_nor_online_is_just_local():
    assert Policy().decide("mul", 400, 0.0).method == LOCAL and AlwaysRemote("raw").decide("mul", 4, 0).remote
