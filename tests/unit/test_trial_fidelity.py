"""The devices as the trials kept them (`analysis.trial_fidelity`): each stage's mean used time against
the profile's target, on trials whose times are chosen so that every error is worked out by hand."""

from __future__ import annotations

import io
from dataclasses import replace

import pandas as pd
import pytest

from analysis import analyze
from analysis.trial_fidelity import fidelity_lines, trial_fidelity
from contracts.device import DeviceProfile, SpeedCurve
from contracts.run import Calibration, Device, read_manifest, write_manifest
from tests.synthetic import write_synthetic_run

CLIENT = DeviceProfile(
    "slow", {"mul": SpeedCurve(((100, 1.0),))}, {"raw": {"encode": 100.0, "decode": 200.0}}
)
SERVER = DeviceProfile(
    "srv", {"mul": SpeedCurve(((100, 2.0),))}, {"raw": {"encode": 400.0, "decode": 400.0}},
    stack={"server_start": 0.15},
)  # fmt: skip
DATA = 100 * 100 * 8  # one float64 matrix of 100 x 100: 80 kB


def device(profile: DeviceProfile, tolerance_pct: float = 10.0) -> Device:
    return Device(profile.as_dict(), "scaled", [Calibration(at="now", tolerance_pct=tolerance_pct, rows=[])])


def trials(local: list[float], server_compute: list[float], start: list[float | None]) -> pd.DataFrame:
    rows = [{"op": "mul", "size": 100, "method": "local", "ok": True, "t_total": t} for t in local]
    rows += [
        {"op": "mul", "size": 100, "method": "raw", "ok": True, "t_client_encode": 2 * DATA / 100e6,
         "t_client_decode": DATA / 200e6, "t_server_decode": 2 * DATA / 400e6, "t_server_compute": c,
         "t_server_encode": DATA / 400e6, "t_server_start": s}
        for c, s in zip(server_compute, start, strict=True)
    ]  # fmt: skip
    rows.append({"op": "mul", "size": 100, "method": "raw", "ok": False, "t_server_compute": 99.0})
    return pd.DataFrame(rows)


@pytest.fixture
def manifest(tmp_path):
    run = write_synthetic_run(tmp_path / "run", sizes=(100,), rates=(10,), methods=("raw",), reps=2)
    m = read_manifest(run / "manifest.json")
    m.device, m.server_device = device(CLIENT), device(SERVER, tolerance_pct=5.0)
    return m


def test_each_stage_mean_is_compared_with_the_devices_time_for_its_work(manifest):
    # client kernel: 2 x 100^3 flop at 1 GFLOP/s = 2 ms; server's at 2 GFLOP/s: 1 ms
    table = trial_fidelity(trials([0.0021, 0.0023], [0.001, 0.001], [0.15, 0.15]), manifest)
    rows = {(r.role, r.work): r for r in table.itertuples(index=False)}
    local = rows[("client", "kernel")]
    assert (local.method, local.n, local.target_s) == ("local", 2, pytest.approx(0.002))
    assert local.error_pct == pytest.approx(10.0) and not local.flagged  # 2.2 ms: 10%, within 10%
    assert rows[("client", "raw encode")].error_pct == pytest.approx(0.0)
    assert rows[("server", "kernel")].n == 2  # the failed trial's 99 s counts nowhere
    assert set(rows) == {("client", "kernel"), ("client", "raw encode"), ("client", "raw decode"),
                         ("server", "raw decode"), ("server", "kernel"), ("server", "raw encode"),
                         ("server", "server_start")}  # fmt: skip


def test_a_stage_outside_the_roles_tolerance_is_flagged_and_named_in_the_summary(manifest):
    table = trial_fidelity(trials([0.002, 0.002], [0.0011, 0.0011], [0.15, 0.15]), manifest)
    server = table[table["role"] == "server"].set_index("work")
    assert server.loc["kernel", "error_pct"] == pytest.approx(10.0) and server.loc["kernel", "flagged"]  # 5%
    lines = fidelity_lines(table)
    assert lines[0] == "client device in the trials: 0 of 3 kinds of work outside tolerance"
    assert lines[1].startswith("server device in the trials: 1 of 4 kinds of work outside tolerance (worst: ")
    assert "mul 100 raw kernel +10%" in lines[1]


def test_a_short_stage_within_the_tolerances_ms_is_not_flagged(manifest):
    """The calibration's own tolerance, ms part included; an uncalibrated device, the experiment's."""
    stages = trials([0.002, 0.002], [0.0011, 0.0011], [0.15, 0.15])  # server kernel 0.1 ms (10%) over
    manifest.server_device.calibrations[-1].tolerance_ms = 0.2
    server = trial_fidelity(stages, manifest).query("role == 'server'").set_index("work")
    assert not server.loc["kernel", "flagged"]  # 10% > 5%, but 0.1 ms < 0.2 ms
    manifest.server_device.calibrations.clear()
    manifest.experiment = replace(manifest.experiment, device_tolerance_pct=5.0, device_tolerance_ms=0.05)
    server = trial_fidelity(stages, manifest).query("role == 'server'").set_index("work")
    assert server.loc["kernel", "flagged"]  # 10% > 5% and 0.1 ms > 0.05 ms


def test_a_run_without_devices_or_a_wsgi_start_up_has_nothing_to_check(manifest):
    manifest.device = manifest.server_device = None
    assert trial_fidelity(trials([0.002], [0.001], [0.15]), manifest).empty
    manifest.server_device = device(SERVER)
    table = trial_fidelity(trials([0.002], [0.001], [None]), manifest)
    assert "server_start" not in set(table["work"])  # no start-up measured: nothing to compare


def test_the_analysis_writes_the_table_and_the_report_shows_it(tmp_path):
    run = write_synthetic_run(tmp_path / "run", sizes=(100,), rates=(10,), methods=("raw",), reps=2)
    m = read_manifest(run / "manifest.json")
    m.device = Device(CLIENT.as_dict(), "scaled", [])  # not calibrated: the default tolerance, 10%
    write_manifest(run / "manifest.json", m)
    text = io.StringIO()
    out = analyze(run, plots=False, out=text)
    assert (out / "trial_fidelity.csv").exists()
    assert "client device in the trials:" in text.getvalue()
    assert 'id="trial-fidelity"' in (out / "report.html").read_text()


def test_the_servers_in_other_languages_are_not_held_to_the_python_servers_targets(manifest):
    table = trials([0.002, 0.002], [0.001, 0.001], [0.15, 0.15])
    # the same trials as if on a Go server (a label's method part names the codec: raw here)
    other = table[table["method"] == "raw"].assign(method="raw@go", t_server_compute=0.05)
    rows = trial_fidelity(pd.concat([table, other]), manifest)
    go = rows[rows["method"] == "raw@go"]
    assert set(go["role"]) == {"client"}  # its client stages are the device's; its server's are Go's
    assert set(rows[rows["method"] == "raw"]["role"]) == {"client", "server"}
