"""`testbed bench`: the benchmark itself works and writes well-formed results. No timing is asserted."""

from __future__ import annotations

import gzip
import subprocess
import sys

import pytest

from benchmarks import common, fidelity, grid, host
from benchmarks.common import INFO, MISS, PASS, SKIPPED, Row, batch_time
from benchmarks.runner import complete, expected, format_table, key
from contracts.run import Manifest, Session, write_manifest
from tests.fakes import FAKE_SWEEP
from tests.helpers import REPO, check_bench_outputs

TESTBED_SECTIONS = {"efficiency", "orchestration", "rpc"}


def test_a_row_with_a_target_gets_a_verdict():
    assert Row("s", "f", "c", 2.0, "x", ("<=", 3.0)).status == PASS
    assert Row("s", "f", "c", 3.5, "x", ("<=", 3.0)).status == MISS
    assert Row("s", "f", "c", 100.0, "ms", ("<", 100.0)).status == MISS
    assert Row("s", "f", "c", 6.0, "x", (">=", 5.0)).status == PASS
    assert Row("s", "f", "c", 6.0, "MB/s").status == INFO
    assert Row("s", "f", "c", None, "x", ("<=", 3.0), SKIPPED, "why").status == SKIPPED
    assert Row("s", "f", "c", 1.0, "x", ("<=", 1.1)).target_text == "<= 1.1x"
    assert Row("s", "f", "c", 1.0, "ms", ("<", 100.0)).target_text == "< 100 ms"


def test_a_call_is_timed_in_batches_lasting_long_enough_and_the_median_batch_taken(monkeypatch):
    """On a clock that a call moves by 40 microseconds, and every fourth batch by a millisecond more
    (a preemption): each batch lasts at least 20 ms, and the disturbed batch is not the answer."""
    clock = {"now": 0.0, "calls": 0, "batches": 0}
    monkeypatch.setattr(common.time, "perf_counter", lambda: clock["now"])
    sizes = []

    def call():
        clock["now"] += 40e-6
        clock["calls"] += 1

    def batch(fn, calls):
        clock["batches"] += 1
        if clock["batches"] % 4 == 0:
            clock["now"] += 1e-3
        sizes.append(calls)
        return real_batch(fn, calls)

    real_batch = common._batch
    monkeypatch.setattr(common, "_batch", batch)
    assert batch_time(call, 3) == pytest.approx(40e-6)
    timed = sizes[-3:]  # the batches that count: as many calls each, lasting 20 ms at least
    assert len(set(timed)) == 1 and timed[0] * 40e-6 >= 0.02 * 0.999
    assert all(n < timed[0] for n in sizes[:-3]), "the shorter batches only found how many calls"


def test_missing_rows_are_skipped_with_the_reason_in_table_order():
    measured = Row("memory", "client peak RSS added / operand bytes", "raw 1000", 2.0, "x", ("<=", 4.0))
    rows = complete([measured], quick=True, reason="no root")
    assert [r.key for r in rows] == [key(s, f, c) for s, f, c, _, _ in expected(True)]
    assert [r for r in rows if r.status != SKIPPED] == [measured]
    assert all(r.note == "no root" for r in rows if r.status == SKIPPED)
    table = format_table(rows, quick=True)
    assert "raw 1000" in table and "quick run" in table
    assert f"targets: 1 of {sum(1 for r in rows if r.target)} met" in table


