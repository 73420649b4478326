"""An adaptive sweep through fake hosts, without root: rounds across the open cells, the local baseline
kept while a cell needs it, early stops, a rate that fails validation, and resume mid-round.

The scripted worker answers from the trial's cell and repetition: the local baseline takes about 1 s,
RAW 0.2 s (clearly offloads) and JSON 3 s (clearly stays local), except JSON at 10 Mbit/s for the
100x100 matrix, which takes what the baseline takes: a borderline cell that never becomes significant.
"""

from __future__ import annotations

import io
import signal
from collections import Counter
from dataclasses import replace

import pandas as pd
import pytest

from analysis import analyze
from testbed.run_files import ManifestFile
from testbed.sweep.bookkeeping import start_run
from testbed.sweep.phases import run_sweep
from testbed.sweep.plan import plan_trials
from tests.fakes import FAKE_SWEEP, link
from tests.helpers import saved, timed, trials_by_id

ADAPTIVE = replace(FAKE_SWEEP, name="adaptive", reps=8, min_reps=3)
PLAN = {t.trial: t for t in plan_trials(ADAPTIVE)}  # 80 trials at the most: 10 cells x 8
NOISE = (0.05, -0.05, 0.03, -0.03, 0.01, -0.01, 0.04, -0.04)
BORDERLINE = ("mul", 100, 10.0, "json", "python")


def answer(spec: dict) -> dict:
    t = PLAN.get(spec["trial"])
    if t is None:  # a warm-up
        return {"trial": spec["trial"], "ok": True, "t_total": 0.01, "started_at": "now"}
    if t.method == "local":
        value = 1.0 + NOISE[t.rep]
    elif t.cell == BORDERLINE:
        value = 1.0 + NOISE[(t.rep + 1) % len(NOISE)]
    else:
        value = (0.2 if t.method == "raw" else 3.0) + NOISE[t.rep] / 10
    return {"trial": spec["trial"], "ok": True, "t_total": value, "started_at": "now"}


@pytest.fixture
def run(lab, tmp_path):
    lab.hosts["client"].worker(answer)
    run_dir = tmp_path / "run"
    return run_dir, start_run(run_dir, "adaptive-1", ADAPTIVE, lab)


def per_cell(run_dir) -> Counter:
    return Counter(PLAN[i].cell for i in trials_by_id(run_dir))


EXPECTED = {
    **{c: 3 for c in {t.cell for t in PLAN.values()}},  # clear cells, and the 200x200 baseline, stop at min
    BORDERLINE: 8,  # runs to max
    ("mul", 100, None, "local", ""): 8,  # its baseline goes on as long as it is open
}


def test_clear_cells_stop_at_min_and_the_borderline_cell_and_its_baseline_run_to_max(lab, run):  # noqa: F811
    run_dir, manifest = run
    summary = run_sweep(lab, ADAPTIVE, run_dir, manifest)

    assert per_cell(run_dir) == EXPECTED
    assert (summary["ran"], summary["failed"], summary["status"]) == (40, 0, "complete")
    assert summary["trials"] == 40  # of 80 at the most
    # rounds: repetition r of every open cell before any r + 1, one shaping per rate and round
    (worker,) = lab.hosts["client"].workers
    reps = [PLAN[i].rep for i in timed(worker.specs)]
    assert reps == sorted(reps)
    late = [PLAN[i] for i in timed(worker.specs)[30:]]  # after the three rounds of every cell
    assert [t.rep for t in late] == [3, 3, 4, 4, 5, 5, 6, 6, 7, 7]
    assert {t.cell for t in late} == {("mul", 100, None, "local", ""), BORDERLINE}
    # rates are validated (iperf3) once each, then only re-shaped in later rounds
    data = saved(run_dir)
    assert sorted({v["rate_mbps"] for v in data["validation"]}) == [10.0, 40.0]
    assert len(data["validation"]) == 4
    assert data["status"] == "complete"

    # the analysis says why each cell stopped, and how many trials it ran
    printed = io.StringIO()
    cells = analyze(run_dir, plots=False, out=printed)
    assert (
        "adaptive repetitions 3..8: remote cells ran 29 trials of 64 at most; stopped: significant 7, max_reps 1"
        in (printed.getvalue())
    )
    table = pd.read_csv(cells / "cells.csv")
    reasons = {(r.op, r.size, r.rate_mbps, r.method): (r.stop_reason, r.n_trials) for r in table.itertuples()}
    assert reasons.pop(BORDERLINE[:4]) == ("max_reps", 8)  # the analysis names a cell by its method
    assert set(reasons.values()) == {("significant", 3)}
    html = (cells / "report.html").read_text()
    assert "<th>stop_reason</th>" in html and "<td>max_reps</td>" in html and "<th>n_trials</th>" in html


def test_the_order_within_rounds_is_shuffled_from_the_seed(lab, tmp_path):  # noqa: F811
    orders = []
    for seed in (3, 3, 4):
        lab.hosts["client"].worker(answer)
        exp = replace(ADAPTIVE, seed=seed)
        run_dir = tmp_path / f"run-{len(orders)}"
        run_sweep(lab, exp, run_dir, start_run(run_dir, "a", exp, lab))
        orders.append(timed(lab.hosts["client"].workers[-1].specs))
    assert orders[0] == orders[1] and orders[0] != orders[2]
    assert sorted(orders[0]) == sorted(orders[2])  # the same trials, another order


@pytest.mark.parametrize("after", [12, 31, 35], ids=["round 2", "round 4 start", "round 5"])
def test_an_interrupted_adaptive_sweep_resumes_where_each_cell_stopped(lab, run, after):  # noqa: F811
    run_dir, manifest = run
    answered = []

    def stop_after(spec):
        if spec["trial"] >= 0:
            if len(answered) == after:
                raise KeyboardInterrupt
            answered.append(spec["trial"])
        return answer(spec)

    lab.hosts["client"].worker(stop_after, interrupt=signal.SIGINT)
    with pytest.raises(KeyboardInterrupt):
        run_sweep(lab, ADAPTIVE, run_dir, manifest)
    assert sorted(trials_by_id(run_dir)) == sorted(answered)

    manifest = ManifestFile.load(run_dir / "manifest.json")
    exp = manifest.manifest.experiment
    assert exp == ADAPTIVE
    lab.hosts["client"].worker(answer)
    summary = run_sweep(lab, exp, run_dir, manifest)

    assert per_cell(run_dir) == EXPECTED  # as if it had never stopped
    second = timed(lab.hosts["client"].workers[-1].specs)
    assert not set(second) & set(answered)  # nothing twice
    assert (summary["ran"], summary["status"]) == (40 - after, "complete")


def test_a_rate_that_fails_validation_closes_its_cells_as_failed_after_min(lab, run):  # noqa: F811
    run_dir, manifest = run
    link(lab, lambda rate, n: 0.8 if rate == 10.0 else 0.99)
    summary = run_sweep(lab, ADAPTIVE, run_dir, manifest)
    written = trials_by_id(run_dir)
    at_10 = [i for i in written if PLAN[i].rate_mbps == 10.0]
    assert len(at_10) == 4 * 3 and all(written[i]["ok"] == "false" for i in at_10)
    assert summary["failed"] == 12
    counts = per_cell(run_dir)
    assert max(counts.values()) == 3  # the borderline cell is at 10 Mbit/s: nothing goes on to max
    validated = [v for v in saved(run_dir)["validation"] if v["rate_mbps"] == 10.0]
    assert len(validated) == 4  # tried once in the session (two attempts, two directions), not per round
