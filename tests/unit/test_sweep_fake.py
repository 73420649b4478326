"""The sweep's orchestration through fake hosts, without root: shaping, validation, the trial worker,
restarts, resume and the run's bookkeeping, on the embedded backend whose hosts are `FakeHost`s and
whose trial worker is a `FakeWorker` answering from a script."""

from __future__ import annotations

import json
import signal
from dataclasses import replace

import pytest

from contracts.errors import UserError
from contracts.run import Validation
from testbed.run_files import ManifestFile
from testbed.sweep.bookkeeping import start_run
from testbed.sweep.phases import run_sweep
from testbed.sweep.plan import plan_trials, rate_groups
from testbed.sweep.worker_link import WorkerLink
from tests.fakes import (
    FAKE_SWEEP,
    HEALTH,
    IPERF,
    WorkerExit,
    WorkerHang,
    healthy_worker,
    link,
    probe_reply,
)
from tests.helpers import saved, timed, trials_by_id

EXP = FAKE_SWEEP  # 4 local trials, then 8 per rate

PLAN = {t.trial: t for t in plan_trials(EXP)}


def at_rate(rate) -> list[int]:
    return [i for i, t in PLAN.items() if t.rate_mbps == rate]


@pytest.fixture
def run(fake_run):
    return fake_run


def applied_rates(lab) -> list[int]:
    return [a["link"]["up_rate"] for a in lab.hosts["appliance"].args("shape.apply")]


# ------------------------------------------------------------------ a whole sweep
def test_a_complete_sweep_writes_a_row_per_planned_trial_and_records_link_and_counters(lab, run):
    run_dir, manifest = run
    # the first iperf3 run at 10 Mbit/s falls short: the second attempt validates the rate
    link(lab, lambda rate, n: 0.9 if (rate, n) == (10.0, 1) else 0.99)
    summary = run_sweep(lab, EXP, run_dir, manifest)

    assert summary == {
        "run_dir": str(run_dir),
        "trials": 20,
        "ran": 20,
        "failed": 0,
        "status": "complete",
        "unusable": [],
    }
    written = trials_by_id(run_dir)
    assert sorted(written) == sorted(PLAN) == list(range(20))
    for i, row in written.items():
        t = PLAN[i]
        rate = float(row["rate_mbps"]) if row["rate_mbps"] else None
        assert (row["op"], int(row["size"]), row["dtype"], rate, row["method"], int(row["rep"])) == (
            t.op,
            t.size,
            t.dtype,
            t.rate_mbps,
            t.method,
            t.rep,
        )
        assert (row["run_id"], row["ok"], row["error"]) == ("fake-1", "true", "")
        assert float(row["t_total"]) == t.size / 1000  # the worker's record, not another trial's

    # one worker, sent each phase's warm-up (the smallest size, per method) and then its trials
    (worker,) = lab.hosts["client"].workers
    assert worker.args[:5] == ["python", "-m", "client.cpulimit", "--name", lab.cgroup]  # under the limit
    assert worker.args[-13:] == [
        "client.worker",
        "--url",
        lab.server_url,
        "--grpc-targets",
        json.dumps(lab.grpc_targets),
        "--seed",
        "3",
        "--timeout",
        "5.0",
        "--connection",
        "per-trial",
        "--codec-text",
        "compact",
    ]
    expected = []
    for _, phase in rate_groups(EXP, plan_trials(EXP)):
        methods = dict.fromkeys(t.method for t in phase)
        expected += [(-1, "mul", 100, "float64", m) for m in methods]
        expected += [(t.trial, t.op, t.size, t.dtype, t.method) for t in phase]
    assert [(s["trial"], s["op"], s["size"], s["dtype"], s["method"]) for s in worker.specs] == expected
    assert worker.returncode == 0  # its stdin was closed at the end

    data = saved(run_dir)
    assert data["status"] == "complete" and data["planned_trials"] == 20
    (session,) = data["sessions"]
    assert (session["status"], session["skipped_done"]) == ("complete", 0) and session["ended_at"]
    checks = [(v["rate_mbps"], v["direction"], v["attempt"], v["ok"]) for v in data["validation"]]
    assert checks == [
        (10.0, "up", 1, False),
        (10.0, "down", 1, True),
        (10.0, "up", 2, True),
        (10.0, "down", 2, True),
        (40.0, "up", 1, True),
        (40.0, "down", 1, True),
    ]
    assert data["validation"][0]["error_pct"] == pytest.approx(-10, abs=0.01)
    counters = data["counters"]
    assert [c["rate_mbps"] for c in counters] == [10.0, 40.0]
    for c, ticks in zip(counters, ((0, 1), (2, 3)), strict=True):
        assert c["ports"] == {"up": lab.up_if, "down": lab.down_if}
        assert (c["before"]["at"], c["after"]["at"]) == ticks
        assert sorted(c["trials"]) == at_rate(c["rate_mbps"])
    assert applied_rates(lab) == [100_000_000, 10_000_000, 10_000_000, 40_000_000]  # a retry shapes again
    assert "rate 10 Mbit/s failed validation (attempt 1)" in (run_dir / "sweep.log").read_text()