def test_bench_quick_without_the_testbed(tmp_path):
    out = tmp_path / "bench"
    proc = subprocess.run(
        [sys.executable, "-m", "testbed", "bench", "--quick", "--skip-testbed", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=REPO,
    )
    assert "targets:" in proc.stdout and str(out / "bench.json") in proc.stdout
    rows = check_bench_outputs(out, quick=True)
    shipped = {grid.CASE: grid.RUN, fidelity.CASE: fidelity.RUN}
    missed = [key(r["section"], r["figure"], r["case"]) for r in rows if r["status"] == MISS]
    assert proc.returncode == (3 if missed else 0), proc.stderr  # the verdict is the exit status
    assert ("target(s) missed" in proc.stderr) == bool(missed)
    for r in rows:
        if r["section"] in TESTBED_SECTIONS:
            assert r["status"] == SKIPPED and "--skip-testbed" in r["note"], r
        elif r["case"] in shipped and not shipped[r["case"]].exists():  # no run shipped yet: it says so
            assert r["status"] == SKIPPED and "no shipped run" in r["note"], r
        else:
            assert r["status"] != SKIPPED, r
    codec_rows = [r for r in rows if r["figure"] == "enc+dec time / memory copy"]
    assert all(r["details"]["encode_MBps"] > 0 and r["details"]["decode_MBps"] > 0 for r in codec_rows)
    (steady,) = [r for r in rows if r["section"] == host.SECTION]  # the host as the figures were taken
    assert 0 <= steady["value"] <= 100 and steady["status"] == "info" and "probes of" in steady["note"]
    assert steady["details"]["probes"] >= 2  # a pass before the benchmarks and one after
    memory_rows = [r for r in rows if r["section"] == "memory"]
    assert all(r["details"]["peak_MB"] > 0 and r["details"]["idle_MB"] > 0 for r in memory_rows)


def grid_run(tmp_path, *sessions: tuple[str, str | None], estimate: float | None = 20 * 3600):
    """A shipped run's directory: a manifest with these sessions (start, end) and 3 trials, gzipped."""
    manifest = Manifest(
        "paper-1",
        "complete",
        FAKE_SWEEP,
        sessions=[Session(start, 0, "complete", ended_at=end) for start, end in sessions],
        estimate_one_testbed_s=estimate,
    )
    write_manifest(tmp_path / "manifest.json", manifest)
    with gzip.open(tmp_path / "trials.csv.gz", "wt") as f:
        f.write("# offload-testbed trials format 4\ntrial,op\n0,mul\n1,mul\n2,mul\n")
    return tmp_path


def test_the_grid_row_is_the_shipped_runs_sessions_over_the_one_testbed_estimate(tmp_path):
    run = grid_run(
        tmp_path,
        ("2026-11-25T10:00:00+00:00", "2026-11-25T11:00:00+00:00"),
        ("2026-11-26T09:00:00+00:00", "2026-11-26T09:30:00+00:00"),
    )
    row = grid.row(run)
    assert row.value == pytest.approx(100 * 1.5 / 20) and row.status == PASS
    assert (row.details["sessions"], row.details["trials"], row.details["wall_s"]) == (2, 3, 5400.0)
    assert "1.50 h over 2 session(s)" in row.note
    slow = grid.row(grid_run(tmp_path, ("2026-11-25T10:00:00+00:00", "2026-11-25T13:00:00+00:00")))
    assert slow.status == MISS  # 3 h of a 20 h estimate: 15%


def test_the_grid_row_is_skipped_saying_why_until_a_finished_run_ships(tmp_path):
    assert "not found" in grid.row(tmp_path / "none").note
    unfinished = grid.row(grid_run(tmp_path, ("2026-11-25T10:00:00+00:00", None)))
    assert unfinished.status == SKIPPED and "--resume" in unfinished.note
    no_estimate = grid.row(
        grid_run(tmp_path, ("2026-11-25T10:00:00+00:00", "2026-11-25T11:00:00+00:00"), estimate=None)
    )
    assert no_estimate.status == SKIPPED and "no one-testbed estimate" in no_estimate.note


def test_the_fidelity_row_is_the_worst_kind_of_works_miss_over_its_tolerance(tmp_path):
    """The stored v1 run (paper-p4, scaled): the row's figure is the worst kind of work's |mean - target|
    over what max(10%, 0.1 ms) allows it, computed here from the fidelity table; no run: skipped."""
    from analysis.load import load_run
    from analysis.trial_fidelity import trial_fidelity
    from contracts.tolerance import DEFAULT

    none = fidelity.row(tmp_path / "none")
    assert none.status == SKIPPED and "no shipped run" in none.note
    stored = REPO / "tests" / "data" / "runs" / "v1-tiny"
    row = fidelity.row(stored)
    run = load_run(stored)
    table = trial_fidelity(run.trials, run.manifest)
    allowed = table["target_s"].map(DEFAULT.allowed_s)  # v1 recorded no tolerance of its own: the default
    worst = ((table["mean_s"] - table["target_s"]).abs() / allowed).max()
    assert row.value == pytest.approx(worst) and row.status == (PASS if worst <= 1 else MISS)
    assert f"{row.details['trials_flagged']} of {row.details['trials']} trials emulation_flagged" in row.note
