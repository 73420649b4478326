"""Sweeps on the real embedded testbed: crash and resume, Ctrl-C/kill, validation, the analysis at the end."""

from __future__ import annotations

import csv
import json
import signal
from pathlib import Path

import pytest

from tests.helpers import rows, run_cli, start_sweep, wait_for_rows
from tests.isolation import leftovers

pytestmark = pytest.mark.privileged

GRID = ["--ops", "mul", "--sizes", "64,96", "--methods", "json,raw", "--reps", "3", "--warmup", "1"]


def assert_every_trial_once(run_dir: Path) -> list[dict]:
    manifest = json.loads((run_dir / "manifest.json").read_text())
    got = rows(run_dir)
    ids = [int(r["trial"]) for r in got]
    assert sorted(ids) == list(range(manifest["planned_trials"])), "every planned trial exactly once"
    assert manifest["status"] == "complete"
    return got


def test_kill_9_mid_sweep_then_resume_gives_every_trial_once(inventory, tmp_path):
    results = tmp_path / "results"
    reps = 12  # long enough to still be running after the lock checks below
    proc = start_sweep(
        inventory, *GRID, "--reps", str(reps), "--rates", "50,100", "--no-validate", "--results", str(results),
        "--name", "crash",
    )  # fmt: skip
    run_dir = wait_for_rows(proc, results, 7)
    # the testbed is in use: a second sweep, a reshape and a teardown are refused, naming the holder
    second = run_cli(
        inventory, "sweep", *GRID, "--rates", "50", "--results", str(results), "--name", "second", check=False
    )
    for other in (
        second,
        run_cli(inventory, "shape", "--rate", "20", check=False),
        run_cli(inventory, "down", check=False),
    ):
        assert other.returncode == 2 and len(other.stderr.strip().splitlines()) == 1, other.stderr
        assert f"in use by pid {proc.pid} (testbed" in other.stderr and "sweep" in other.stderr
    assert not (results / "second").exists() and len(list(results.iterdir())) == 1
    proc.send_signal(signal.SIGKILL)  # a crash: no handler runs, the testbed stays up
    proc.wait(timeout=30)
    before = rows(run_dir)
    assert 7 <= len(before) < reps * 2 * 2 * 2 + 2 * reps, "killed mid-sweep"

    out = run_cli(inventory, "sweep", "--resume", str(run_dir), "--no-analyze").stdout
    assert "sweep complete" in out
    got = assert_every_trial_once(run_dir)
    assert got[: len(before)] == before, "resuming only appends"
    assert all(r["ok"] == "true" for r in got), [r["error"] for r in got if r["ok"] != "true"]
    local = [r for r in got if r["method"] == "local"]
    assert len(local) == 2 * reps and all(r["rate_mbps"] == "" and float(r["t_total"]) > 0 for r in local)
    remote = [r for r in got if r["method"] != "local"]
    assert {float(r["rate_mbps"]) for r in remote} == {50.0, 100.0}
    for r in remote:
        parts = sum(float(r[k]) for k in ("t_client_encode", "t_comm", "t_client_decode"))
        stages = ("t_server_queue", "t_server_decode", "t_server_compute", "t_server_encode")
        server = sum(float(r[k]) for k in stages)
        assert float(r["t_total"]) == pytest.approx(parts + server, rel=1e-6, abs=1e-6)
        assert int(r["bytes_up"]) > 2 * int(r["size"]) ** 2 * 8 * (0.99 if r["method"] == "raw" else 1)
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert len(manifest["sessions"]) == 2 and manifest["sessions"][1]["skipped_done"] == len(before)


def test_sigterm_tears_down_and_resume_validates_and_analyzes(inventory, lease, tmp_path):
    exp = tmp_path / "tiny.yaml"
    exp.write_text(
        "name: tiny\nops: [mul]\nsizes: [64, 96]\nrates: [20, 50]\nmethods: [json, raw]\nreps: 3\n"
        "warmup: 0\nvalidation:\n  enabled: true\n  duration: 2\n  tolerance_pct: 40\n  retries: 2\n"
    )
    results = tmp_path / "results"
    proc = start_sweep(inventory, str(exp), "--results", str(results))
    run_dir = wait_for_rows(proc, results, 8)
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 130, out
    assert f"testbed sweep --resume {run_dir}" in out
    assert leftovers(lease.prefix) == [], "a sweep that brought the testbed up takes it down when stopped"
    assert len(rows(run_dir)) >= 8

    out = run_cli(inventory, "sweep", "--resume", str(run_dir)).stdout
    assert "analysis:" in out
    assert leftovers(lease.prefix) == []
    got = assert_every_trial_once(run_dir)
    assert all(r["ok"] == "true" for r in got)
    manifest = json.loads((run_dir / "manifest.json").read_text())
    checked = {(v["rate_mbps"], v["direction"]) for v in manifest["validation"] if v.get("ok")}
    assert {rate for rate, _ in checked} == {20.0, 50.0}
    analysis = run_dir / "analysis"
    for name in ("cells.csv", "decision_vectors.csv", "cumulative_penalty.csv", "report.html"):
        assert (analysis / name).stat().st_size > 0, name
    with open(analysis / "cells.csv", newline="") as f:
        cells = list(csv.DictReader(f))
    assert len(cells) == 2 * 2 * 2 and all(int(c["n"]) == 3 for c in cells)