# ------------------------------------------------------------------ resume
@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "kill"])
def test_an_interrupted_sweep_resumes_with_exactly_the_missing_trials(lab, run, stop):
    run_dir, manifest = run
    answered = []

    def until_seven(spec):
        if spec["trial"] >= 0:
            if len(answered) == 7:
                raise KeyboardInterrupt  # the user stops the sweep during the 8th trial
            answered.append(spec["trial"])
        return healthy_worker(spec)

    lab.hosts["client"].worker(until_seven, interrupt=stop)
    with pytest.raises(KeyboardInterrupt):
        run_sweep(lab, EXP, run_dir, manifest)
    first = timed(lab.hosts["client"].workers[0].specs)
    assert (
        len(first) == 8 and first[:7] == answered and sorted(trials_by_id(run_dir)) == sorted(answered)
    )  # the one in flight left no row
    assert not lab.is_up()  # the sweep brought it up, and takes it down however it ends
    data = saved(run_dir)
    assert data["status"] == "interrupted" and data["sessions"][0]["status"] == "interrupted"
    (stopped,) = data["counters"]  # at 10 Mbit/s, stopped mid-rate: no after, no trials
    assert stopped["rate_mbps"] == 10.0 and stopped["after"] is None and stopped["trials"] == []

    with pytest.raises(UserError, match="already exists"):
        start_run(run_dir, "fake-2", EXP, lab)
    manifest = ManifestFile.load(run_dir / "manifest.json")  # what `testbed sweep --resume` does
    exp = manifest.manifest.experiment
    assert exp == EXP
    lab.hosts["client"].worker(healthy_worker)
    summary = run_sweep(lab, exp, run_dir, manifest)

    second = timed(lab.hosts["client"].workers[-1].specs)
    assert sorted(second) == sorted(set(PLAN) - set(answered))  # the missing ones, each once
    assert first[7] in second
    assert sorted(trials_by_id(run_dir)) == sorted(PLAN)
    assert (summary["ran"], summary["failed"], summary["status"]) == (13, 0, "complete")
    data = saved(run_dir)
    assert [(s["status"], s["skipped_done"]) for s in data["sessions"]] == [
        ("interrupted", 0),
        ("complete", 7),
    ]
    assert data["status"] == "complete"
    assert [c["rate_mbps"] for c in data["counters"]] == [10.0, 10.0, 40.0]
    assert sorted(data["counters"][1]["trials"]) == sorted(set(at_rate(10.0)) - set(answered))


# ------------------------------------------------------------------ a failed trial
VICTIM = rate_groups(EXP, plan_trials(EXP))[1][1][2].trial  # the third trial at 10 Mbit/s


