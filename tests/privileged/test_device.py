"""Device emulation through the real testbed: calibration on the client namespace, both modes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from contracts.profiles import quota_period
from testbed.devices import load_device
from tests.helpers import followed_slowdowns, rows, run_cli

pytestmark = pytest.mark.privileged


def calibrate(inventory, *args: str) -> dict:
    return json.loads(run_cli(inventory, "calibrate", "--device", "paper-p4", "--json", *args).stdout)


def test_scaled_calibration_reaches_the_device_on_this_host(inventory):
    run_cli(inventory, "up", "--no-server")
    device = load_device("paper-p4")
    result = calibrate(inventory, "--mode", "scaled", "--sizes", "200,400", "--codecs", "raw,ujson")
    assert (result["device"], result["mode"]) == ("paper-p4", "scaled")
    assert [(r["op"], r["size"]) for r in result["rows"]] == [("mul", 200), ("mul", 400)]
    for row in result["rows"]:
        assert row["target_s"] == pytest.approx(device.compute_s("mul", row["size"]))
        assert row["flagged"] == (abs(row["error_pct"]) > 10)
        assert row["achieved_s"] > 0
    # at least 10 samples each for the slowdown and the check; more where the mean was not yet known
    assert all(r["samples"] >= 20 for r in result["rows"] + result["codecs"])
    assert {(c["codec"], c["stage"]) for c in result["codecs"]} == {
        ("raw", "encode"), ("raw", "decode"), ("ujson", "encode"), ("ujson", "decode")
    }  # fmt: skip


def test_throttle_runs_the_client_under_a_quota_and_flags_what_it_cannot_emulate(inventory):
    run_cli(inventory, "up", "--no-server")
    has_cpu = (
        Path("/sys/fs/cgroup/cgroup.controllers").exists()
        and "cpu" in Path("/sys/fs/cgroup/cgroup.controllers").read_text().split()
        or Path("/sys/fs/cgroup/cpu/cpu.cfs_quota_us").exists()
    )
    proc = run_cli(
        inventory, "calibrate", "--device", "paper-p4", "--json", "--mode", "throttle",
        "--sizes", "100,500", "--codecs", "raw", check=False,
    )  # fmt: skip
    if not has_cpu:  # a kernel without the cpu controller refuses in one line
        assert proc.returncode == 2 and "cgroup cpu controller" in proc.stderr
        return
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    rows = {r["size"]: r for r in result["rows"]}
    # mul 100 takes the device 7 ms: under ten quota periods whatever the quota, so flagged
    assert rows[100]["flagged"]
    # the quota really slows the client: mul 500 takes far longer than this host's full speed
    assert rows[500]["achieved_s"] > 0.2
    assert rows[500]["flagged"] == (abs(rows[500]["error_pct"]) > 10 or "reason" in rows[500])
    # each kind of work ran under its own quota, which the check's process (inside the client's
    # network namespace, where /sys/fs/cgroup is out of sight) put in force itself: the period it
    # read back from the kernel is that quota's
    for row in result["rows"]:
        assert row["quota"] == pytest.approx(result["quotas"][row["key"]])
        assert row["period_s"] == pytest.approx(quota_period(row["quota"])[1] / 1e6)
        assert row["samples"] >= 5  # the check's mean: at least 5 samples, more until known or its budget
    assert result["quotas"]["kernel|mul|500"] < 0.5 and result["quotas"]["base"] < 0.5
    status = json.loads(run_cli(inventory, "status", "--json").stdout)
    assert status["client_cpu"]["in_force"]["fraction"] == 1.0  # a whole core for a worker's start


SERVER = "multilang-i5-5200u"  # a shipped server profile


def test_the_server_host_calibrates_for_a_server_device_and_a_sweep_scales_its_stages(inventory, tmp_path):
    """`calibrate --host server`: the server namespace's own work (decode the request, encode the
    response) against the device's targets, with the client's output; then a sweep with the server
    device: each server stage is its measured CPU time times that slowdown, and communication stays
    the request's wall time minus the server's measured (not scaled) stages."""
    run_cli(inventory, "up")
    device = load_device(SERVER)
    result = json.loads(
        run_cli(
            inventory, "calibrate", "--host", "server", "--device", SERVER, "--json", "--sizes", "200",
            "--codecs", "raw",
        ).stdout
    )  # fmt: skip
    assert (result["host"], result["device"], result["mode"]) == ("server", SERVER, "scaled")
    (kernel,) = result["rows"]
    assert kernel["target_s"] == pytest.approx(device.compute_s("mul", 200))
    stages = {c["stage"]: c for c in result["codecs"]}
    assert set(stages) == {"decode", "encode"}
    assert stages["decode"]["target_s"] == pytest.approx(device.marshal_s("raw", "decode", 2 * 200 * 200 * 8))
    assert stages["encode"]["target_s"] == pytest.approx(device.marshal_s("raw", "encode", 200 * 200 * 8))

    results = tmp_path / "results"
    run_cli(
        inventory, "sweep", "--ops", "mul", "--sizes", "200", "--rates", "50", "--methods", "raw", "--reps", "3",
        "--warmup", "0", "--server-device", SERVER, "--results", str(results), "--name", "srv", "--no-analyze",
        "--no-validate",  # the subject is the server's stages, not link fidelity (under CPU steal it missed)
        timeout=900,
    )  # fmt: skip
    (run_dir,) = results.iterdir()
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["server_device"]["profile"]["name"] == SERVER and manifest["device"] is None
    (calibration,) = manifest["server_device"]["calibrations"]
    row = {r["key"]: r for r in calibration["rows"]}
    remote = sorted(
        (r for r in rows(run_dir) if r["method"] == "raw"), key=lambda r: r["started_at"]
    )  # as they ran
    assert len(remote) == 3 and all(r["ok"] == "true" for r in remote)
    # each stage's slowdown follows the server host: the device's time over its recent runs' mean
    kernel, decode = (
        followed_slowdowns(row[k], [float(r[f"cpu_server_{stage}"]) for r in remote])
        for k, stage in (("kernel|mul|200", "compute"), ("decode|raw|mul|200", "decode"))
    )
    for r, kernel_slowdown, decode_slowdown in zip(remote, kernel, decode, strict=True):
        f = {k: float(r[k]) for k in r if k.startswith(("t_", "wall_server", "cpu_server")) and r[k]}
        assert f["t_server_compute"] == pytest.approx(f["cpu_server_compute"] * kernel_slowdown)
        assert f["t_server_decode"] == pytest.approx(f["cpu_server_decode"] * decode_slowdown)
        measured = f["wall_server_decode"] + f["wall_server_compute"] + f["wall_server_encode"]
        assert f["t_comm"] == pytest.approx(f["t_request"] - measured - f["t_server_queue"], abs=1e-6)
        scaled = f["t_server_decode"] + f["t_server_compute"] + f["t_server_encode"]
        total = f["t_client_encode"] + f["t_comm"] + f["t_server_queue"] + scaled + f["t_client_decode"]
        assert f["t_total"] == pytest.approx(total)
