"""The sweep killed (-9) while it calibrates the client for a device (issue 23), on the real embedded
testbed: nothing it started goes on without it, nothing blocks the resume, and `--resume` calibrates
again and completes the run."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest

from contracts.processes import alive
from contracts.run import read_manifest
from tests.helpers import rows, run_cli, start_sweep, trials_by_id
from tests.isolation import leftovers

pytestmark = pytest.mark.privileged


def calibrations(prefix: str) -> list[int]:
    """The pids of the device calibration processes (`python -m client.calibration`) of this testbed:
    those in its client namespace."""
    found = []
    for pid in run_pids(f"{prefix}-client"):
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue  # gone meanwhile
        if b"client.calibration" in argv:
            found.append(pid)
    return found


def run_pids(netns: str) -> list[int]:
    out = subprocess.run(["ip", "netns", "pids", netns], capture_output=True, text=True).stdout
    return [int(p) for p in out.split()]


def wait_until(what: str, check, timeout: float = 120):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(0.1)
    pytest.fail(f"not within {timeout:g} s: {what}")


def test_a_sweep_killed_while_it_calibrates_resumes_with_a_new_calibration(inventory, lease, tmp_path):
    results = tmp_path / "results"
    proc = start_sweep(
        inventory, "--device", "paper-p4", "--ops", "mul", "--sizes", "100,400", "--rates", "50",
        "--methods", "raw,json", "--reps", "3", "--warmup", "0", "--no-validate", "--results", str(results),
        "--name", "calib", "--no-analyze",
    )  # fmt: skip
    try:
        running = wait_until("the sweep calibrates", lambda: calibrations(lease.prefix))
    finally:
        proc.kill()  # -9: no handler of the sweep runs
        proc.wait(timeout=30)
    (run_dir,) = results.iterdir()
    assert "calibrating the client host for device paper-p4" in (run_dir / "sweep.log").read_text()
    # its lock is left naming it, and is taken over (the kernel released the flock with the process)
    assert f"pid {proc.pid} (testbed" in (Path("/run/testbed") / f"{lease.prefix}.lock").read_text()
    manifest = read_manifest(run_dir / "manifest.json")
    assert manifest.status == "interrupted", "a session whose process is gone"
    assert manifest.device is None and rows(run_dir) == [], "killed before its calibration was recorded"
    # the calibration ends with the sweep that asked for it, rather than run its budget beside the
    # next session's calibration (without that guard it ran on for 31 s here)
    wait_until("the calibration ends with the sweep", lambda: not any(alive(p) for p in running), timeout=10)

    out = run_cli(inventory, "sweep", "--resume", str(run_dir), "--no-analyze").stdout
    assert "sweep complete" in out, out
    data = json.loads((run_dir / "manifest.json").read_text())
    assert sorted(trials_by_id(run_dir)) == list(range(data["planned_trials"])), "every trial once"
    assert all(r["ok"] == "true" for r in rows(run_dir))
    assert [s["status"] for s in data["sessions"]] == ["interrupted", "complete"]
    assert data["status"] == "complete"
    # calibrated again by the session that completed the run, for the run's device
    (calibration,) = data["device"]["calibrations"]
    assert data["device"]["profile"]["name"] == "paper-p4" and data["device"]["mode"] == "scaled"
    assert calibration["at"] >= data["sessions"][1]["started_at"]
    assert {(r["op"], r["size"]) for r in calibration["rows"]} == {("mul", 100), ("mul", 400)}

    run_cli(inventory, "down")  # the killed sweep left the testbed up; the resumed one found it so
    assert leftovers(lease.prefix) == []
    assert not any(alive(pid) for pid in running)
