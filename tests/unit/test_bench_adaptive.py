"""The adaptive benchmark's comparison on a synthetic fixed run (tests.synthetic): the stopping rule
replayed over its trials keeps every significant decision with fewer trials, and the figures add up."""

from __future__ import annotations

import pandas as pd

from analysis.cells import cell_table
from analysis.load import load_run
from benchmarks.adaptive import compare, replay, report
from tests.synthetic import write_synthetic_run


def test_the_replay_keeps_every_significant_decision_with_fewer_trials(tmp_path):
    run_dir = write_synthetic_run(tmp_path / "fixed", sizes=(400, 800), rates=(10, 40, 100), reps=12, seed=3)
    out = report(run_dir, None, min_reps=3)["replay"]
    assert out["fixed_trials"] == 2 * 12 * (1 + 3 * 3)
    assert out["adaptive_trials"] < out["fixed_trials"]
    assert out["fraction_saved"] == 1 - out["adaptive_trials"] / out["fixed_trials"]
    assert out["significant_fixed"] > 0 and out["reproduced"] == out["significant_fixed"]
    assert out["not_reproduced"] == [] and out["stopped_early_not_significant"] == []
    assert sum(out["stop_reasons"].values()) == 2 * 3 * 3

    taken, manifest = replay(run_dir, 3)
    assert (manifest.experiment.min_reps, manifest.experiment.reps) == (3, 12)
    # a cell the replay took n trials of holds its first n repetitions
    for _, g in taken.groupby(["op", "size", "rate_mbps", "method"], dropna=False):
        assert sorted(g["rep"].astype(int)) == list(range(len(g)))


def test_a_decision_the_adaptive_run_flips_is_reported(tmp_path):
    run = load_run(
        write_synthetic_run(tmp_path / "fixed", sizes=(800,), rates=(100,), methods=("raw",), reps=6)
    )
    cells = cell_table(run.trials, run.manifest)
    assert bool(cells["significant"].iloc[0])
    flipped = run.trials.copy()
    remote = flipped["method"] != "local"
    flipped.loc[remote, "t_total"] = flipped.loc[remote, "t_total"] * 1000  # now clearly stays local
    out = compare(run.trials, cells, flipped, cell_table(flipped, run.manifest))
    assert out["reproduced"] == 0 and out["not_reproduced"] == [["mul", 800, 100.0, "raw"]]
    assert isinstance(out["borderline"], list) and pd.notna(out["fraction_of_trials"])
