"""Prediction of the decision border (issue 15) on synthetic runs whose stages follow known laws
(`tests.synthetic`: marshalling proportional to bytes, communication bytes over the rate plus 2 ms,
compute proportional to size^3) with 5% lognormal noise."""

from __future__ import annotations

import csv
import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest

from analysis import analyze
from analysis.load import load_run
from analysis.predict import COLUMNS, VALIDATION_COLUMNS, main, predict
from analysis.predict_model import border_mbps, fit, fit_line
from testbed import cli
from tests.synthetic import CODEC, OPS, write_synthetic_run

SIZES = (400, 600, 800, 1000)
RATES = (10, 20, 40, 100)


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    run_dir = write_synthetic_run(tmp_path_factory.mktemp("p") / "syn", sizes=SIZES, rates=RATES, reps=8)
    predict(run_dir)
    return run_dir


def rows(path: Path) -> list[dict]:
    """A CSV file's rows as text (trials.csv's format mark, a comment line, skipped)."""
    return list(csv.DictReader(line for line in path.read_text().splitlines() if not line.startswith("#")))


def law_mb_per_s(method: str, server: bool) -> float:
    """MB/s of matrix data: the synthetic codec costs `cost` s per wire byte, `width` wire bytes per
    8-byte element; the server is 8x faster."""
    cost, width = CODEC[method]
    return 1e-6 / (cost * width / 8) * (8 if server else 1)


def law_border(method: str, size: int) -> float:
    """The rate (Mbit/s) at which the synthetic law's remote time equals its local time."""
    cost, width = CODEC[method]
    per, power = OPS["mul"]
    local = per * size**power
    up, down = 2 * size * size * width, size * size * width
    fixed = cost * (up + down) * (1 + 1 / 8) + local / 8 + 0.002
    return (up + down) * 8 / (local - fixed) / 1e6


def test_fitted_parameters_match_the_laws(run):
    model = json.loads((run / "analysis" / "prediction_model.json").read_text())
    for method in ("json", "ujson", "raw"):
        m = model["marshalling"][method]
        for stage, server in (("client_encode", False), ("client_decode", False), ("server_encode", True)):
            assert m[stage]["mb_per_s"] == pytest.approx(law_mb_per_s(method, server), rel=0.04), (
                method,
                stage,
            )
            assert m[stage]["r2"] > 0.95 and m[stage]["n"] == len(SIZES) * len(RATES) * 8
        assert model["wire"][method]["up"]["bytes_per_matrix_byte"] == pytest.approx(CODEC[method][1] / 8)
    # synthetic communication is bytes over the nominal rate; goodput is 0.9564 of it
    assert model["communication"]["seconds_per_goodput_second"] == pytest.approx(0.9564, rel=0.03)
    local_gflops = 1e-9 / (OPS["mul"][0] / 2)
    assert model["compute"]["local"]["mul"]["gflop_per_s"] == pytest.approx(local_gflops, rel=0.04)
    assert model["compute"]["server"]["mul"]["gflop_per_s"] == pytest.approx(8 * local_gflops, rel=0.04)
    assert model["goodput_mbps"]["20"]["up"]["source"] == "measured"


def test_predicted_border_matches_the_laws(run):
    model = fit(load_run(run).trials, load_run(run).manifest)
    for method in ("json", "raw"):
        sizes = np.array([500, 700, 900])
        predicted = border_mbps(model, "mul", sizes, method)
        expected = [law_border(method, s) for s in sizes]
        assert predicted == pytest.approx(expected, rel=0.04), method
    # ignoring marshalling moves json's border far down: it needs several times less bandwidth
    blind = border_mbps(model, "mul", np.array([800]), None)
    assert blind[0] < law_border("json", 800) / 2


def test_prediction_csv(run):
    table = rows(run / "analysis" / "prediction.csv")
    assert list(table[0]) == COLUMNS
    sizes = {int(r["size"]) for r in table}
    rates = {float(r["rate_mbps"]) for r in table}
    assert set(SIZES) <= sizes and len(sizes) >= 10 and set(RATES) <= rates and len(rates) >= 10
    for r in table:
        lo, mid, hi = (
            float(r[k]) for k in ("predicted_remote_lo", "predicted_remote_s", "predicted_remote_hi")
        )
        assert lo < mid < hi
        assert int(r["offload"]) == (mid < float(r["predicted_local_s"]))
        assert float(r["penalty_s"]) == pytest.approx(mid - float(r["predicted_local_s"]), abs=1e-3)
        local_lo, local, local_hi = (
            float(r[k]) for k in ("predicted_local_lo", "predicted_local_s", "predicted_local_hi")
        )
        assert local_lo < local < local_hi
        pen_lo, pen, pen_hi = (float(r[k]) for k in ("penalty_lo", "penalty_s", "penalty_hi"))
        assert pen_lo < pen < pen_hi and pen_hi - pen_lo >= hi - lo  # two uncertainties, not one
        assert int(r["offload_sure"]) == (not pen_lo <= 0 <= pen_hi)
    sure = [int(r["offload_sure"]) for r in table]
    assert 0 < sum(sure) < len(sure)  # near the border the decision is uncertain, far from it not
    assert (run / "analysis" / "prediction-border-mul.png").is_file()


