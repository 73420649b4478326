"""What `testbed sweep` tells at its end, through the fake embedded testbed (no root): its exit status
(4 when cells have no usable trial), the cells it names and why, and errors that say what was
measured, never `None`."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from contracts.command import Result
from contracts.run import TrialRecord
from contracts.worker_api import TrialResult
from testbed.cli import build_parser
from testbed.cli import sweep as sweep_cli
from testbed.link import validate as validate_mod
from testbed.link.validate import iperf3_result
from testbed.sweep.bookkeeping import trial_row
from testbed.sweep.plan import plan_trials
from testbed.sweep.trials import unusable_cells
from tests.fakes import FAKE_SWEEP, IPERF, link
from tests.helpers import trials_by_id

EXPERIMENT = """\
name: fake
ops: [mul]
sizes: [100, 200]
rates: [10, 40]
methods: [json, raw]
reps: 2
warmup: 0
seed: 3
trial_timeout: 5
validation:
  duration: 1
  retries: 1
"""
REFUSED = "unable to connect to server - server may have stopped running or use a different port"


@pytest.fixture
def sweep(lab, tmp_path, monkeypatch):
    """`testbed sweep` as the user runs it, on the fake testbed; returns (exit status, run directory)."""
    monkeypatch.setattr(sweep_cli, "open_lab", lambda inv: lab)
    monkeypatch.setattr(validate_mod.time, "sleep", lambda s: None)  # iperf3's retries, without waiting
    experiment = tmp_path / "fake.yaml"
    experiment.write_text(EXPERIMENT)
    results = tmp_path / "results"

    def run() -> tuple[int, object]:
        args = build_parser().parse_args(
            ["--inventory", str(lab.inv.path), "sweep", str(experiment), "--results", str(results)]
            + ["--no-analyze"]
        )
        status = args.handler(args)
        (run_dir,) = results.iterdir()
        return status, run_dir

    return run


def iperf3_refused_at(lab, rate_bps: int) -> None:
    """iperf3 cannot reach its server while the link is at `rate_bps`; elsewhere it measures 99%."""
    measured = lab.hosts["client"].commands[0][1]  # the `link` script, the latest for IPERF

    def iperf(argv):
        if lab.hosts["appliance"].args("shape.apply")[-1]["link"]["up_rate"] == rate_bps:
            return 1, json.dumps({"error": REFUSED})  # what client.iperf prints when iperf3 fails
        return measured(argv)

    lab.hosts["client"].on(*IPERF, answer=iperf)


def test_a_sweep_whose_every_cell_has_an_ok_trial_exits_0(sweep, capsys):
    status, run_dir = sweep()
    assert status == 0
    assert all(r["ok"] == "true" for r in trials_by_id(run_dir).values())
    assert "no usable trial" not in capsys.readouterr().out


def test_a_rate_iperf3_cannot_measure_exits_4_naming_its_cells_and_iperf3s_error(lab, sweep, capsys):
    iperf3_refused_at(lab, 10_000_000)
    status, run_dir = sweep()

    assert status == sweep_cli.EXIT_UNUSABLE == 4
    written = trials_by_id(run_dir)
    failed = {r["error"] for r in written.values() if r["ok"] != "true"}
    expected = (
        f"link validation failed at 10 Mbit/s (up: iperf3 failed: {REFUSED}; "
        f"down: iperf3 failed: {REFUSED}); rate skipped"
    )
    assert failed == {expected}
    assert "None" not in expected
    out = capsys.readouterr().out
    assert "4 cell(s) have no usable trial:" in out
    for cell in ("mul 100 @ 10 Mbit/s json", "mul 200 @ 10 Mbit/s json", "mul 100 @ 10 Mbit/s raw"):
        assert f"  {cell}: 2 trial(s), all failed; most common error: link validation failed" in out
    assert "@ 40 Mbit/s" not in out and "local" not in out.split("no usable trial")[1]


def test_a_rate_measured_short_names_what_was_measured(lab, sweep, capsys):
    link(lab, lambda rate, n: 0.8 if rate == 10.0 else 0.99)
    status, run_dir = sweep()
    assert status == 4
    (error,) = {r["error"] for r in trials_by_id(run_dir).values() if r["ok"] != "true"}
    assert error.startswith("link validation failed at 10 Mbit/s (up measured 7.65")
    assert "vs 9.564 Mbit/s" in error


# ------------------------------------------------------------------ the pieces, alone
PLAN = plan_trials(replace(FAKE_SWEEP, reps=3))  # 3 trials a cell


def record(t, ok: bool, error: str | None = None) -> TrialRecord:
    """The row the sweep writes for trial `t` from the worker's answer."""
    return trial_row("r", t, TrialResult(ok=ok, t_total=0.1 if ok else None, error=error))


def test_a_cell_is_unusable_when_no_trial_of_it_is_ok_and_says_its_most_common_error():
    first, last = PLAN[0].cell, PLAN[-1].cell
    failing = [t for t in PLAN if t.cell == first]  # every trial failed
    mixed = [t for t in PLAN if t.cell == PLAN[5].cell]  # one failed, one ok: usable
    records = [record(t, True) for t in PLAN if t.cell not in (first, last, mixed[0].cell)]
    records += [record(failing[0], False, "rare")] + [record(t, False, "common") for t in failing[1:]]
    records += [record(mixed[0], False, "boom"), record(mixed[1], True)]
    # the last cell has no row at all
    assert unusable_cells(PLAN, records) == [
        ("mul 100 local", f"{len(failing)} trial(s), all failed; most common error: common"),
        ("mul 200 @ 40 Mbit/s raw", "no trial ran"),
    ]
    assert unusable_cells(PLAN, [record(t, True) for t in PLAN]) == []


def test_the_report_names_ten_cells_then_counts_the_rest(tmp_path):
    cells = [
        (f"mul {n} local", "2 trial(s), all failed; most common error: boom\nline two") for n in range(13)
    ]
    report = sweep_cli.unusable_report(cells, tmp_path)
    lines = report.splitlines()
    assert lines[0] == "13 cell(s) have no usable trial:"
    assert lines[1] == "  mul 0 local: 2 trial(s), all failed; most common error: boom line two"
    assert len([line for line in lines if line.startswith("  mul ")]) == 10
    assert "  ... and 3 more" in lines


@pytest.mark.parametrize(
    ("stdout", "stderr", "status", "why"),
    [
        (json.dumps({"error": REFUSED}), "", 1, REFUSED),
        ("", "Traceback ...\nImportError: libiperf.so.0", 1, "Traceback ...\nImportError: libiperf.so.0"),
        ("", "", -9, "no result (exit status -9)"),
        ("{}", "", 0, "no result (exit status 0)"),
    ],
    ids=["iperf3-error", "crashed", "killed", "no-end"],
)
def test_a_failed_iperf3_run_says_why(stdout, stderr, status, why):
    assert iperf3_result(Result("client", ["python"], status, stdout, stderr)) == why


def test_the_sweeps_help_documents_its_exit_statuses(capsys):
    with pytest.raises(SystemExit):
        build_parser().parse_args(["sweep", "--help"])
    out = capsys.readouterr().out
    assert "exit status:" in out and "  4    the sweep finished, but some cells have no usable trial" in out
    assert "  130  interrupted" in out
