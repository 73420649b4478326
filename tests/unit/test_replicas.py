"""Replicas without root: their inventories, the work source that shares units between testbeds,
the host-wide CPU lock, and a sweep over two fake testbeds."""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
import threading
from dataclasses import replace
from pathlib import Path

import pytest

from contracts.cpu_lock import CGROUP_ENV, CpuLock, hold_the_core, references_path, unpreempted_thread
from contracts.device import key
from contracts.errors import UserError
from contracts.run import read_trials
from testbed.backends.replicas import (
    CPU_LOCK,
    present_replicas,
    remove_cpu_lock,
    replica_inventories,
    sweep_inventories,
)
from testbed.devices import load_device
from testbed.run_files import ManifestFile
from testbed.sweep.bookkeeping import start_run
from testbed.sweep.phases import run_sweep
from testbed.sweep.plan import plan_trials, rate_groups
from testbed.sweep.rounds import Rounds
from testbed.sweep.scheduler import WorkSource, split_blocks, split_by_rep
from tests.fakes import FAKE_SWEEP, healthy_worker, link, server_calibration
from tests.helpers import saved

SERVER = "multilang-i5-5200u"  # a server profile shipped in experiments/devices


def test_replicas_are_the_testbed_under_numbered_prefixes_sharing_one_cpu_lock(fake_inventory):
    (one,) = replica_inventories(fake_inventory, 1)
    assert one == fake_inventory and one.cpu_lock is None  # one testbed: unchanged, no lock to wait for
    three = replica_inventories(fake_inventory, 3)
    assert [i.prefix for i in three] == ["tbf", "tbf1", "tbf2"]
    assert {i.cpu_lock for i in three} == {CPU_LOCK}
    assert all(i.hosts == fake_inventory.hosts and i.server_port == fake_inventory.server_port for i in three)


@pytest.mark.parametrize(
    ("change", "count", "words"),
    [
        ({}, 10, "replicas: 10 is out of range"),
        ({"backend": "ssh"}, 2, "replicas on one host are embedded testbeds"),
        ({"prefix": "abcdef"}, 2, "leaves no room for the replicas' numbers"),
    ],
)
def test_replicas_that_cannot_be_made_are_refused_in_one_line(fake_inventory, change, count, words):
    with pytest.raises(UserError, match=words):
        replica_inventories(replace(fake_inventory, **change), count)


def test_down_finds_the_replicas_a_sweep_left(fake_inventory, tmp_path):
    (tmp_path / "tbf2").mkdir()  # the state of replica 2, after a crash
    assert [i.prefix for i in present_replicas(fake_inventory, tmp_path)] == ["tbf2"]


def test_several_testbeds_get_units_per_repetition_and_keep_their_rate():
    units = rate_groups(FAKE_SWEEP, plan_trials(FAKE_SWEEP))
    split = split_by_rep(units)
    assert len(split) == 2 * len(units)  # two repetitions
    assert sorted(t.trial for _, ts in split for t in ts) == sorted(t.trial for t in plan_trials(FAKE_SWEEP))
    source = WorkSource(split)
    first = source.take(None)
    assert first[0] is None  # the local baseline comes first
    rate = split[2][0]
    taken = source.take(rate)
    assert taken[0] == rate and source.take(rate)[0] == rate  # a testbed keeps the rate it has
    for _ in range(3):
        source.done()
    while (unit := source.take()) is not None:
        source.done()
    assert unit is None and source.in_flight == 0


def test_an_adaptive_round_is_handed_out_only_once_the_last_one_is_done():
    exp = replace(FAKE_SWEEP, min_reps=2, reps=4)
    trials = plan_trials(exp)
    rounds = Rounds(exp, trials, {})
    source = WorkSource(rounds=rounds)
    first_round = []
    while source.pending or not first_round:
        first_round.append(source.take())
    got = []

    def second():
        got.append(source.take())

    waiter = threading.Thread(target=second)
    waiter.start()
    waiter.join(timeout=0.3)
    assert waiter.is_alive() and not got, "the next round waits for the units still being run"
    for _, block in first_round:
        for t in block:
            rounds.results[t.trial] = 1.0
        source.done()
    waiter.join(timeout=5)
    assert got and got[0][1][0].rep == 1  # the second round, computed from the first's results


