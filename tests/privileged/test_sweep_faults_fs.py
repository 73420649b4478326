"""The results file system fills up mid-sweep (issue 23), on the real embedded testbed: the sweep
stops in one line with the resume command, keeps every row it wrote whole, and `--resume` runs
exactly the missing trials once there is room again."""

from __future__ import annotations

import errno
import json
import re
import subprocess

import pytest

from contracts.run import read_manifest, read_trials
from tests.helpers import rows, run_cli, start_sweep, trials_by_id, wait_for_rows
from tests.isolation import leftovers

pytestmark = pytest.mark.privileged


@pytest.fixture
def small_fs(tmp_path, lease):
    """A 2 MB tmpfs of this test's own (the lease: root), unmounted whatever the test did."""
    mount = tmp_path / "small"
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mount)], check=True)
    try:
        yield mount
    finally:
        subprocess.run(["umount", "--lazy", str(mount)], check=True)


def fill(directory) -> int:
    """Write a file in `directory` until its file system is full; its size."""
    written = 0
    with open(directory / "filler", "wb", buffering=0) as f:
        try:
            while True:
                written += f.write(b"\0" * 65536)
        except OSError as exc:
            assert exc.errno == errno.ENOSPC, exc
    return written


def test_a_full_results_file_system_stops_the_sweep_in_one_line_and_resume_completes_it(
    inventory, lease, small_fs
):
    results = small_fs / "results"
    proc = start_sweep(
        inventory, "--ops", "mul", "--sizes", "64,96", "--rates", "50", "--methods", "json,raw",
        "--reps", "30", "--warmup", "0", "--no-validate", "--results", str(results), "--name", "full",
        "--no-analyze",
    )  # fmt: skip
    run_dir = wait_for_rows(proc, results, 6)
    assert fill(small_fs) > 0
    out, _ = proc.communicate(timeout=300)

    assert proc.returncode == 2, out
    assert "Traceback" not in out and "Logging error" not in out, out
    errors = [line for line in out.splitlines() if line.startswith("testbed: error:")]
    assert len(errors) == 1, out
    assert re.fullmatch(
        rf"testbed: error: no space left on the results file system: cannot write "
        rf"{re.escape(str(run_dir))}/(trials\.csv|manifest\.json) \(No space left on device\) "
        rf"\(fix: free space on the file system of {re.escape(str(run_dir))}, then continue with: "
        rf"testbed sweep --resume {re.escape(str(run_dir))}\)",
        errors[0],
    ), errors[0]
    assert leftovers(lease.prefix) == [], "the sweep brought the testbed up and takes it down when it stops"
    text = (run_dir / "trials.csv").read_text()
    assert text.endswith("\n"), "no row cut short"
    before = rows(run_dir)
    assert 6 <= len(before) < 4 * 30 * 2 - 2 * 30, "stopped mid-sweep"
    assert len(read_trials(run_dir / "trials.csv").records) == len(before)
    # the manifest is whole: "stopped" if its last write fitted, else it still says running, which
    # reads as interrupted now that the sweep's process is gone
    manifest = read_manifest(run_dir / "manifest.json")
    assert manifest.status in ("stopped", "interrupted")
    assert manifest.sessions[-1].status in ("stopped", "running")
    assert not list(run_dir.glob("*.tmp")), "no half-written copy of the manifest"

    (small_fs / "filler").unlink()
    out = run_cli(inventory, "sweep", "--resume", str(run_dir), "--no-analyze").stdout
    assert "sweep complete" in out
    data = json.loads((run_dir / "manifest.json").read_text())
    assert sorted(trials_by_id(run_dir)) == list(range(data["planned_trials"])), "every trial once"
    assert rows(run_dir)[: len(before)] == before, "resuming only appends"
    assert all(r["ok"] == "true" for r in rows(run_dir)), "no trial failed for the full disk"
    assert [s["status"] for s in data["sessions"]][1:] == ["complete"] and data["status"] == "complete"
    assert data["sessions"][0]["status"] in ("stopped", "interrupted")
    assert data["sessions"][1]["skipped_done"] == len(before)

    run_cli(inventory, "down")
    assert leftovers(lease.prefix) == []