@pytest.mark.parametrize(
    ("failure", "error", "status"),
    [
        (WorkerExit(1, "Segmentation fault"), "WorkerDied: the client worker exited (status 1)", 1),
        (WorkerHang(), "TimeoutError: no answer from the client worker within 0.5 s", -9),
        ("Traceback (most recent call last):", "JSONDecodeError: Expecting value", -9),
    ],
    ids=["exits", "hangs", "garbles"],
)
def test_a_trial_that_loses_the_worker_is_a_failed_row_and_a_new_worker_runs_the_rest(
    lab, run, monkeypatch, failure, error, status
):
    run_dir, manifest = run
    read = WorkerLink._read  # the grace beyond the trial timeout (30 s) is cut short for the test
    monkeypatch.setattr(WorkerLink, "_read", lambda self, timeout: read(self, min(timeout, 0.5)))

    def fail_once(spec):
        if spec["trial"] == VICTIM and len(client.workers) == 1:
            if isinstance(failure, Exception):
                raise failure
            return failure
        return healthy_worker(spec)

    client = lab.hosts["client"]
    client.worker(fail_once)
    summary = run_sweep(lab, EXP, run_dir, manifest)

    written = trials_by_id(run_dir)
    assert sorted(written) == sorted(PLAN)
    assert [i for i, r in written.items() if r["ok"] != "true"] == [VICTIM]
    assert written[VICTIM]["error"].startswith(error)
    assert (summary["failed"], summary["status"]) == (1, "complete")
    first, second = client.workers
    assert first.returncode == status and second.returncode == 0
    assert [c[1] for c in client.calls if c[0] == "popen"] == [first.args, second.args]
    assert timed(first.specs)[-1] == VICTIM
    assert sorted(timed(first.specs) + timed(second.specs)) == sorted(PLAN)
    assert VICTIM not in timed(second.specs)  # a failed trial is a row: it is not run again
    assert len(lab.hosts["server"].args("service.start")) == 2  # the server was alive: not restarted
    if isinstance(failure, WorkerExit):
        assert "Segmentation fault" in (run_dir / "worker.log").read_text()


def test_a_failed_remote_trial_with_the_server_gone_restarts_the_server_and_runs_again(lab, run):
    """The server dies in the middle of a trial: the sweep finds it gone, restarts it (recorded), and
    runs the trial again; its row is the second attempt's, saying what was repaired and why."""
    run_dir, manifest = run
    client, server = lab.hosts["client"], lab.hosts["server"]
    alive = {"server-iperf3": True, "server-offload": True}

    def status(dir, name):
        return 4242 if alive.get(name) else None

    def start(dir, name, argv, env):
        alive[name] = True
        return 4343

    def crash_once(spec):
        if spec["trial"] == VICTIM and len(server.args("service.start")) == 2:
            alive["server-offload"] = False  # the server dies in the middle of this trial
        if not alive["server-offload"] and spec["method"] != "local":
            return {"trial": spec["trial"], "ok": False, "error": "ConnectionError: refused"}
        return healthy_worker(spec)

    server.reply("service.status", status).reply("service.start", start)
    client.worker(crash_once)
    summary = run_sweep(lab, EXP, run_dir, manifest)

    written = trials_by_id(run_dir)
    assert all(r["ok"] == "true" for r in written.values())
    assert (
        written[VICTIM]["repair"]
        == "server repaired after the first attempt failed: ConnectionError: refused"
    )
    assert not [r for i, r in written.items() if r["repair"] and i != VICTIM]
    assert (summary["failed"], summary["status"]) == (0, "complete")
    (repair,) = saved(run_dir)["repairs"]
    assert (repair["part"], repair["ok"], repair["trials"]) == ("server", True, [VICTIM])
    assert repair["why"].startswith(
        "the offload server is not running (found after: trial 5 failed: ConnectionError"
    )
    assert sum(s["trial"] == VICTIM for s in client.workers[0].specs) == 2
    names = [a["name"] for a in server.args("service.start")]
    assert names == ["server-iperf3", "server-offload", "server-offload"]
    assert server.args("service.start")[-1]["argv"][-8:] == [
        *("--bind", "10.78.0.2", "--port", "18080", "--grpc-port", "50051", "--tagless-port", "50056")
    ]
    # the restarted server is waited for from the client, during the sweep (after its worker started)
    health = [i for i, c in enumerate(client.calls) if c[0] == "run" and tuple(c[1][:4]) == HEALTH]
    started = next(i for i, c in enumerate(client.calls) if c[0] == "popen")
    assert len(health) == 2 and health[0] < started < health[1]
    assert len(client.workers) == 1  # the worker itself was fine


