"""A sweep with clients of two devices on the embedded testbed for real (issue 29): each device is
calibrated on its own client host, each client's worker emulates its own device, each device has its
own local baseline, every row names its device, and the analysis decides each device against its own
baseline; `down` leaves nothing of any client."""

from __future__ import annotations

import csv

import pytest

from tests.helpers import rows, run_cli
from tests.isolation import leftovers

pytestmark = pytest.mark.privileged

EXPERIMENT = """\
name: client-devices
ops: [mul]
sizes: [400]
rates: [20]
methods: [raw]
reps: 2
warmup: 1
clients:
  - {device: paper-p4, count: 1}
  - {device: embedded-beaglebone, count: 1}
contention: [2]
server_device: paper-i3
validation: {enabled: true, duration: 2, retries: 2, tolerance_pct: 20}
"""


def test_a_sweep_with_clients_of_two_devices_emulates_each_and_decides_each_on_its_own(
    inventory, lease, tmp_path
):
    results = tmp_path / "results"
    exp = tmp_path / "devices.yaml"
    exp.write_text(EXPERIMENT)
    out = run_cli(inventory, "sweep", str(exp), "--results", str(results), timeout=1800).stdout
    assert "devices paper-p4 x1, embedded-beaglebone x1 (scaled)" in out and "sweep complete" in out
    (run_dir,) = results.iterdir()
    got = rows(run_dir)
    assert all(r["ok"] == "true" for r in got), [r["error"] for r in got if r["ok"] != "true"]
    local = {d: [float(r["t_total"]) for r in got if r["method"] == "local" and r["device"] == d]
             for d in ("paper-p4", "embedded-beaglebone")}  # fmt: skip
    assert [len(v) for v in local.values()] == [2, 2]
    assert {(r["client"], r["device"]) for r in got if r["method"] == "raw"} == {
        ("1", "paper-p4"),
        ("2", "embedded-beaglebone"),
    }
    # each baseline is its own device's time for mul 400 (scaled from one calibration per device):
    # the Pentium 4's 0.715 s, the BeagleBone's 0.41 s. Two trials of 2.5 ms of host CPU each, scaled
    # from a short calibration, so loosely: measured in CI, the first runs of a kernel in a process
    # without a warm-up came out 45-49% above both targets
    from testbed.devices import load_device

    means = {name: sum(times) / len(times) for name, times in local.items()}
    for name, mean in means.items():
        target = load_device(name).compute_s("mul", 400)
        assert mean == pytest.approx(target, rel=0.5), (name, local[name], target)
    assert means["paper-p4"] > means["embedded-beaglebone"], means
    with open(run_dir / "analysis" / "cells.csv", newline="") as f:
        cells = [c for c in csv.DictReader(f) if c["method"] != "local"]
    assert len(cells) == 2  # one cell per device, each against its own baseline
    for cell in cells:
        device = "embedded-beaglebone" if "beaglebone" in cell["method"] else "paper-p4"
        assert float(cell["local_mean"]) == pytest.approx(sum(local[device]) / 2, rel=1e-6), cell
    assert (run_dir / "worker-client2.log").exists()
    assert leftovers(lease.prefix) == []
