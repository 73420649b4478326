"""`testbed bench`: the benchmark itself works and writes well-formed results. No timing is asserted."""

from __future__ import annotations

import subprocess
import sys

from benchmarks.common import INFO, MISS, PASS, SKIPPED, Row
from benchmarks.runner import complete, expected, format_table, key
from tests.helpers import REPO, check_bench_outputs

TESTBED_SECTIONS = {"efficiency", "orchestration"}


def test_a_row_with_a_target_gets_a_verdict():
    assert Row("s", "f", "c", 2.0, "x", ("<=", 3.0)).status == PASS
    assert Row("s", "f", "c", 3.5, "x", ("<=", 3.0)).status == MISS
    assert Row("s", "f", "c", 100.0, "ms", ("<", 100.0)).status == MISS
    assert Row("s", "f", "c", 6.0, "x", (">=", 5.0)).status == PASS
    assert Row("s", "f", "c", 6.0, "MB/s").status == INFO
    assert Row("s", "f", "c", None, "x", ("<=", 3.0), SKIPPED, "why").status == SKIPPED
    assert Row("s", "f", "c", 1.0, "x", ("<=", 1.1)).target_text == "<= 1.1x"
    assert Row("s", "f", "c", 1.0, "ms", ("<", 100.0)).target_text == "< 100 ms"


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
    missed = [key(r["section"], r["figure"], r["case"]) for r in rows if r["status"] == MISS]
    assert proc.returncode == (3 if missed else 0), proc.stderr  # the verdict is the exit status
    assert ("target(s) missed" in proc.stderr) == bool(missed)
    for r in rows:
        if r["section"] in TESTBED_SECTIONS:
            assert r["status"] == SKIPPED and "--skip-testbed" in r["note"], r
        else:
            assert r["status"] != SKIPPED, r
    codec_rows = [r for r in rows if r["figure"] == "enc+dec time / memory copy"]
    assert all(r["details"]["encode_MBps"] > 0 and r["details"]["decode_MBps"] > 0 for r in codec_rows)
    memory_rows = [r for r in rows if r["section"] == "memory"]
    assert all(r["details"]["peak_MB"] > 0 and r["details"]["idle_MB"] > 0 for r in memory_rows)