def test_a_failed_grpc_trial_with_the_grpc_child_gone_restarts_the_server_and_runs_again(lab, tmp_path):
    exp = replace(EXP, methods=("grpc",), rates_mbps=(40.0,))
    run_dir = tmp_path / "run"
    manifest = start_run(run_dir, "fake-grpc", exp, lab)
    client, server = lab.hosts["client"], lab.hosts["server"]
    victim = next(t.trial for t in plan_trials(exp) if t.method == "grpc")
    grpc_up = {"answers": True}
    server.reply("service.status", lambda dir, name: 4242)  # the master stays alive throughout
    server.reply("service.stop", lambda dir, name: grpc_up.update(answers=True) or True)
    client.reply("grpc.ready", lambda target, wait: grpc_up["answers"])

    def child_dies(spec):
        if spec["trial"] == victim and not grpc_up.get("died"):
            grpc_up.update(answers=False, died=True)  # only the gRPC child died: HTTP still answers
            return {"trial": spec["trial"], "ok": False, "error": "UNAVAILABLE: connection refused"}
        return healthy_worker(spec)

    client.worker(child_dies)
    summary = run_sweep(lab, exp, run_dir, manifest)

    assert (summary["failed"], summary["status"]) == (0, "complete")
    assert [a["name"] for a in server.args("service.stop")] == ["server-offload"]
    assert [a["name"] for a in server.args("service.start")][-1] == "server-offload"
    written = trials_by_id(run_dir)
    assert all(r["ok"] == "true" for r in written.values())
    assert written[victim]["repair"].startswith("server repaired after the first attempt failed: UNAVAILABLE")
    (repair,) = saved(run_dir)["repairs"]
    assert "gRPC transport does not answer" in repair["why"]


# ------------------------------------------------------------------ validation
def test_a_rate_that_fails_validation_is_skipped_as_failed_rows_and_the_next_rate_runs(lab, run):
    run_dir, manifest = run
    link(lab, lambda rate, n: 0.8 if rate == 10.0 else 0.99)  # 20% short at 10 Mbit/s, every attempt
    summary = run_sweep(lab, EXP, run_dir, manifest)

    written = trials_by_id(run_dir)
    assert sorted(written) == sorted(PLAN)
    failed = sorted(i for i, r in written.items() if r["ok"] != "true")
    assert failed == at_rate(10.0)
    for i in failed:
        assert written[i]["error"].startswith("link validation failed at 10 Mbit/s (up measured 7.65")
        assert written[i]["error"].endswith("; rate skipped")
    (worker,) = lab.hosts["client"].workers
    assert sorted(timed(worker.specs)) == sorted(at_rate(None) + at_rate(40.0))
    warmups = [s["method"] for s in worker.specs if s["trial"] < 0]
    assert warmups[0] == "local" and sorted(warmups[1:]) == ["json", "raw"]  # none at 10 Mbit/s
    assert (summary["failed"], summary["status"]) == (8, "complete")
    data = saved(run_dir)
    at_10 = [(v["direction"], v["attempt"], v["ok"]) for v in data["validation"] if v["rate_mbps"] == 10.0]
    assert at_10 == [("up", 1, False), ("down", 1, False), ("up", 2, False), ("down", 2, False)]
    assert [c["rate_mbps"] for c in data["counters"]] == [40.0]
    assert len(lab.hosts["client"].ran(*IPERF)) == 4 + 2


