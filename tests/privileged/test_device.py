"""Device emulation through the real testbed: calibration on the client namespace, both modes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from contracts.profiles import quota_period
from testbed.devices import load_device
from tests.helpers import run_cli

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