def test_a_rounds_rate_groups_are_split_among_the_testbeds_each_trial_once_in_order():
    exp = replace(FAKE_SWEEP, min_reps=2, reps=4)
    blocks = Rounds(exp, plan_trials(exp), {}).round_blocks()
    split = split_blocks(blocks, 3)
    assert [t.trial for _, ts in split for t in ts] == [t.trial for _, ts in blocks for t in ts]
    for rate, trials in blocks:
        sizes = [len(ts) for r, ts in split if r == rate]
        assert len(sizes) == min(3, len(trials)) and max(sizes) - min(sizes) <= 1
    assert split_blocks(blocks, 1) == blocks
    source = WorkSource(rounds=Rounds(exp, plan_trials(exp), {}), parts=3)
    assert source.take() is not None and len(source.pending) == len(split) - 1


def test_the_cpu_lock_lets_one_timed_stage_run_at_a_time(tmp_path):
    path = str(tmp_path / "cpu.lock")
    a, b = CpuLock(path), CpuLock(path)  # two processes' locks (each its own open file)
    order, inside = [], threading.Event()

    def other():
        with b.held():
            order.append("b")

    with a.held():
        thread = threading.Thread(target=other)
        thread.start()
        thread.join(timeout=0.3)
        assert thread.is_alive(), "b waits while a holds the lock"
        order.append("a")
    thread.join(timeout=5)
    assert order == ["a", "b"]
    with CpuLock(None).held():  # no lock file: nothing to wait for
        inside.set()
    assert inside.is_set()


def policy(pid: int = 0) -> int:
    return os.sched_getscheduler(pid) & ~os.SCHED_RESET_ON_FORK


def children_policy() -> int:
    return int(subprocess.run([sys.executable, "-c", "import os; print(os.sched_getscheduler(0))"],
                              check=True, capture_output=True, text=True).stdout)  # fmt: skip


def test_a_scaled_stage_holds_its_core_where_the_host_permits_and_its_children_do_not(tmp_path):
    probe = "import os; os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(1))"
    permitted = subprocess.run([sys.executable, "-c", probe], capture_output=True).returncode == 0
    before = policy()
    with CpuLock(str(tmp_path / "cpu.lock")).held(unpreempted=True):
        inside, child = policy(), children_policy()
    assert inside == (os.SCHED_FIFO if permitted else before)
    assert child == os.SCHED_OTHER  # an iperf3 or a fresh interpreter started meanwhile runs as usual
    assert policy() == before and os.sched_getparam(0).sched_priority == 0
    with CpuLock(None).held(unpreempted=True):  # one testbed: no lock, the core all the same
        assert policy() == inside
    show = "import os; print(os.sched_getscheduler(0) & ~os.SCHED_RESET_ON_FORK)"
    child = subprocess.run(
        [sys.executable, "-c", show], preexec_fn=hold_the_core, capture_output=True, text=True
    )
    assert int(child.stdout) == inside  # a child timed as a stage (a fresh cgi start-up) runs so itself


def test_a_paced_stage_shares_its_core_as_the_scheduler_has_it():
    """Several clients at once (a paced server device, the client's pacer): their stages' sharing of
    the cores is the experiment, so none holds its core; a scaled one does where permitted."""
    from server.timing import StageClock

    before = policy()
    with unpreempted_thread() as permitted:
        pass
    with StageClock(None, retime=True).stage("decode"):
        assert policy() == (os.SCHED_FIFO if permitted else before)
    with StageClock(load_device("paper-i3"), retime=True).stage("decode"):
        assert policy() == before
    assert policy() == before


def test_an_unscaled_stage_or_one_under_a_cpu_quota_keeps_the_default_policy(tmp_path, monkeypatch):
    before = policy()
    with CpuLock(str(tmp_path / "cpu.lock")).held():  # as this host: its own scheduling is the measure
        assert policy() == before
    monkeypatch.setenv(CGROUP_ENV, str(tmp_path))  # throttle mode: a real-time thread escapes cpu.max
    with unpreempted_thread() as done:
        assert not done and policy() == before


