"""The sweep healing the testbed or stopping (issue 23), through fake hosts: the switch found down
after a trial or behind a failed validation is restarted, the link shaped and validated again and the
trial run again, each repair recorded; what cannot be repaired stops the sweep in one line with the
resume command, and the resume runs exactly the trials that have no row."""

from __future__ import annotations

import signal

import pytest

from contracts.errors import UserError
from contracts.run import read_trials
from testbed.link import guard
from testbed.run_files import ManifestFile
from testbed.sweep.phases import run_sweep
from testbed.sweep.plan import plan_trials, rate_groups
from tests.fakes import FAKE_SWEEP, IPERF, WorkerHang, healthy_worker, link
from tests.helpers import saved, trials_by_id

EXP = FAKE_SWEEP
AT_10 = [t.trial for t in rate_groups(EXP, plan_trials(EXP))[1][1]]
VICTIM = AT_10[2]  # the third trial at 10 Mbit/s
DOWN = "ovs-vswitchd is not running (no live process has the pid in /x/ovs-vswitchd.pid)"


def switch_dies_during(lab, victim: int, times: int = 1):
    """A worker during whose trial `victim` the switch's ovs-vswitchd dies (the first `times` attempts);
    the trial itself fails as the client sees it: the server cannot be reached."""
    attempts = {"n": 0}

    def worker(spec):
        if spec["trial"] == victim and attempts["n"] < times:
            attempts["n"] += 1
            lab.switch.problems = [DOWN]
            return {"trial": victim, "ok": False, "error": "ConnectionError: cannot reach the offload server"}
        return healthy_worker(spec)

    return worker


def test_the_switch_dead_after_a_trial_is_restarted_revalidated_and_the_trial_runs_again(lab, fake_run):
    run_dir, manifest = fake_run
    lab.hosts["client"].worker(switch_dies_during(lab, VICTIM))
    summary = run_sweep(lab, EXP, run_dir, manifest)

    assert (summary["failed"], summary["status"], summary["unusable"]) == (0, "complete", [])
    written = trials_by_id(run_dir)
    assert sorted(written) == sorted(t.trial for t in plan_trials(EXP))
    assert all(r["ok"] == "true" for r in written.values())
    assert written[VICTIM]["repair"] == (
        "switch repaired after the first attempt failed: not kept, the switch was down: "
        f"{DOWN} (the trial itself: ConnectionError: cannot reach the offload server)"
    )
    assert lab.switch.restarts == 1
    (repair,) = saved(run_dir)["repairs"]
    assert (repair["part"], repair["ok"], repair["trials"]) == ("switch", True, [VICTIM])
    assert repair["why"] == f"{DOWN} (found after: trial {VICTIM} ran while the switch was down)"
    assert (
        repair["done"].startswith("restarted Open vSwitch and bridge")
        and "validated 10 Mbit/s again" in repair["done"]
    )
    # the restart took the qdiscs with it: 10 Mbit/s was shaped again, and validated again (2 runs more)
    rates = [a["link"]["up_rate"] for a in lab.hosts["appliance"].args("shape.apply")]
    assert rates.count(10_000_000) == 2
    assert len(lab.hosts["client"].ran(*IPERF)) == 2 + 2 + 2


def test_the_switch_dying_under_a_trial_ends_it_at_once_and_it_runs_again_after_the_repair(
    lab, fake_run, monkeypatch
):
    """The trial in flight would wait for its timeout (the switch forwards nothing); the switch's watch
    finds the daemon gone, kills the trial's worker, and the repair follows at once."""
    run_dir, manifest = fake_run
    monkeypatch.setattr(guard, "WATCH_EVERY_S", 0.05)
    hung = []

    def worker(spec):
        if spec["trial"] == VICTIM and not hung:
            hung.append(spec["trial"])
            lab.switch.problems = [DOWN]
            raise WorkerHang  # no answer until killed: without the watch, the trial's timeout and more
        return healthy_worker(spec)

    lab.hosts["client"].worker(worker)
    summary = run_sweep(lab, EXP, run_dir, manifest)

    assert (summary["failed"], summary["status"]) == (0, "complete")
    killed, restarted = lab.hosts["client"].workers
    assert killed.returncode == -signal.SIGKILL and restarted.returncode == 0
    written = trials_by_id(run_dir)
    assert written[VICTIM]["ok"] == "true" and written[VICTIM]["repair"] == (
        f"switch repaired after the first attempt failed: not kept, the switch was down: {DOWN} "
        "(the trial itself: ended when the switch was found down while it ran)"
    )
    (repair,) = saved(run_dir)["repairs"]
    assert (repair["part"], repair["ok"], repair["trials"]) == ("switch", True, [VICTIM])
    assert lab.switch.restarts == 1