def test_validation_disabled_is_recorded_and_no_iperf3_runs(lab, run):
    run_dir, manifest = run
    exp = replace(EXP, validation=Validation(enabled=False), warmup=0)
    summary = run_sweep(lab, exp, run_dir, manifest)
    assert (summary["ran"], summary["failed"]) == (20, 0)
    checks = saved(run_dir)["validation"]
    assert [(c["rate_mbps"], c["skipped"], c["direction"]) for c in checks] == [
        (10.0, "validation disabled", None),
        (40.0, "validation disabled", None),
    ]
    assert lab.hosts["client"].ran(*IPERF) == []
    assert all(s["trial"] >= 0 for s in lab.hosts["client"].workers[0].specs)  # warmup 0: none


# ------------------------------------------------------------------ the testbed around the sweep
@pytest.mark.parametrize("keep_up", [False, True])
def test_a_testbed_the_sweep_brought_up_is_taken_down_unless_kept(lab, run, keep_up):
    run_dir, manifest = run
    run_sweep(lab, EXP, run_dir, manifest, keep_up=keep_up)
    client = lab.hosts["client"]
    deleted = [c[3] for c in lab.wiring["commands"] if c[:3] == ["ip", "netns", "delete"]]
    assert lab.is_up() is keep_up
    assert sorted(deleted) == ([] if keep_up else sorted(lab.names.namespaces))
    assert ("cpu.remove" in client.verbs()) is not keep_up
    # a testbed kept up is left as the inventory describes it, not at the sweep's last rate
    expected = [100_000_000, 10_000_000, 40_000_000] + ([100_000_000] if keep_up else [])
    assert applied_rates(lab) == expected


def test_a_testbed_that_was_up_is_left_up_and_shaped_as_the_inventory_says(lab, run):
    run_dir, manifest = run
    assert lab.up() is True
    appliance, client, server = (lab.hosts[r] for r in ("appliance", "client", "server"))
    before = len(appliance.calls), len(server.args("service.start"))
    run_sweep(lab, EXP, run_dir, manifest)

    assert lab.is_up() and "cpu.remove" not in client.verbs()
    assert not [c for c in lab.wiring["commands"] if c[:3] == ["ip", "netns", "delete"]]
    assert appliance.verbs()[before[0] :].count("bridge.up") == 0
    assert len(server.args("service.start")) == before[1]  # its server was running: left alone
    assert client.verbs().count("cpu.apply") == 2  # the CPU limit is applied again for the sweep
    assert applied_rates(lab) == [100_000_000, 10_000_000, 40_000_000, 100_000_000]
    assert appliance.verbs()[-1] == "shape.apply"
    assert appliance.args("shape.apply")[-1]["link"] == lab.inv.link.as_dict()


def test_an_interrupted_sweep_on_a_testbed_that_was_up_still_restores_its_link(lab, run):
    run_dir, manifest = run
    lab.up()

    def stop(spec):
        raise KeyboardInterrupt

    lab.hosts["client"].worker(stop)
    with pytest.raises(KeyboardInterrupt):
        run_sweep(lab, EXP, run_dir, manifest)
    assert lab.is_up() and trials_by_id(run_dir) == {}
    assert lab.hosts["appliance"].args("shape.apply")[-1]["link"] == lab.inv.link.as_dict()


def refuse_when_down(lab) -> None:
    """The appliance's agent, as on the machine: no ports to shape while the testbed is down."""

    def shape_apply(link, up_if, down_if):
        if not lab.wiring["namespaces"]:
            raise UserError(f"appliance port {up_if} does not exist")

    lab.hosts["appliance"].reply("shape.apply", shape_apply)