def test_a_sweep_over_two_testbeds_runs_every_trial_once_and_records_where(two_testbeds, tmp_path):
    run_dir = tmp_path / "run"
    manifest = start_run(run_dir, "fake-replicas", FAKE_SWEEP, two_testbeds[0])
    summary = run_sweep(two_testbeds, FAKE_SWEEP, run_dir, manifest)

    records = read_trials(run_dir / "trials.csv").records
    assert sorted(r.trial for r in records) == sorted(t.trial for t in plan_trials(FAKE_SWEEP))
    assert (summary["status"], summary["failed"]) == ("complete", 0)
    assert {r.replica for r in records} == {0, 1}, "both testbeds ran trials"
    data = saved(run_dir)
    checked = {(v["replica"], v["rate_mbps"]) for v in data["validation"]}
    ran = {(r.replica, r.rate_mbps) for r in records if r.rate_mbps is not None}
    assert ran <= checked, "each testbed validated every rate it ran"
    for lab in two_testbeds:  # each brought up, and taken down, its own
        assert not lab.is_up()
        (worker,) = lab.hosts["client"].workers
        assert all(
            spec["trial"] < 0 or any(r.trial == spec["trial"] for r in records) for spec in worker.specs
        )
    assert (run_dir / "worker-0.log").exists() and (run_dir / "worker-1.log").exists()
    (session,) = data["sessions"]
    assert [(t["replica"], t["prefix"]) for t in session["testbeds"]] == [(0, "tbf"), (1, "tbf1")]
    assert session["datapath"] == "netdev"  # the switch as their `up` chose it: no kernel module here


def test_each_testbed_validates_its_link_holding_the_cpu_lock(two_testbeds, tmp_path):
    """iperf3 through the embedded (userspace) switch is CPU work: while one testbed validates, no
    other testbed's timed stage and no other validation may run on the host."""
    path = two_testbeds[0].inv.cpu_lock
    seen = []

    def locked(rate_mbps: float, run: int) -> float:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)  # another process's view of the lock
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            seen.append(False)
        except BlockingIOError:
            seen.append(True)
        finally:
            os.close(fd)
        return 0.99

    for lab in two_testbeds:
        link(lab, locked)
    run_dir = tmp_path / "run"
    run_sweep(two_testbeds, FAKE_SWEEP, run_dir, start_run(run_dir, "fake-lock", FAKE_SWEEP, two_testbeds[0]))
    assert seen and all(seen), "every iperf3 run happened under the host-wide lock"


def test_an_interrupted_sweep_over_two_testbeds_resumes_with_exactly_the_missing_trials(
    two_testbeds, tmp_path
):
    run_dir = tmp_path / "run"
    manifest = start_run(run_dir, "fake-replicas", FAKE_SWEEP, two_testbeds[0])
    victim = plan_trials(FAKE_SWEEP)[9].trial

    def dies(spec):
        if spec["trial"] == victim:
            raise KeyboardInterrupt
        return {"trial": spec["trial"], "ok": True, "t_total": spec["size"] / 1000, "started_at": "now"}

    for lab in two_testbeds:
        lab.hosts["client"].worker(dies)
    with pytest.raises(KeyboardInterrupt):
        run_sweep(two_testbeds, FAKE_SWEEP, run_dir, manifest)
    before = {r.trial for r in read_trials(run_dir / "trials.csv").records}
    assert victim not in before
    for lab in two_testbeds:
        lab.hosts["client"].worker(lambda spec: {"trial": spec["trial"], "ok": True, "t_total": 0.1})
    summary = run_sweep(two_testbeds, FAKE_SWEEP, run_dir, ManifestFile.load(run_dir / "manifest.json"))
    after = [r.trial for r in read_trials(run_dir / "trials.csv").records]
    assert sorted(after) == sorted(t.trial for t in plan_trials(FAKE_SWEEP)) and len(after) == len(set(after))
    assert summary["ran"] == len(after) - len(before)