def test_validation_csv(run):
    table = rows(run / "analysis" / "prediction_validation.csv")
    assert list(table[0]) == VALIDATION_COLUMNS
    folds = {(r["held_out"], r["value"]) for r in table}
    assert {("size", "400"), ("size", "1000"), ("rate", "10"), ("rate", "100")} <= folds
    overall = next(r for r in table if (r["held_out"], r["value"]) == ("any", "all"))
    assert int(overall["cells"]) == 2 * len(SIZES) * len(RATES) * 3
    assert float(overall["decision_accuracy"]) >= 0.9
    assert float(overall["mape_remote_pct"]) < 10
    assert float(overall["lost_s"]) >= 0


def test_grid_options_and_extrapolation(run, tmp_path):
    copy = shutil.copytree(run, tmp_path / "copy")
    assert main([str(copy), "--sizes", "2000", "--rates", "5,1gbit", "--methods", "raw", "--no-plots"]) == 0
    table = rows(copy / "analysis" / "prediction.csv")
    assert [(r["size"], r["rate_mbps"], r["method"]) for r in table] == [
        ("2000", "5", "raw"),
        ("2000", "1000", "raw"),
    ]
    assert [int(r["offload"]) for r in table] == [0, 1]
    assert not list((copy / "analysis").glob("prediction-border-*"))


@pytest.mark.parametrize(
    "args, words",
    [
        (["--ops", "fft"], "unknown op"),
        (["--methods", "msgpack"], "msgpack"),
        (["--sizes", "big"], "not a matrix size"),
        (["--rates", "10mbps"], "mbps"),
    ],
)
def test_cli_errors_are_one_line_exit_2(run, args, words, capsys):
    assert main([str(run), *args]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and words in err, err


def test_missing_run_and_runs_without_bytes(tmp_path, capsys):
    assert main([str(tmp_path / "nothing")]) == 2
    assert "does not exist" in capsys.readouterr().err
    run_dir = write_synthetic_run(tmp_path / "old", sizes=(400, 800), rates=(10, 40), reps=3)
    path = run_dir / "trials.csv"
    table = rows(path)
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(
            f, [c for c in table[0] if c not in ("bytes_up", "bytes_down")], extrasaction="ignore"
        )
        writer.writeheader()
        writer.writerows(table)
    assert main([str(run_dir)]) == 2
    assert "bytes_up" in capsys.readouterr().err


def test_line_fit_recovers_a_known_line_and_its_interval():
    rng = np.random.default_rng(3)
    x = np.repeat(np.arange(1.0, 11.0), 20)
    y = 2.0 * x + 5.0 + rng.normal(0, 0.5, x.size)
    line = fit_line(x, y, "test")
    assert line.slope == pytest.approx(2.0, rel=0.02) and line.intercept == pytest.approx(5.0, abs=0.2)
    assert line.s == pytest.approx(0.5, rel=0.15)
    _, var = line.predict(5.0)
    assert np.sqrt(var) == pytest.approx(0.5, rel=0.15)
    single = fit_line(np.full(5, 3.0), np.full(5, 6.0), "origin")  # one x value: through the origin
    assert (single.slope, single.intercept) == pytest.approx((2.0, 0.0))


def test_testbed_predict_needs_no_root_and_report_shows_prediction(run, tmp_path, monkeypatch):
    copy = shutil.copytree(run, tmp_path / "copy")
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert cli.main(["predict", str(copy), "--no-plots"]) == 0
    analyze(copy, plots=False, out=open(os.devnull, "w"))  # noqa: SIM115
    page = (copy / "analysis" / "report.html").read_text()
    section = page.split('id="prediction"', 1)[1]
    assert "decision_accuracy" in section and "prediction-border" not in section  # made without plots