def test_a_testbed_that_cannot_come_up_reports_why(lab, run):
    """Not reshaped on the way out: a testbed that is not up has no ports, and that error would
    replace the reason `up` failed."""
    run_dir, manifest = run
    refuse_when_down(lab)
    lab.hosts["server"].reply("probe", probe_reply(programs={"iperf3": None}))
    with pytest.raises(UserError, match="programs missing: iperf3"):
        run_sweep(lab, EXP, run_dir, manifest)
    assert lab.hosts["appliance"].args("shape.apply") == []
    assert saved(run_dir)["sessions"][0]["status"] == "stopped"  # by a problem to fix (not a kill)


# ------------------------------------------------------------------ the shaping checked after every trial
def test_a_trial_that_ran_while_the_shaping_was_gone_is_not_kept_and_the_shaping_is_repaired(lab, run):
    """The qdiscs deleted mid-rate: the trial in flight is failed with what was read back, the sweep
    shapes and validates again (recorded in the manifest) and the rate's other trials are kept."""
    run_dir, manifest = run
    appliance, shaping = lab.hosts["appliance"], lab.shaping

    def vanish(spec):
        if spec["trial"] == VICTIM:
            shaping.broken = {lab.up_if, lab.down_if}  # `tc qdisc del ... root` while it runs
        return healthy_worker(spec)

    lab.hosts["client"].worker(vanish)
    summary = run_sweep(lab, EXP, run_dir, manifest)

    written = trials_by_id(run_dir)
    assert [i for i, r in written.items() if r["ok"] != "true"] == [VICTIM]
    error = written[VICTIM]["error"]
    assert (
        error.startswith("not kept, the shaping was wrong while it ran:") and "has no HTB class 1:10" in error
    )
    assert "None" not in error
    assert (summary["failed"], summary["status"]) == (1, "complete")
    (repair,) = saved(run_dir)["repairs"]
    assert (repair["part"], repair["ok"], repair["trials"]) == ("shaping", True, [VICTIM])
    assert lab.up_if in repair["why"] and "validated the link again" in repair["done"]
    rates = [a["link"]["up_rate"] for a in appliance.args("shape.apply")]
    assert rates.count(10_000_000) >= 2, "the 10 Mbit/s shaping was applied again"


def test_a_trial_shaped_at_the_wrong_rate_is_not_kept_and_an_unrepairable_link_fails_the_rest(lab, run):
    """Someone reshapes the link mid-rate, and the link then no longer validates: the trial is failed
    naming both rates, the repair is recorded as failed, and the rate's remaining trials fail with why."""
    run_dir, manifest = run
    shaping = lab.shaping
    at_10 = [t.trial for t in rate_groups(EXP, plan_trials(EXP))[1][1]]

    def reshape(spec):
        if spec["trial"] == VICTIM:
            shaping.rates = dict.fromkeys(shaping.rates, 100_000_000)
        return healthy_worker(spec)

    link(lab, lambda rate_mbps, run: 0.99 if run <= 2 else 0.5)  # validates once (up, down), never again
    lab.hosts["client"].worker(reshape)
    run_sweep(lab, EXP, run_dir, manifest)

    written = trials_by_id(run_dir)
    assert "is shaped at 100mbit, not 10mbit" in written[VICTIM]["error"]
    after = at_10[at_10.index(VICTIM) + 1 :]
    assert after and all(written[i]["ok"] == "false" for i in after)
    assert all("link validation failed at 10 Mbit/s" in written[i]["error"] for i in after)
    assert all(written[i]["ok"] == "true" for i in at_10[: at_10.index(VICTIM)])
    (repair,) = saved(run_dir)["repairs"]
    assert repair["ok"] is False and "which failed" in repair["done"]
