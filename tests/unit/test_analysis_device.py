"""A run made with a device profile: the report shows the device, its calibration and its fidelity
figure, and flagged emulation reaches cells.csv."""

from __future__ import annotations

import json
from dataclasses import replace
from io import StringIO

import pandas as pd

from analysis import analyze
from analysis.synthetic import write_synthetic_run
from contracts.run import TrialWriter, read_trials
from testbed.devices import load_device


def test_device_calibration_fidelity_and_flags(tmp_path):
    run_dir = write_synthetic_run(
        tmp_path / "dev-1", ops=("mul",), sizes=(200, 400), rates=(10, 40), methods=("raw", "json"), reps=2
    )
    device = load_device("paper-p4")
    rows = [
        {"work": "kernel", "op": "mul", "size": s, "target_s": device.compute_s("mul", s),
         "achieved_s": device.compute_s("mul", s) * (1.3 if s == 200 else 1.02),
         "error_pct": 30.0 if s == 200 else 2.0, "flagged": s == 200}
        for s in (200, 400)
    ]  # fmt: skip
    manifest = json.loads((run_dir / "manifest.json").read_text())
    manifest["device"] = {
        "profile": device.as_dict(),
        "mode": "scaled",
        "calibrations": [{"at": "2026-11-23T15:00:00", "tolerance_pct": 10.0, "rows": rows}],
    }
    (run_dir / "manifest.json").write_text(json.dumps(manifest))
    # the sweep marks the local trials of the flagged (mul, 200)
    path = run_dir / "trials.csv"
    records = read_trials(path).records
    path.unlink()
    writer = TrialWriter(path)
    for t in records:
        writer.write(replace(t, emulation_flagged=t.method == "local" and t.size == 200))
    writer.close()

    out = analyze(run_dir, out=StringIO())
    assert (out / "fidelity.png").stat().st_size > 0 and (out / "fidelity.svg").exists()
    page = (out / "report.html").read_text()
    assert 'id="device"' in page and "paper-p4" in page and "Calibration 1" in page
    assert "1 of 2 outside 10%" in page and "target vs achieved (scaled)" in page
    cells = pd.read_csv(out / "cells.csv")
    flagged = cells.groupby("size")["emulation_flagged"].all()
    assert bool(flagged[200]) and not bool(flagged[400])  # every cell compared with a flagged baseline


def test_a_run_without_a_device_says_so(tmp_path):
    run_dir = write_synthetic_run(
        tmp_path / "plain", ops=("mul",), sizes=(200,), rates=(10,), methods=("raw",)
    )
    out = analyze(run_dir, plots=False, out=StringIO())
    assert "No device profile" in (out / "report.html").read_text()
    assert not (out / "fidelity.png").exists()
