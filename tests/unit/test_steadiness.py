"""The host's steadiness: probes summarised, recorded with a calibration, shown in the report's verdict."""

from __future__ import annotations

import io

import pytest

from analysis import analyze
from contracts.calibration import Calibration, CalibrationRow
from contracts.device import DeviceProfile, SpeedCurve
from contracts.message import decode, encode
from contracts.run import Device, read_manifest, write_manifest
from contracts.steadiness import Steadiness, probe, probe_pass
from contracts.tolerance import DEFAULT
from tests.synthetic import write_synthetic_run

# a host fast in most runs and 1.8 times slower in a spell: the 2-core VM of 2026-11-28
STEADY = [0.0019, 0.00195, 0.002, 0.0019] * 25
SPELL = [0.0019] * 70 + [0.0034] * 30


def test_the_share_of_probes_above_the_fastest_by_the_tolerance_is_the_slow_share():
    s = Steadiness.of(SPELL, slow_pct=10)
    assert s.probes == 100
    assert s.slow_share == pytest.approx(0.30)
    assert s.fastest_ms == pytest.approx(1.9)
    assert s.worst_ratio == pytest.approx(0.0034 / 0.0019)
    assert s.unsteady
    assert "unsteady: 30% of 100 probes" in s.describe()


def test_probes_within_the_tolerance_of_the_fastest_are_steady():
    s = Steadiness.of(STEADY, slow_pct=10)
    assert s.slow_share == 0 and not s.unsteady
    assert s.median_ratio == pytest.approx(0.001925 / 0.0019)  # half the probes at 1.9 ms, a quarter at 1.95
    # the same probes judged by a tighter percent: 2.0 ms is more than 4% above 1.9
    assert Steadiness.of(STEADY, slow_pct=4).slow_share == pytest.approx(0.25)


def test_a_few_slow_probes_are_within_the_allowance_and_more_are_not():
    assert not Steadiness.of([0.002] * 95 + [0.003] * 5, slow_pct=10).unsteady
    assert Steadiness.of([0.002] * 94 + [0.003] * 6, slow_pct=10).unsteady


def test_no_probes_is_an_error():
    with pytest.raises(ValueError):
        Steadiness.of([], slow_pct=10)


def test_a_pass_probes_until_its_time_is_up_and_at_least_once():
    figures = iter([0.5, 0.25, 0.125])
    assert probe_pass(0.0, one=lambda: next(figures)) == [0.5]
    real = probe_pass(0.05)
    assert len(real) >= 1 and all(f > 0 for f in real)
    assert probe() > 0


def test_a_calibration_carries_it_and_one_recorded_before_it_had_it_reads_as_none():
    cal = Calibration(tolerance_pct=10, rows=[], steadiness=Steadiness.of(SPELL, 10))
    data = encode(cal)
    assert data["steadiness"]["slow_share"] == pytest.approx(0.3)
    assert decode(Calibration, data).steadiness == cal.steadiness
    del data["steadiness"]
    assert decode(Calibration, data).steadiness is None
    assert "steadiness" not in encode(decode(Calibration, data))  # an old record stays as it was


@pytest.mark.parametrize(("probes", "highlighted"), [(SPELL, True), (STEADY, False)])
def test_the_reports_verdict_and_the_summary_say_how_steady_the_host_was(tmp_path, probes, highlighted):
    run = write_synthetic_run(tmp_path / "run", sizes=(100,), rates=(10,), methods=("raw",), reps=2)
    m = read_manifest(run / "manifest.json")
    profile = DeviceProfile(
        "slow", {"mul": SpeedCurve(((100, 1.0),))}, {"raw": {"encode": 100.0, "decode": 200.0}}
    )
    row = CalibrationRow.of(
        "kernel", None, "mul", 100, 2.0, 2.05, DEFAULT, host_cpu_s=0.01, slowdown=200.0, samples=10
    )
    cal = Calibration(at="now", tolerance_pct=10, rows=[row], steadiness=Steadiness.of(probes, 10))
    m.device = Device(profile.as_dict(), "scaled", [cal])
    write_manifest(run / "manifest.json", m)
    text = io.StringIO()
    out = analyze(run, plots=False, out=text)
    html = (out / "report.html").read_text()
    summary = "client host's speed unsteady: 30% of 100 probes"  # and the terminal's summary says so
    assert (summary in text.getvalue()) == highlighted
    row = next(r for r in html.split("<tr") if "probes of one fixed work" in r)
    assert f"{Steadiness.of(probes, 10).slow_share:.0%} of 100 probes" in row
    assert row.startswith(' class="bad"') == highlighted


def test_testbed_calibrate_prints_the_hosts_steadiness_under_its_table():
    from testbed.sweep.device_emulation import format_calibration

    cal = Calibration(
        tolerance_pct=10, rows=[], device="d", mode="scaled", steadiness=Steadiness.of(SPELL, 10)
    )
    assert format_calibration(cal).splitlines()[-1].startswith("the host's speed unsteady: 30% of 100 probes")
    cal.steadiness = None  # recorded before it was probed: nothing said
    assert "speed" not in format_calibration(cal)
