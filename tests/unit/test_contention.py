"""Several clients offloading at once, without root: the experiment's `clients` and `contention`, the
plan's trials (k per repetition), a sweep through three fake client hosts (closed loop, each on its
own worker, rows with `client` and `clients`), Jain's index and the contention analysis on a
synthetic run with known answers."""

from __future__ import annotations

import json
import signal
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest

from analysis import analyze
from analysis.contention import borders, jain
from contracts.errors import UserError
from contracts.run import (
    MANIFEST_FILE,
    TRIALS_FILE,
    Experiment,
    Manifest,
    TrialRecord,
    TrialWriter,
    read_trials,
    write_manifest,
)
from contracts.stages import label_base, label_clients, label_without_clients, method_codec, offload_label
from testbed.experiment import load_experiment, planned_trials
from testbed.link import guard
from testbed.sweep.bookkeeping import start_run
from testbed.sweep.phases import run_sweep
from testbed.sweep.plan import plan_trials
from tests.fakes import FAKE_SWEEP, WorkerHang, healthy_worker
from tests.helpers import write_experiment
from tests.unit.conftest import fake_netns_lab, sweep_ready

CONTENTION = replace(
    FAKE_SWEEP, methods=("raw",), sizes=(100,), rates_mbps=(10.0,), clients=3, contention=(1, 3)
)


BASE = """\
    ops: [mul]
    sizes: [800]
    rates: [40]
    methods: [raw]
    reps: 5
    clients:
      - {device: paper-p4, count: 4}
"""


def test_an_experiment_names_its_clients_their_device_and_how_many_offload_at_once(tmp_path):
    exp = load_experiment(
        write_experiment(tmp_path, BASE + "    contention: [1, 2, 4]\n    server_workers: 2\n")
    )
    assert (exp.clients, exp.contention, exp.server_workers) == (4, (1, 2, 4), 2)
    assert exp.client_device == "paper-p4"
    alone = load_experiment(write_experiment(tmp_path, BASE))
    assert alone.contention == (4,)  # all of them at once unless told
    assert load_experiment(write_experiment(tmp_path, BASE.replace("count: 4", "count: 1"))).contention == ()


@pytest.mark.parametrize(
    "extra, words",
    [
        ("    contention: [1, 5]\n", "distinct counts of the 4 client"),
        ("    contention: [2, 2]\n", "distinct counts"),
        ("    contention: one\n", "not a list of positive numbers"),
        ("    server_workers: 9\n", "server_workers"),
        ("    replicas: 2\n", "share one testbed"),
        ("    mode: throttle\n", "emulated scaled"),
        ("    server_stack: cgi\n", "wsgi stack"),
        ("    client_device: paper-p4\n", "both describe the client"),
    ],
)
def test_what_several_clients_cannot_do_is_refused_in_one_line(tmp_path, extra, words):
    with pytest.raises(UserError, match=words):
        load_experiment(write_experiment(tmp_path, BASE + extra))


def test_adaptive_and_grpc_are_refused_with_several_clients(tmp_path):
    with pytest.raises(UserError, match="fixed repetitions"):
        load_experiment(write_experiment(tmp_path, BASE.replace("reps: 5", "reps: 3..20")))
    with pytest.raises(UserError, match="over HTTP"):
        load_experiment(write_experiment(tmp_path, BASE.replace("[raw]", "[raw, grpc]")))


def test_the_plan_has_k_trials_per_repetition_one_per_client():
    trials = plan_trials(CONTENTION)
    assert len(trials) == planned_trials(CONTENTION) == 2 + 2 * (1 + 3)  # local + (k=1, k=3) x reps
    remote = [t for t in trials if t.method == "raw"]
    assert [(t.clients, t.rep, t.client) for t in remote] == [
        (1, 0, 1), (1, 1, 1), (3, 0, 1), (3, 0, 2), (3, 0, 3), (3, 1, 1), (3, 1, 2), (3, 1, 3)
    ]  # fmt: skip
    assert remote[0].cell != remote[2].cell and remote[2].cell == remote[4].cell
    assert [t.trial for t in trials] == list(range(len(trials)))
    assert all(t.clients is None for t in plan_trials(FAKE_SWEEP))  # one client: ids as before


def test_labels_carry_how_many_clients_offloaded_at_once():
    assert offload_label("raw", "python", 4) == "raw-x4" and offload_label("local", "", 4) == "local"
    assert (label_clients("raw-zlib-x12"), label_clients("raw-zlib")) == (12, None)
    assert (method_codec("raw-zlib-x2"), method_codec("grpc@cpp"), label_without_clients("raw-zlib-x2")) == (
        "raw-zlib",
        "protobuf",
        "raw-zlib",
    )
    label = offload_label("raw", "python", 4, parallelism=2, io_kb=64)
    assert label == "raw-x4-p2-io64" and label_without_clients(label) == "raw-p2-io64"
    assert (label_base(label), method_codec(label), label_clients(label)) == ("raw", "raw", 4)