def test_a_trial_that_fails_again_after_a_repair_keeps_its_second_failure_with_the_repair(lab, fake_run):
    run_dir, manifest = fake_run
    lab.hosts["client"].worker(switch_dies_during(lab, VICTIM, times=2))
    summary = run_sweep(lab, EXP, run_dir, manifest)

    row = trials_by_id(run_dir)[VICTIM]
    assert row["ok"] == "false" and row["error"].startswith("not kept, the switch was down")
    assert row["repair"].startswith("switch repaired after the first attempt failed")
    assert [r["trials"] for r in saved(run_dir)["repairs"]] == [[VICTIM], [VICTIM]]
    assert (summary["failed"], summary["status"]) == (1, "complete")


def test_a_switch_that_cannot_be_repaired_stops_the_sweep_in_one_line_and_resume_completes_it(lab, fake_run):
    run_dir, manifest = fake_run
    lab.switch.unrepairable = "`ovs-vswitchd ...` exited with 1: cannot open datapath"
    lab.hosts["client"].worker(switch_dies_during(lab, VICTIM))
    with pytest.raises(UserError) as stop:
        run_sweep(lab, EXP, run_dir, manifest)

    message = str(stop.value)
    assert "\n" not in message
    assert message.startswith(f"the sweep stopped: the appliance's Open vSwitch is broken ({DOWN})")
    assert "restarting it failed: on appliance: `ovs-vswitchd ...` exited with 1" in message
    assert stop.value.fix.endswith(f"then continue with: testbed sweep --resume {run_dir}")
    written = trials_by_id(run_dir)
    assert VICTIM not in written, "the trial that ran through the dead switch is left to the resume"
    assert set(AT_10[:2]) <= set(written) and all(r["ok"] == "true" for r in written.values())
    data = saved(run_dir)
    assert data["status"] == "stopped" and data["sessions"][-1]["status"] == "stopped"
    assert not data["repairs"], "no repair was made"
    assert lab.hosts["appliance"].args("bridge.restart"), "a restart was tried"

    # the switch repaired by hand: the resume runs exactly the trials without a row
    lab.switch.unrepairable, lab.switch.problems = None, []
    before = dict(written)
    summary = run_sweep(lab, EXP, run_dir, ManifestFile.load(run_dir / "manifest.json"))
    after = read_trials(run_dir / "trials.csv").records
    assert sorted(r.trial for r in after) == sorted(t.trial for t in plan_trials(EXP))
    assert summary["ran"] == len(plan_trials(EXP)) - len(before) and summary["status"] == "complete"


def test_a_validation_failed_by_a_dead_switch_is_repaired_and_the_rate_runs(lab, fake_run):
    run_dir, manifest = fake_run
    lab.switch.problems = [DOWN]  # dead before the 10 Mbit/s rate: nothing gets through
    link(lab, lambda rate, n: 0.0 if lab.switch.problems else 0.99)
    summary = run_sweep(lab, EXP, run_dir, manifest)

    assert (summary["failed"], summary["status"]) == (0, "complete")
    (repair,) = saved(run_dir)["repairs"]
    assert repair["part"] == "switch" and repair["trials"] == []
    assert "(found after: link validation failed at 10 Mbit/s (up measured 0" in repair["why"]
    assert not any(r["repair"] for r in trials_by_id(run_dir).values())


def test_a_validation_failed_by_a_dead_iperf3_server_restarts_it_and_validates_again(lab, fake_run):
    run_dir, manifest = fake_run
    server = lab.hosts["server"]
    services = {}
    server.reply("service.status", lambda dir, name: services.get(name))
    server.reply("service.start", lambda dir, name, argv, env: services.update({name: 4343}) or 4343)

    def efficiency(rate_mbps: float, n: int) -> float:
        if (rate_mbps, n) == (10.0, 1):
            services.pop("server-iperf3")  # iperf3 dies as the first rate is validated
        return 0.99 if "server-iperf3" in services else 0.0

    link(lab, efficiency)
    summary = run_sweep(lab, EXP, run_dir, manifest)

    assert (summary["failed"], summary["status"]) == (0, "complete")
    (repair,) = saved(run_dir)["repairs"]
    assert (repair["part"], repair["done"]) == ("iperf3", "started it again")
    assert [a["name"] for a in server.args("service.start")] == [
        "server-iperf3",
        "server-offload",
        "server-iperf3",
    ]


def test_a_rate_failing_validation_on_a_healthy_testbed_is_skipped_without_repairs(lab, fake_run):
    run_dir, manifest = fake_run
    link(lab, lambda rate, n: 0.8 if rate == 10.0 else 0.99)
    run_sweep(lab, EXP, run_dir, manifest)

    assert saved(run_dir)["repairs"] == []
    assert lab.switch.restarts == 0 and lab.hosts["appliance"].args("bridge.health")
    written = trials_by_id(run_dir)
    assert all(written[i]["ok"] == "false" for i in AT_10)
