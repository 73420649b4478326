"""The replica effect (analysis/replicas.py) on synthetic runs with a known answer."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from analysis import analyze
from analysis.replicas import holm, replica_effect
from tests.synthetic import write_synthetic_run


def test_holm_adjusts_step_down_and_keeps_the_order():
    adjusted = holm(np.array([0.01, 0.04, 0.03, 0.5]))
    assert adjusted == pytest.approx([0.04, 0.09, 0.09, 0.5])


def frame(shift: float, n: int = 8, seed: int = 1) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    rows = []
    for replica in (0, 1):
        for t in 1.0 + replica * shift + rng.normal(0, 0.02, n):
            rows.append({"op": "mul", "size": 400, "rate_mbps": 20.0, "method": "raw", "ok": True,
                         "replica": replica, "t_total": t})  # fmt: skip
    return pd.DataFrame(rows)


def test_replicas_that_measured_alike_show_no_effect_and_a_shifted_one_does():
    same = replica_effect(frame(0.0))
    assert list(same["quantity"]) == ["t_total"] and not same["significant"].any()
    shifted = replica_effect(frame(0.2))
    assert shifted["significant"].all() and shifted["replicas"].iloc[0] == "0 1"
    one = replica_effect(frame(0.0).assign(replica=0))
    assert one.empty  # one testbed: nothing to compare


def test_the_analysis_of_a_run_over_replicas_reports_the_effect_it_has(tmp_path, capsys):
    alike = write_synthetic_run(tmp_path / "alike", sizes=(400,), rates=(20, 100), reps=8, replicas=2)
    analyze(alike, plots=False)
    out = capsys.readouterr().out
    assert "replicas: 2; no significant replica effect" in out
    table = pd.read_csv(alike / "analysis" / "replica_effect.csv")
    assert len(table) > 0 and not table["significant"].any()
    assert "Replica effect" in (alike / "analysis" / "report.html").read_text()

    drifted = write_synthetic_run(
        tmp_path / "drift", sizes=(400,), rates=(20,), reps=8, replicas=2, drift=0.5
    )
    analyze(drifted, plots=False)
    assert "replica effect in" in capsys.readouterr().out


def test_a_run_of_one_testbed_has_no_replica_table(tmp_path):
    run = write_synthetic_run(tmp_path / "one", sizes=(400,), rates=(20,), reps=3)
    analyze(run, plots=False)
    assert not (run / "analysis" / "replica_effect.csv").exists()