def test_jains_index():
    assert jain([2.0, 2.0, 2.0, 2.0]) == pytest.approx(1.0)
    assert jain([1.0, 0.0, 0.0, 0.0]) == pytest.approx(0.25)
    assert jain([2.0, 1.0]) == pytest.approx(9 / 10)
    assert np.isnan(jain([]))


@pytest.fixture
def three_clients(fake_inventory, tmp_path, monkeypatch):
    lab = sweep_ready(fake_netns_lab(fake_inventory.with_clients(3), tmp_path / "state", monkeypatch, {}))
    for role in ("client2", "client3"):
        lab.hosts[role].worker(healthy_worker)
    return lab


def test_a_sweep_runs_each_cell_on_the_clients_at_once_each_on_its_own_worker(three_clients, tmp_path):
    run_dir = tmp_path / "run"
    manifest = start_run(run_dir, "fake-contention", CONTENTION, three_clients)
    summary = run_sweep(three_clients, CONTENTION, run_dir, manifest)
    assert (summary["status"], summary["failed"]) == ("complete", 0)
    records = {r.trial: r for r in read_trials(run_dir / TRIALS_FILE).records}
    planned = plan_trials(CONTENTION)
    assert sorted(records) == [t.trial for t in planned]
    for t in planned:
        row = records[t.trial]
        assert (row.clients, row.client) == (t.clients, t.client)
    for role, k in (("client", 1), ("client2", 2), ("client3", 3)):
        (worker,) = three_clients.hosts[role].workers
        mine = {s["trial"] for s in worker.specs if s["trial"] >= 0}
        expected = {t.trial for t in planned if t.client == k}
        if k == 1:  # the first client also runs the local baseline
            expected |= {t.trial for t in planned if t.method == "local"}
        assert mine == expected, role
    assert (run_dir / "worker-client3.log").exists()
    shaped = three_clients.hosts["appliance"].args("shape.apply")[-1]
    assert shaped["down_if"] == three_clients.names.down_port  # the trunk: every client's traffic


def test_the_switch_dying_under_a_cell_of_several_clients_ends_its_trial_and_is_repaired(
    three_clients, tmp_path, monkeypatch
):
    """Each client's trial is checked as a trial alone is (`TrialCheck`): the one in flight when the
    switch dies is ended by the switch's watch, not by its timeout; the cell's trials that did not
    run then run after the repair."""
    monkeypatch.setattr(guard, "WATCH_EVERY_S", 0.05)
    victim = next(t.trial for t in plan_trials(CONTENTION) if t.clients == 3 and t.client == 2)
    hung = []

    def worker(spec):
        if spec["trial"] == victim and not hung:
            hung.append(victim)
            three_clients.switch.problems = ["ovs-vswitchd is not running"]
            raise WorkerHang
        return healthy_worker(spec)

    three_clients.hosts["client2"].worker(worker)
    run_dir = tmp_path / "run"
    summary = run_sweep(
        three_clients, CONTENTION, run_dir, start_run(run_dir, "fake", CONTENTION, three_clients)
    )
    assert summary["status"] == "complete"
    records = {r.trial: r for r in read_trials(run_dir / TRIALS_FILE).records}
    assert sorted(records) == [t.trial for t in plan_trials(CONTENTION)]
    assert not records[victim].ok and records[victim].error == (
        "not kept, the switch was down: ovs-vswitchd is not running "
        "(the trial itself: ended when the switch was found down while it ran)"
    )
    killed = three_clients.hosts["client2"].workers[0]
    assert killed.returncode == -signal.SIGKILL
    repairs = json.loads((run_dir / MANIFEST_FILE).read_text())["repairs"]
    assert [(r["part"], r["ok"]) for r in repairs] == [("switch", True)]
    assert three_clients.switch.restarts == 1


