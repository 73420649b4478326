"""The one device tolerance, max(pct, ms): its rule, the experiment's keys, and old runs read as written."""

import json
from pathlib import Path

import pytest

from contracts.calibration import Calibration, CalibrationRow
from contracts.errors import UserError
from contracts.message import decode, encode
from contracts.run import read_manifest
from contracts.tolerance import DeviceTolerance
from testbed.experiment import load_experiment

RUNS = Path(__file__).resolve().parents[1] / "data" / "runs"
GRID = "ops: [mul]\nsizes: [100]\nrates: [10]\nmethods: [raw]\nreps: 2\n"


def test_a_short_stage_may_miss_by_the_ms_part_a_long_one_by_the_percent():
    """0.05 ms over a 0.2 ms stage is 25% but under 0.1 ms: within; 20% of 10 ms is 2 ms: outside."""
    tol = DeviceTolerance()
    assert not tol.missed(0.2e-3, 0.25e-3)
    assert tol.missed(10e-3, 12e-3)
    assert not tol.missed(10e-3, 10.9e-3)
    assert tol.missed(0.2e-3, 0.35e-3)  # 0.15 ms over: more than both parts
    assert tol.allowed_s(10e-3) == pytest.approx(1e-3) and tol.allowed_s(0.2e-3) == pytest.approx(1e-4)
    assert tol.describe() == "max(10%, 0.1 ms)"
    assert DeviceTolerance(10.0, 0.0).describe() == "10%"  # a calibration from before the ms part


def test_a_calibration_row_is_flagged_by_the_same_rule():
    short = CalibrationRow.of("encode", "json", "mul", 100, 0.2e-3, 0.25e-3, DeviceTolerance())
    long = CalibrationRow.of("kernel", None, "mul", 100, 10e-3, 12e-3, DeviceTolerance())
    assert not short.flagged and short.error_pct == 25.0
    assert long.flagged
    assert CalibrationRow.of(
        "encode", "json", "mul", 100, 0.2e-3, 0.25e-3, DeviceTolerance(10.0, 0.0)
    ).flagged


def test_an_experiment_states_its_tolerance_or_has_the_defaults(tmp_path):
    path = tmp_path / "e.yaml"
    path.write_text(GRID)
    exp = load_experiment(path)
    assert (exp.device_tolerance_pct, exp.device_tolerance_ms) == (10.0, 0.1)
    assert exp.device_tolerance == DeviceTolerance(10.0, 0.1)
    path.write_text(GRID + "device_tolerance_pct: 5\ndevice_tolerance_ms: 0.5\n")
    exp = load_experiment(path)
    assert exp.device_tolerance == DeviceTolerance(5.0, 0.5)
    assert exp.as_dict()["device_tolerance_pct"] == 5.0 and exp.as_dict()["device_tolerance_ms"] == 0.5


@pytest.mark.parametrize(
    ("line", "words"),
    [
        ("device_tolerance_pct: 0", "key 'device_tolerance_pct': 0 is not a positive number"),
        ("device_tolerance_ms: -0.1", "key 'device_tolerance_ms': -0.1 is not a positive number"),
        ("device_tolerance_ms: .nan", "key 'device_tolerance_ms': nan is not a positive number"),
        ("device_tolerance_pct: ten", "key 'device_tolerance_pct': 'ten' is not a float"),
    ],
)
def test_a_bad_tolerance_is_refused_in_one_line_with_the_fix(tmp_path, line, words):
    path = tmp_path / "e.yaml"
    path.write_text(GRID + line + "\n")
    with pytest.raises(UserError) as exc:
        load_experiment(path)
    assert words in exc.value.message and "\n" not in exc.value.message, exc.value.message
    if "positive" in words:
        assert "> 0" in exc.value.fix


def test_an_old_manifest_reads_with_the_defaults_and_its_calibration_as_written():
    """A run from before the keys: the experiment has the defaults; its calibration recorded 10%
    alone, and is read (and its trials judged) so, and writes back without an ms part."""
    path = RUNS / "v3-tiny" / "manifest.json"
    manifest = read_manifest(path)
    assert manifest.experiment.device_tolerance == DeviceTolerance(10.0, 0.1)
    cal = manifest.device.calibrations[-1]
    assert cal.tolerance_ms is None and cal.tolerance == DeviceTolerance(10.0, 0.0)
    stored = json.loads(path.read_text())["device"]["calibrations"][-1]
    assert "tolerance_ms" not in stored and "tolerance_ms" not in encode(cal)


def test_a_new_calibration_records_its_ms_part():
    cal = Calibration(tolerance_pct=10.0, tolerance_ms=0.1, rows=[])
    data = encode(cal)
    assert data["tolerance_ms"] == 0.1
    assert decode(Calibration, data).tolerance == DeviceTolerance(10.0, 0.1)
