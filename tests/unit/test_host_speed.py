"""The host's speed through a sweep: the recorder's file, which trials ran on a slow host, and what the
summary and the report's verdict say of it (contracts/steadiness.py, testbed/sweep/host_speed.py,
analysis/host_speed.py)."""

from __future__ import annotations

import io
import time
from datetime import UTC, datetime
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest

from analysis import analyze
from analysis.host_speed import (
    RECORD,
    SLOW,
    STEADY,
    UNRECORDED,
    host_speed_lines,
    host_speed_table,
    read_host_speed,
)
from contracts.hosts import Backend
from contracts.steadiness import HOST_SPEED_FILE, HOST_SPEED_HEADER, record
from testbed.sweep.host_speed import recording_host_speed
from tests.synthetic import write_synthetic_run

T0 = datetime(2026, 1, 1, tzinfo=UTC).timestamp()  # the synthetic runs' first trial starts then


def write_record(run_dir, probes: list[tuple[float, float]], tail: str = "") -> None:
    """host_speed.csv with probes (seconds after T0, ms) and whatever a killed recorder left at its end."""
    lines = [HOST_SPEED_HEADER] + [f"{T0 + at:.3f},{ms}" for at, ms in probes]
    (run_dir / HOST_SPEED_FILE).write_text("\n".join(lines) + "\n" + tail)


def test_the_recorder_appends_one_flushed_line_per_probe_and_its_header_once(tmp_path):
    path = tmp_path / HOST_SPEED_FILE
    clock = iter([100.0, 100.25, 100.5])
    waits = []
    record(path, every_s=0.25, one=lambda: 0.002, clock=lambda: next(clock), sleep=waits.append, probes=2)
    record(path, one=lambda: 0.0035, clock=lambda: next(clock), sleep=waits.append, probes=1)  # resumed
    assert path.read_text().splitlines() == [
        HOST_SPEED_HEADER, "100.000,2.0000", "100.250,2.0000", "100.500,3.5000"
    ]  # fmt: skip
    assert waits == [0.25, 0.25, 0.25]


def test_a_record_after_a_line_cut_short_starts_on_its_own_line_and_a_full_disk_ends_it(tmp_path):
    path = tmp_path / HOST_SPEED_FILE
    path.write_text(HOST_SPEED_HEADER + "\n100.000,2.0000\n100.250,2.")  # the recorder killed mid-line
    record(path, one=lambda: 0.003, clock=lambda: 101.0, sleep=lambda s: None, probes=1)
    assert path.read_text().splitlines() == [HOST_SPEED_HEADER, "100.000,2.0000", "101.000,3.0000"]
    # /dev/full: every write fails with ENOSPC, as on a full results file system; the record just ends
    record(Path("/dev/full"), one=lambda: 0.002, sleep=lambda s: None, probes=3)


def test_a_line_the_recorder_was_killed_in_is_left_out(tmp_path):
    write_record(tmp_path, [(0.0, 2.0), (0.25, 3.4)], tail="bad,line,x\n1767225600.5,2.")
    probes = read_host_speed(tmp_path)
    assert list(probes["probe_ms"]) == [2.0, 3.4]
    assert read_host_speed(tmp_path / "elsewhere") is None


def trial(start_s: float, wall_s: float, flagged: bool, ok: bool = True, method: str = "raw") -> dict:
    started = datetime.fromtimestamp(T0 + start_s, UTC).isoformat(timespec="milliseconds")
    local = method == "local"
    return {
        "ok": ok, "started_at": started, "method": method, "emulation_flagged": flagged,
        "wall_client_encode": None if local else 0.1, "t_client_encode": None if local else 2.0,
        "t_request": None if local else wall_s - 0.2, "wall_client_decode": None if local else 0.1,
        "t_client_decode": None if local else 3.0, "wall_total": wall_s if local else None,
        "t_total": 50.0,
    }  # fmt: skip