def synthetic_contention_run(run_dir):
    """Local 10 s; k clients at once: 0.55 s of stages, communication 2k s, queue 0.5(k-1) s each,
    except that with four clients the fourth takes 4 s longer; five repetitions, small noise."""
    run_dir.mkdir()
    exp = Experiment("synthetic", ("mul",), (800,), (40.0,), ("raw",), 5, clients=4, contention=(1, 2, 4))
    write_manifest(run_dir / MANIFEST_FILE, Manifest(run_id="synthetic", status="complete", experiment=exp))
    writer = TrialWriter(run_dir / TRIALS_FILE)
    rng = np.random.default_rng(1)
    trial = 0

    def row(**fields):
        nonlocal trial
        writer.write(TrialRecord(op="mul", size=800, ok=True, run_id="synthetic", trial=trial, **fields))
        trial += 1

    for rep in range(5):
        row(method="local", rep=rep, t_total=10 + rng.normal(0, 0.05))
    for k in (1, 2, 4):
        for rep in range(5):
            for client in range(1, k + 1):
                comm, queue = 2.0 * k + rng.normal(0, 0.02), 0.5 * (k - 1)
                slow = 4.0 if (k, client) == (4, 4) else 0.0
                stages = {"t_client_encode": 0.1, "t_server_decode": 0.1, "t_server_compute": 0.2}
                stages |= {"t_server_encode": 0.1, "t_client_decode": 0.05 + slow}
                total = sum(stages.values()) + comm + queue
                row(method="raw", server="python", rate_mbps=40.0, rep=rep, client=client, clients=k,
                    t_total=total, t_comm=comm, t_server_queue=queue, **stages)  # fmt: skip
    writer.close()


def test_the_analysis_finds_the_border_the_link_share_and_the_unfair_client(tmp_path):
    run_dir = tmp_path / "run"
    synthetic_contention_run(run_dir)
    out = analyze(run_dir, plots=True, out=open("/dev/null", "w"))  # noqa: SIM115
    table = pd.read_csv(out / "contention.csv")
    assert list(table["clients"]) == [1, 2, 4] and set(table["method"]) == {"raw"}
    assert list(table["offload"]) == [1, 1, 0]  # 2.55 and 5.05 s against 10, then 10.05 (and one 14.05)
    assert table["t_comm_mean"].to_numpy() == pytest.approx([2.0, 4.0, 8.0], abs=0.05)
    assert table["t_server_queue_mean"].to_numpy() == pytest.approx([0.0, 0.5, 1.5])
    alike, unfair = table["jain"].iloc[1], table["jain"].iloc[2]
    assert alike == pytest.approx(1.0, abs=1e-3)
    x = np.array([10.05, 10.05, 10.05, 14.05])
    assert unfair == pytest.approx(x.sum() ** 2 / (4 * (x**2).sum()), abs=2e-3)
    (border,) = borders(table.assign(significant=table["significant"].astype("boolean"))).itertuples()
    assert (border.decisions, border.border) == ("110", 2)
    assert pd.read_csv(out / "contention_borders.csv")["border"].tolist() == [2]
    assert (out / "contention-mul.png").exists()
    report = (out / "report.html").read_text()
    assert "Several clients: the decision border" in report
    vectors = pd.read_csv(out / "decision_vectors.csv")
    assert {"raw-x1", "raw-x2", "raw-x4"} <= set(vectors["method"])  # k compared as methods are


def test_a_workload_is_closed_loop_or_a_seeded_open_loop_rate(tmp_path):
    assert load_experiment(write_experiment(tmp_path, BASE)).arrivals_hz is None
    assert (
        load_experiment(write_experiment(tmp_path, BASE + "    workload: {open: 0.5}\n")).arrivals_hz == 0.5
    )
    for bad in ("open", "{open: 0}", "{open: 1, closed: 1}"):
        with pytest.raises(UserError, match="not a workload"):
            load_experiment(write_experiment(tmp_path, BASE + f"    workload: {bad}\n"))
    with pytest.raises(UserError, match="for several clients"):
        load_experiment(
            write_experiment(tmp_path, BASE.replace("count: 4", "count: 1") + "    workload: {open: 1}\n")
        )


def test_open_loop_trials_start_at_the_seeded_arrivals_or_when_the_last_one_ends(monkeypatch):
    import random

    from testbed.sweep import together as sweep_mod

    clock, slept = [100.0], []
    monkeypatch.setattr(sweep_mod.time, "monotonic", lambda: clock[0])

    def sleep(s):
        slept.append(s)
        clock[0] += s

    monkeypatch.setattr(sweep_mod.time, "sleep", sleep)
    exp = replace(CONTENTION, arrivals_hz=2.0)
    cell = ("mul", 100, 10.0, "raw", "python", 3)
    rng = random.Random(f"{exp.seed}-{cell}-2")
    gaps = [rng.expovariate(2.0) for _ in range(3)]
    arrivals = sweep_mod.Arrivals(exp, cell, 2)
    arrivals.start()
    arrivals.wait()  # the first arrival
    clock[0] += 10.0  # a trial far longer than the gap: the next one starts at once
    arrivals.wait()
    arrivals.wait()  # and the third at its own arrival
    assert slept[0] == pytest.approx(gaps[0]) and slept[1] == 0.0
    assert clock[0] == pytest.approx(max(100 + gaps[0] + 10.0, 100 + sum(gaps[:3])))
    closed = sweep_mod.Arrivals(CONTENTION, cell, 2)
    closed.start()
    closed.wait()
    assert len(slept) == 3  # closed loop: nothing to wait for
