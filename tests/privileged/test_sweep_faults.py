"""Faults injected into a running sweep on the real embedded testbed (issue 23): what the sweep
checks after every trial, and what it repairs."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from datetime import datetime
from pathlib import Path

import pytest

from tests.helpers import rows, start_sweep, trials_by_id, wait_for_rows

pytestmark = pytest.mark.privileged
LOOSE_PCT = 40  # link validation in tests about something else (see `_experiment`)


def test_shaping_deleted_mid_rate_is_never_kept_as_shaped_and_is_repaired(inventory, lease, tmp_path):
    """`tc qdisc del ... root` on both appliance ports while a rate's trials run: the trial that ran
    unshaped is failed with what was read back, the shaping is applied and validated again (recorded in
    the manifest), and the sweep completes with every other trial kept."""
    results = tmp_path / "results"
    exp = _experiment(tmp_path, "qdisc", 96, "raw", 24)
    proc = start_sweep(inventory, str(exp), "--results", str(results), "--no-analyze")
    run_dir = wait_for_rows(proc, results, 24 + 4)  # the local baseline, then some at 20 Mbit/s
    for port in ("a0", "a1"):
        subprocess.run(
            ["ip", "netns", "exec", f"{lease.prefix}-appliance", "tc", "qdisc", "del", "dev",
             f"{lease.prefix}-{port}", "root"],
            check=True,
        )  # fmt: skip
    out, _ = proc.communicate(timeout=600)
    assert proc.returncode == 0, out
    got = rows(run_dir)
    assert len(got) == 24 * 2 and "sweep complete" in out
    failed = [r for r in got if r["ok"] != "true"]
    assert len(failed) == 1, [r["error"] for r in failed]
    assert failed[0]["error"].startswith("not kept, the shaping was wrong while it ran:")
    assert "has no HTB class 1:10" in failed[0]["error"]
    manifest = json.loads((run_dir / "manifest.json").read_text())
    (repair,) = manifest["repairs"]
    assert repair["ok"] is True and repair["trials"] == [int(failed[0]["trial"])]
    assert len([v for v in manifest["validation"] if v.get("direction")]) >= 4, "validated again"


def _experiment(tmp_path, name: str, size: int, method: str, reps: int):
    """A small experiment file with a short trial timeout (a trial in flight when the switch dies
    waits for it), validated briefly and loosely: these tests are about repairs, and the userspace
    switch forwards slower when the machine's CPU is taken (measured here: 16.0 of 19.1 Mbit/s with
    a third of the CPU stolen by the hypervisor, `st` in vmstat)."""
    path = tmp_path / f"{name}.yaml"
    path.write_text(
        f"name: {name}\nops: [mul]\nsizes: [{size}]\nrates: [20]\nmethods: [{method}]\nreps: {reps}\n"
        "warmup: 0\ntrial_timeout: 15\n"
        f"validation: {{enabled: true, duration: 2, retries: 2, tolerance_pct: {LOOSE_PCT}}}\n"
    )
    return path


def _pids_in(ns: str, *names: str) -> list[int]:
    """The processes in namespace `ns` whose command line has one of `names`."""
    out = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True, check=True).stdout
    found = []
    for pid in map(int, out.split()):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if any(n in cmdline for n in names):
            found.append(pid)
    return found


def test_ovs_vswitchd_killed_mid_rate_is_restarted_recorded_and_the_trial_runs_again(
    inventory, lease, tmp_path
):
    """`kill -9` of the appliance's ovs-vswitchd while a rate's trials run: the sweep finds the daemon
    gone (while the trial in flight waits, or after the trial), ends that trial at once, restarts Open
    vSwitch and the bridge, shapes and validates the rate again (the repair recorded within 15 s of the
    kill, not after the trial's timeout), runs the affected trial again, and completes; `down` then
    leaves nothing (the `inventory` fixture checks)."""
    results = tmp_path / "results"
    exp = _experiment(tmp_path, "ovs", 96, "raw", 24)
    proc = start_sweep(inventory, str(exp), "--results", str(results), "--no-analyze")
    run_dir = wait_for_rows(proc, results, 24 + 4)
    (vswitchd,) = _pids_in(f"{lease.prefix}-appliance", "ovs-vswitchd ")
    killed = time.time()
    os.kill(vswitchd, signal.SIGKILL)
    out, _ = proc.communicate(timeout=600)
    assert proc.returncode == 0, out
    got = trials_by_id(run_dir)
    assert len(got) == 24 * 2 and "sweep complete" in out
    assert all(r["ok"] == "true" for r in got.values()), [
        r["error"] for r in got.values() if r["ok"] != "true"
    ]
    manifest = json.loads((run_dir / "manifest.json").read_text())
    switch = [r for r in manifest["repairs"] if r["part"] == "switch"]
    assert len(switch) == 1 and switch[0]["ok"] is True, manifest["repairs"]
    assert "ovs-vswitchd is not running" in switch[0]["why"]
    # `at` is in whole seconds: the repair was recorded before the next one
    latest = datetime.strptime(switch[0]["at"], "%Y-%m-%dT%H:%M:%S%z").timestamp() + 1
    assert latest - killed <= 15, f"the repair was recorded up to {latest - killed:.1f} s after the kill"
    (victim,) = switch[0]["trials"]
    assert got[victim]["repair"].startswith("switch repaired after the first attempt failed")
    assert [int(t) for t, r in got.items() if r["repair"]] == [victim]


def test_the_server_killed_mid_trial_is_restarted_recorded_and_the_trial_runs_again(
    inventory, lease, tmp_path
):
    """SIGKILL to the offload server's whole process group while a trial's request is on the wire: the
    trial fails as the client sees it, the sweep finds the server gone, restarts it, runs the trial
    again and completes with every trial ok."""
    results = tmp_path / "results"
    exp = _experiment(tmp_path, "server", 400, "json", 6)
    proc = start_sweep(inventory, str(exp), "--results", str(results), "--no-analyze")
    run_dir = wait_for_rows(proc, results, 6 + 2)
    time.sleep(0.5)  # a JSON trial of 400x400 takes over a second at 20 Mbit/s: this one is on the wire
    server = _pids_in(f"{lease.prefix}-server", "-m server ")  # the master, its workers, its gRPC child
    os.killpg(os.getpgid(server[0]), signal.SIGKILL)
    out, _ = proc.communicate(timeout=600)
    assert proc.returncode == 0, out
    got = trials_by_id(run_dir)
    assert len(got) == 6 * 2 and all(r["ok"] == "true" for r in got.values()), out
    manifest = json.loads((run_dir / "manifest.json").read_text())
    (repair,) = manifest["repairs"]
    assert (repair["part"], repair["ok"]) == ("server", True)
    assert repair["why"].startswith("the offload server is not running")
    (victim,) = repair["trials"]
    assert got[victim]["repair"].startswith("server repaired after the first attempt failed")