def test_a_trial_with_a_slow_probe_in_its_span_ran_on_a_slow_host():
    # probes every second from 0 to 20 s; slow (3.5 ms against 2.0) at 10 and 11 s
    probes = pd.DataFrame(
        {"at": [T0 + s for s in range(21)], "probe_ms": [3.5 if s in (10, 11) else 2.0 for s in range(21)]}
    )
    trials = pd.DataFrame(
        [
            trial(0.1, 2.0, flagged=False),  # 0.1-2.6 s (its wall and the margin): probes at 1 and 2
            trial(3.1, 1.5, flagged=True),  # steady, yet flagged: the emulation's miss
            trial(9.5, 1.0, flagged=True),  # 9.5-11.0: the probes at 10 and 11 s are slow
            trial(11.2, 2.0, flagged=False, method="local"),  # 11.2-13.7: the one at 11 s is before it
            trial(14.1, 0.2, flagged=False),  # 14.1-14.8: no probe in it
            trial(10.0, 5.0, flagged=True, ok=False),  # failed: not counted
        ]
    )
    table = host_speed_table(trials, probes, slow_pct=10).set_index("host")
    assert table.loc[STEADY, ["trials", "flagged"]].tolist() == [3, 1]
    assert table.loc[SLOW, ["trials", "flagged", "probes", "slow_probes"]].tolist() == [1, 1, 2, 2]
    assert table.loc[UNRECORDED, ["trials", "probes"]].tolist() == [1, 0]
    assert table.loc[RECORD, ["trials", "flagged", "probes", "slow_probes"]].tolist() == [5, 2, 21, 2]
    assert table.loc[RECORD, "fastest_ms"] == 2.0 and table.loc[RECORD, "slowest_ms"] == 3.5
    # judged by 80%, 3.5 ms is within reach of 2.0: every recorded trial ran on a steady host
    loose = host_speed_table(trials, probes, slow_pct=80).set_index("host")
    assert loose.loc[SLOW, "trials"] == 0 and loose.loc[STEADY, "trials"] == 4
    assert host_speed_table(trials, None, slow_pct=10).empty


def test_the_summary_line_says_the_share_of_slow_probes_and_the_flags_on_each_host():
    rows = [
        {"host": STEADY, "trials": 40, "flagged": 1, "probes": 300, "slow_probes": 0},
        {"host": SLOW, "trials": 10, "flagged": 9, "probes": 80, "slow_probes": 30},
        {"host": UNRECORDED, "trials": 0, "flagged": 0, "probes": 0, "slow_probes": 0},
        {"host": RECORD, "trials": 50, "flagged": 10, "probes": 400, "slow_probes": 40, "slow_pct": 10.0},
    ]
    (line,) = host_speed_lines(pd.DataFrame(rows))
    assert line.startswith("host speed through the sweep unsteady: 10% of 400 probes slow")
    assert "trials flagged: 1 of 40 on a steady host, 9 of 10 on a slow host" in line
    assert host_speed_lines(pd.DataFrame()) == []


@pytest.mark.parametrize(("slow", "highlighted"), [(True, True), (False, False)])
def test_the_analysis_writes_the_table_and_says_it_in_the_summary_and_the_verdict(
    tmp_path, slow, highlighted
):
    run = write_synthetic_run(tmp_path / "run", sizes=(100,), rates=(10,), methods=("raw",), reps=2)
    write_record(run, [(s / 4, 3.5 if slow and s % 2 else 2.0) for s in range(0, 60 * 4)])
    text = io.StringIO()
    out = analyze(run, plots=False, out=text)
    table = pd.read_csv(out / "host_speed.csv").set_index("host")
    assert table.loc[RECORD, "probes"] == 240
    assert ("host speed through the sweep unsteady: 50% of 240 probes" in text.getvalue()) == highlighted
    html = (out / "report.html").read_text()
    row = next(r for r in html.split("<tr") if "host_speed.csv" in r)
    assert row.startswith(' class="bad"') == highlighted
    assert f"{50 if slow else 0}% of 240 probes" in row


def test_a_run_without_the_record_says_nothing_of_it(tmp_path):
    run = write_synthetic_run(tmp_path / "run", sizes=(100,), rates=(10,), methods=("raw",), reps=2)
    text = io.StringIO()
    out = analyze(run, plots=False, out=text)
    assert not (out / "host_speed.csv").exists() and "host speed" not in text.getvalue()


def lab_testbeds(*backends: str) -> list:
    return [SimpleNamespace(lab=SimpleNamespace(inv=SimpleNamespace(backend=b))) for b in backends]


def test_the_sweep_records_the_host_where_all_its_testbeds_run_and_stops_with_it(tmp_path):
    with recording_host_speed(tmp_path, lab_testbeds(Backend.NETNS, Backend.SSH)) as recording:
        assert not recording  # over SSH the trials run elsewhere: this host's probes would not say
    assert not (tmp_path / HOST_SPEED_FILE).exists()
    path = tmp_path / HOST_SPEED_FILE
    with recording_host_speed(tmp_path, lab_testbeds(Backend.NETNS, Backend.NETNS)) as recording:
        assert recording
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and len(path.read_text().splitlines() if path.exists() else []) < 3:
            time.sleep(0.1)
    probes = read_host_speed(tmp_path)
    assert probes is not None and len(probes) >= 2 and (probes["probe_ms"] > 0).all()
    size = path.stat().st_size
    time.sleep(0.6)
    assert path.stat().st_size == size  # the recorder ended with the block
