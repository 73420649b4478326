"""Link trace files: the CSV and Mahimahi formats into a ReplayPlan, bad files refused in one line
naming the file, the line and the reason, and the shipped traces exactly what their script writes."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from contracts.errors import UserError
from contracts.trace import ReplayPlan, TraceStep
from testbed.link.trace import load_trace, read_csv, read_mahimahi

REPO = Path(__file__).resolve().parents[2]


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_csv_rows_hold_until_the_next_and_the_last_is_the_end(tmp_path):
    path = write(tmp_path, "t.csv", "# a comment\nt_s,up_mbps,down_mbps\n0,10,20\n\n1.5,2.5,40\n4,1,1\n")
    plan = load_trace(path)
    assert plan.steps == (TraceStep(0.0, 10_000_000, 20_000_000), TraceStep(1.5, 2_500_000, 40_000_000))
    assert plan.end_s == 4.0
    assert plan.interval(0) == (0.0, 1.5) and plan.interval(1) == (1.5, 4.0)
    assert plan.step_at(1.49).up_bps == 10_000_000 and plan.step_at(5.0).t_s == 0.0  # looped: 5 % 4
    assert not plan.needs_netem


def test_csv_delay_and_loss_columns(tmp_path):
    path = write(tmp_path, "t.csv", "0,10,10,20,0.5\n1,10,10,,\n2,10,10,0,0\n")
    plan = read_csv(path)
    assert plan.steps[0] == TraceStep(0.0, 10_000_000, 10_000_000, 20.0, 0.5)
    assert plan.steps[1] == TraceStep(1.0, 10_000_000, 10_000_000, None, None)
    assert plan.needs_netem and plan.end_s == 2.0


def test_mahimahi_rates_per_interval_at_the_granularity(tmp_path):
    # 250 ms long; its last opportunity is the next pass's time 0: 4 in [0,100), none, 1 in [200,250)
    path = write(tmp_path, "link.down", "0\n10\n99\n200\n250\n")
    plan = read_mahimahi(path, granularity_ms=100)
    per = 1500 * 8
    assert [s.t_s for s in plan.steps] == [0.0, 0.1, 0.2]
    assert [s.down_bps for s in plan.steps] == [4 * per * 10, 0, 1 * per * 20]  # the last over its 50 ms
    assert [s.up_bps for s in plan.steps] == [s.down_bps for s in plan.steps]  # one file: both ways
    assert plan.end_s == 0.25


def test_mahimahi_two_files_and_coarser_granularity(tmp_path):
    up = write(
        tmp_path, "l.up", "".join(f"{t}\n" for t in range(1, 2001))
    )  # one a ms: 12 Mbit/s (2000 is the next pass's 0)
    down = write(tmp_path, "l.down", "".join(f"{t}\n" for t in range(1, 2001) for _ in range(2)))
    plan = load_trace(up, down, granularity_ms=1000)
    assert [(s.up_bps, s.down_bps) for s in plan.steps] == [(12_000_000, 24_000_000)] * 2
    assert plan.end_s == 2.0 and "l.down (down)" in plan.source


BAD = [
    ("t.csv", "t_s,up_mbps,down_mbps\n0,10,10\n1,x,10\n2,1,1\n", 3, "up_mbps 'x' is not a number"),
    ("t.csv", "0,10,10\n1,10\n2,1,1\n", 2, "2 fields"),
    ("t.csv", "0,10,10\n2,10,10\n1,1,1\n", 3, "t_s 1 does not follow the previous row's 2"),
    ("t.csv", "1,10,10\n2,1,1\n", 1, "a trace starts at 0"),
    ("t.csv", "0,10,-3\n2,1,1\n", 1, "down_mbps -3 is not a finite number >= 0"),
    ("t.csv", "0,10,10,5,120\n2,1,1\n", 1, "loss_pct 120 is over 100"),
    ("t.csv", "t_s,up_mbps,down_mbps\n0,10,10\n", 2, "at least two rows"),
    ("t.mm", "0\n5\n4\n", 3, "timestamp 4 goes back in time (after 5)"),
    ("t.mm", "0\n5\n1.5\n", 3, "'1.5' is not a whole number of milliseconds"),
    ("t.mm", "0\n-1\n", 2, "timestamp -1 is negative"),
]


@pytest.mark.parametrize(("name", "text", "line", "reason"), BAD)
def test_bad_trace_files_name_file_line_and_reason(tmp_path, name, text, line, reason):
    path = write(tmp_path, name, text)
    with pytest.raises(UserError) as refused:
        load_trace(path)
    assert refused.value.message.startswith(f"{path}:{line}: ")
    assert reason in refused.value.message
    assert "\n" not in str(refused.value)


def test_missing_file_and_csv_with_a_down_trace_refused(tmp_path):
    with pytest.raises(UserError, match="cannot read trace"):
        load_trace(tmp_path / "nope.csv")
    csv = write(tmp_path, "t.csv", "0,1,1\n1,1,1\n")
    with pytest.raises(UserError, match="drop --down-trace"):
        load_trace(csv, csv)


def test_plan_as_json_round_trip_and_refusals():
    plan = ReplayPlan((TraceStep(0, 1, 2), TraceStep(0.5, 0, 3, 10.0, 1.0)), 1.0, "x")
    assert ReplayPlan.from_dict(plan.as_dict()) == plan
    with pytest.raises(UserError, match="not after its last step"):
        ReplayPlan((TraceStep(0, 1, 1),), 0.0)
    with pytest.raises(ValueError, match="not a replay plan"):
        ReplayPlan.from_dict({"steps": [[0, 1]], "end_s": 1})


def test_shipped_traces_are_what_the_script_writes(tmp_path):
    subprocess.run(
        [sys.executable, str(REPO / "scripts" / "make_traces.py"), "--out", str(tmp_path)], check=True
    )
    shipped = sorted(p.name for p in (REPO / "experiments" / "traces").glob("*.csv"))
    assert shipped == ["cellular.csv", "on-off.csv", "ramp.csv", "steps.csv"]
    for name in shipped:
        assert (tmp_path / name).read_text() == (REPO / "experiments" / "traces" / name).read_text()
        plan = load_trace(tmp_path / name)
        assert plan.end_s >= 10
    ramp = load_trace(tmp_path / "ramp.csv")
    assert max(b.t_s - a.t_s for a, b in zip(ramp.steps, ramp.steps[1:], strict=False)) <= 0.1 + 1e-9
    cellular = load_trace(tmp_path / "cellular.csv")
    assert any(s.down_bps == 0 for s in cellular.steps)  # it has outages
