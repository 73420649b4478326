"""Plain helpers shared by test modules (fixtures live in the `conftest.py` modules, never here)."""

from __future__ import annotations

import csv
import json
import math
import statistics
import subprocess
import sys
import textwrap
import time
from collections import deque
from pathlib import Path

import pytest

from benchmarks.common import INFO, MISS, PASS, SKIPPED
from benchmarks.runner import expected, key
from client.scaler import REFERENCE_WINDOW
from contracts.run import FORMAT_VERSION, TRIALS_MARK, read_manifest

REPO = Path(__file__).resolve().parent.parent
AGENT = [sys.executable, "-m", "agent", "--serve"]  # the resident host agent, on this machine


# ------------------------------------------------------------------ the testbed CLI, as a user runs it
def run_cli(
    inventory: Path, *args: str, check: bool = True, timeout: float = 600
) -> subprocess.CompletedProcess:
    proc = subprocess.run(
        [sys.executable, "-m", "testbed", "--inventory", str(inventory), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=REPO,
    )
    if check and proc.returncode != 0:
        raise AssertionError(
            f"testbed {' '.join(args)} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}"
        )
    return proc


def start_sweep(inventory: Path, *args: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "testbed", "--inventory", str(inventory), "sweep", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=REPO,
    )


# ------------------------------------------------------------------ a run directory
def rows(run_dir: Path) -> list[dict]:
    """trials.csv's rows as written (text), in file order; the file begins with its format's mark."""
    lines = (run_dir / "trials.csv").read_text().splitlines(keepends=True)
    if not lines:
        return []  # the sweep has just created it
    assert lines[0] == f"{TRIALS_MARK}{FORMAT_VERSION}\n", lines[0]
    return list(csv.DictReader(lines[1:]))


def wait_for_rows(proc: subprocess.Popen, results: Path, n: int, timeout: float = 300) -> Path:
    """The run directory under `results` once it holds `n` rows (fails if the sweep ends first)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        runs = list(results.glob("*/trials.csv"))
        if runs and len(rows(runs[0].parent)) >= n:
            return runs[0].parent
        if proc.poll() is not None:
            pytest.fail(f"the sweep ended before {n} trials:\n{proc.stdout.read()}")
        time.sleep(0.2)
    proc.kill()
    pytest.fail(f"no {n} trials within {timeout} s")


def write_experiment(tmp_path: Path, text: str) -> Path:
    """An experiment file `exp.yaml` in `tmp_path` from an indented YAML string."""
    path = tmp_path / "exp.yaml"
    path.write_text(textwrap.dedent(text))
    return path


def followed_slowdowns(row: dict, cpus: list[float]) -> list[float]:
    """The slowdown each trial of a kind of work was scaled by, in the trials' order, from its
    calibration `row` and the trials' CPU times: the device's target over the mean of the runs before
    it; the calibration's mean stands in until the first trial's run replaces it (client/scaler.py)."""
    window = deque([row["target_s"] / row["slowdown"]], maxlen=REFERENCE_WINDOW)
    slowdowns = []
    for i, cpu in enumerate(cpus):
        slowdowns.append(row["target_s"] / statistics.fmean(window))
        if i == 0:
            window.clear()
        window.append(cpu)
    return slowdowns


def trials_by_id(run_dir: Path) -> dict[int, dict]:
    """trials.csv's rows by trial number (no trial has two)."""
    found = rows(run_dir)
    by_trial = {int(r["trial"]): r for r in found}
    assert len(by_trial) == len(found), "a trial has two rows"
    return by_trial


def timed(specs: list[dict]) -> list[int]:
    """The trials among the specs a worker was sent (warm-ups have negative numbers)."""
    return [s["trial"] for s in specs if s["trial"] >= 0]


def saved(run_dir: Path) -> dict:
    """The run's manifest, as the sweep reads it, as a dict."""
    return read_manifest(run_dir / "manifest.json").as_dict()


# ------------------------------------------------------------------ `testbed bench`'s outputs
def run_bench(inventory: Path, out: Path) -> tuple[subprocess.CompletedProcess, list[dict]]:
    """`testbed bench --quick`, and its rows. Timing is the bench's verdict, never a test's: a missed
    target is allowed here, but the exit status must say it (3) exactly when a row says MISS."""
    proc = run_cli(inventory, "bench", "--quick", "--out", str(out), timeout=900, check=False)
    assert proc.returncode in (0, 3), proc.stderr
    rows = check_bench_outputs(out, quick=True)
    missed = [key(r["section"], r["figure"], r["case"]) for r in rows if r["status"] == MISS]
    assert proc.returncode == (3 if missed else 0), proc.stderr
    return proc, rows


def check_bench_outputs(out: Path, quick: bool) -> list[dict]:
    """bench.json, bench.csv and table.txt exist and hold every expected row; measured ones are sane."""
    doc = json.loads((out / "bench.json").read_text())
    found = doc["rows"]
    assert [key(r["section"], r["figure"], r["case"]) for r in found] == [
        key(s, f, c) for s, f, c, _, _ in expected(quick)
    ]
    for r in found:
        assert r["status"] in (PASS, MISS, INFO, SKIPPED), r
        if r["status"] == SKIPPED:
            assert r["value"] is None and r["note"], r
        else:
            assert isinstance(r["value"], float) and math.isfinite(r["value"]) and r["value"] > 0, r
            assert (r["status"] == INFO) == (r["target"] is None), r
    with open(out / "bench.csv", newline="") as f:
        table = list(csv.DictReader(f))
    assert [(t["figure"], t["case"], t["status"]) for t in table] == [
        (r["figure"], r["case"], r["status"]) for r in found
    ]
    for t, r in zip(table, found, strict=True):
        assert (float(t["value"]) if t["value"] else None) == r["value"]
        assert json.loads(t["details"]) == r["details"]
    text = (out / "table.txt").read_text()
    assert all(r["case"] in text for r in found)
    assert doc["environment"]["cpus"] and doc["summary"]["targets"] > 0
    return found