def test_several_inventories_are_testbeds_of_one_sweep_with_distinct_prefixes(fake_inventory):
    other = replace(fake_inventory, prefix="tbg")
    both = sweep_inventories([fake_inventory, other], 1)
    assert [i.prefix for i in both] == ["tbf", "tbg"] and {i.cpu_lock for i in both} == {CPU_LOCK}
    assert [i.prefix for i in sweep_inventories([fake_inventory, other], 2)] == ["tbf", "tbf1", "tbg", "tbg1"]
    (alone,) = sweep_inventories([fake_inventory], 1)
    assert alone.cpu_lock is None
    lab = replace(fake_inventory, backend="ssh", prefix="lab")
    assert [i.cpu_lock for i in sweep_inventories([fake_inventory, lab], 1)] == [
        None,
        None,
    ]  # one embedded: no lock
    with pytest.raises(UserError, match="two testbeds of the sweep have the prefix tbf"):
        sweep_inventories([fake_inventory, fake_inventory], 1)


def test_the_cpu_lock_file_goes_with_the_last_testbed(tmp_path):
    (tmp_path / "cpu.lock").write_text("")
    (tmp_path / "tb1").mkdir()  # a testbed still up: its replicas may still time stages
    assert remove_cpu_lock(tmp_path) == [] and (tmp_path / "cpu.lock").exists()
    (tmp_path / "tb1").rmdir()
    (tmp_path / "cpu.lock.refs").write_text("")  # the host's reference runs (client.host_references)
    assert remove_cpu_lock(tmp_path) == [
        f"lock {tmp_path / 'cpu.lock'}",
        f"reference runs {tmp_path / 'cpu.lock.refs'}",
    ]
    assert not any(tmp_path.iterdir())


@pytest.mark.parametrize("keep_up", [False, True])
def test_a_sweep_that_brought_its_replicas_up_takes_the_cpu_lock_down_with_them(
    two_testbeds, tmp_path, keep_up
):
    """Without --keep-up the sweep leaves the host as `testbed down` does: the lock and the host's
    reference runs beside it go with the last testbed (`remove_cpu_lock`); kept up, they stay."""
    lock = Path(two_testbeds[0].inv.cpu_lock)
    run_dir = tmp_path / "run"
    manifest = start_run(run_dir, "fake-lock-down", FAKE_SWEEP, two_testbeds[0])

    def reference_runs(spec):  # the workers' shared reference runs (client.host_references)
        Path(references_path(str(lock))).write_text("{}")
        return healthy_worker(spec)

    for lab in two_testbeds:
        lab.hosts["client"].worker(reference_runs)
    summary = run_sweep(two_testbeds, FAKE_SWEEP, run_dir, manifest, keep_up=keep_up)

    assert summary["status"] == "complete"
    assert [lab.is_up() for lab in two_testbeds] == [keep_up, keep_up]
    assert lock.exists() == keep_up and Path(references_path(str(lock))).exists() == keep_up
    if keep_up:
        for lab in two_testbeds:
            lab.down()
        assert not lock.exists() and not any(lock.parent.iterdir())  # the last `down` took them


def test_testbeds_on_this_machine_share_one_calibration_recorded_with_its_users(two_testbeds, tmp_path):
    """Embedded testbeds share this machine's CPU and code, so the first one's calibration (minutes, an
    hour for the paper's grid) is every one's; the manifest records it once, with the testbeds using
    it. The strict fake host refuses a second calibration on testbed 1's server."""
    requests = server_calibration(two_testbeds[0].hosts["server"], SERVER)
    exp = replace(FAKE_SWEEP, server_device=SERVER)
    run_dir = tmp_path / "run"
    manifest = start_run(run_dir, "fake-shared", exp, two_testbeds[0])
    run_sweep(two_testbeds, exp, run_dir, manifest, server_device=load_device(SERVER))

    assert len(requests) == 1
    (calibration,) = saved(run_dir)["server_device"]["calibrations"]
    assert (calibration["replica"], calibration["replicas"]) == (0, [0, 1])
    scales = []
    for lab in two_testbeds:
        (worker,) = lab.hosts["client"].workers
        scales.append(json.loads(worker.args[worker.args.index("--server-scale") + 1]))
    assert scales[0] == scales[1] and scales[0][key("kernel", "mul", 100)] == 7.0
