"""Clients of several devices in one sweep, without root (issue 29): the experiment's client groups,
the plan (each device's local baseline on its own first client, every trial with its client's device)
and a sweep through fake client hosts, each calibrated for and emulating its own device."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from contracts.calibration import Calibration, CalibrationRow
from contracts.device import key
from contracts.errors import UserError
from contracts.run import TRIALS_FILE, Manifest, read_manifest, read_trials
from contracts.stage_targets import stage_targets
from contracts.tolerance import DeviceTolerance
from testbed.devices import load_device
from testbed.experiment import load_experiment, planned_trials
from testbed.overrides import override
from testbed.run_files import ManifestFile
from testbed.sweep.bookkeeping import start_run
from testbed.sweep.device_emulation import record_calibration, reusable
from testbed.sweep.phases import run_sweep
from testbed.sweep.plan import plan_trials
from tests.fakes import FAKE_SWEEP, calibration_answers, healthy_worker
from tests.helpers import REPO, write_experiment
from tests.unit.conftest import fake_netns_lab, sweep_ready

P4, BONE = "paper-p4", "embedded-beaglebone"
MIXED = replace(
    FAKE_SWEEP,
    methods=("raw",),
    sizes=(100,),
    rates_mbps=(10.0,),
    clients=3,
    contention=(1, 3),
    client_device=P4,
    client_devices=(P4, P4, BONE),
)


GROUPS = """\
    ops: [mul]
    sizes: [800]
    rates: [40]
    methods: [raw]
    reps: 5
    clients:
      - {device: paper-p4, count: 2}
      - {device: embedded-beaglebone, count: 1}
"""


def test_an_experiment_gives_each_client_host_its_groups_device(tmp_path):
    exp = load_experiment(write_experiment(tmp_path, GROUPS))
    assert (exp.clients, exp.client_device, exp.client_devices) == (3, P4, (P4, P4, BONE))
    one = load_experiment(write_experiment(tmp_path, GROUPS.replace("embedded-beaglebone", "paper-p4")))
    assert (one.clients, one.client_device, one.client_devices) == (3, P4, ())  # one device: as before
    with pytest.raises(UserError, match="several"):
        override(exp, {"device": "paper-i3"})
    with pytest.raises(UserError, match="count"):
        load_experiment(write_experiment(tmp_path, GROUPS.replace("count: 1", "count: 0")))
    shipped = load_experiment(REPO / "experiments" / "client-devices.yaml")
    assert shipped.client_devices == (P4, P4, BONE, BONE) and shipped.contention == (1, 2, 4)


def test_each_device_has_its_local_baseline_on_its_first_client_and_trials_name_their_device():
    trials = plan_trials(MIXED)
    assert len(trials) == planned_trials(MIXED) == 2 * 2 + 2 * (1 + 3)  # two baselines, (k=1, k=3)
    local = [(t.rep, t.client, t.device) for t in trials if t.method == "local"]
    assert local == [(0, 1, P4), (0, 3, BONE), (1, 1, P4), (1, 3, BONE)]
    assert len({t.cell for t in trials if t.method == "local"}) == 2  # one baseline per device
    remote = [(t.clients, t.client, t.device) for t in trials if t.method == "raw" and t.rep == 0]
    assert remote == [(1, 1, P4), (3, 1, P4), (3, 2, P4), (3, 3, BONE)]
    at_once = [t for t in trials if t.clients == 3 and t.rep == 0]
    assert len({t.cell for t in at_once}) == 1  # one cell, its clients of both devices at once
    assert all(t.device is None for t in plan_trials(replace(MIXED, client_devices=())))


@pytest.fixture
def mixed_clients(fake_inventory, tmp_path, monkeypatch):
    """Three fake client hosts, the third of another device; each device's calibration host answers
    with slowdowns of its own (10 for paper-p4, 20 for the BeagleBone)."""
    lab = sweep_ready(fake_netns_lab(fake_inventory.with_clients(3), tmp_path / "state", monkeypatch, {}))
    for role in ("client2", "client3"):
        lab.hosts[role].worker(healthy_worker)
    requests = {
        "client": calibration_answers(lab.hosts["client"], P4, "client", 10.0),
        "client3": calibration_answers(lab.hosts["client3"], BONE, "client", 20.0, flagged_size=100),
    }
    return lab, requests


def test_a_sweep_calibrates_each_device_on_its_client_and_each_client_emulates_its_own(
    mixed_clients, tmp_path
):
    lab, requests = mixed_clients
    bone = load_device(BONE)

    def on_target(spec: dict) -> dict:  # the BeagleBone's client: its trials take its device's time
        return healthy_worker(spec) | {"t_total": bone.compute_s("mul", spec["size"])}

    lab.hosts["client3"].worker(on_target)
    run_dir = tmp_path / "run"
    manifest = start_run(run_dir, "fake-devices", MIXED, lab)
    summary = run_sweep(lab, MIXED, run_dir, manifest, device=load_device(P4))
    assert (summary["status"], summary["failed"]) == ("complete", 0)

    assert [r["device"]["name"] for r in requests["client"]] == [P4]
    assert [r["device"]["name"] for r in requests["client3"]] == [BONE]
    kernel = key("kernel", "mul", 100)
    for role, slowdown in (("client", 10.0), ("client2", 10.0), ("client3", 20.0)):
        (worker,) = lab.hosts[role].workers
        assert json.loads(worker.args[worker.args.index("--scale") + 1])[kernel] == slowdown, role

    planned = {t.trial: t for t in plan_trials(MIXED)}
    rows = read_trials(run_dir / TRIALS_FILE).records
    assert sorted(r.trial for r in rows) == sorted(planned)
    for row in rows:
        assert (row.client, row.device) == (planned[row.trial].client, planned[row.trial].device)
        # a row is marked by its own stage against its own device's target: paper-p4's baseline (0.1 s
        # against its device's ms) is, the BeagleBone's is not, although its calibration missed at 100
        target = load_device(row.device).compute_s("mul", row.size)
        own = row.method == "local" and DeviceTolerance().missed(target, row.t_total)
        assert row.emulation_flagged == own == (row.device == P4 and row.method == "local"), row
    (bone_worker,) = lab.hosts["client3"].workers
    ran = {s["trial"] for s in bone_worker.specs if s["trial"] >= 0}
    assert ran == {t for t, p in planned.items() if p.client == 3}  # its baseline and its remote trials

    data = read_manifest(run_dir / "manifest.json")
    assert data.device.profile["name"] == P4 and len(data.device.calibrations) == 1
    (bone,) = data.client_devices
    assert bone.profile["name"] == BONE and len(bone.calibrations) == 1
    assert data.client_device(BONE) is bone and data.client_device(P4) is data.device
    assert data.client_device_names == [P4, P4, BONE]  # each client host's, as the sweep loaded them


def test_an_ssh_labs_client_machines_each_calibrate_for_their_device(fake_inventory, tmp_path, monkeypatch):
    """In an SSH lab each client host is a machine of its own: two clients of one device each calibrate
    on their own host, each worker scales by its own host's slowdowns, a target missed on one machine
    is announced, a trial is marked by its own stages, and the manifest records each calibration under
    the device with its host."""
    lab = sweep_ready(fake_netns_lab(fake_inventory.with_clients(2), tmp_path / "state", monkeypatch, {}))
    lab.clients_share_a_machine = False  # as an SSH lab's (testbed.backends.ssh.SshLab)
    p4 = load_device(P4)

    def as_device(encode_off: float):  # a worker whose stages take the device's times, its encode off
        def script(spec: dict) -> dict:
            targets = stage_targets(spec["op"], spec["size"], spec["method"], 8, p4, None)
            off = {"t_client_encode": encode_off}
            return healthy_worker(spec) | {c: t * off.get(c, 1.0) for c, t in targets.items()}

        return script

    lab.hosts["client"].worker(as_device(1.0))
    lab.hosts["client2"].worker(as_device(1.3))
    requests = {
        "client": calibration_answers(lab.hosts["client"], P4, "client", 10.0),
        "client2": calibration_answers(lab.hosts["client2"], P4, "client", 30.0, 100, flagged_kind="encode"),
    }
    exp = replace(MIXED, clients=2, contention=(1, 2), client_devices=())
    run_dir = tmp_path / "run"
    manifest = start_run(run_dir, "fake-machines", exp, lab)
    summary = run_sweep(lab, exp, run_dir, manifest, device=load_device(P4))
    assert (summary["status"], summary["failed"]) == ("complete", 0)

    assert [r["device"]["name"] for r in requests["client"]] == [P4]
    assert [r["device"]["name"] for r in requests["client2"]] == [P4]  # its own host, the same device
    kernel = key("kernel", "mul", 100)
    for role, slowdown in (("client", 10.0), ("client2", 30.0)):
        (worker,) = lab.hosts[role].workers
        assert json.loads(worker.args[worker.args.index("--scale") + 1])[kernel] == slowdown, role
    rows = read_trials(run_dir / TRIALS_FILE).records
    assert {r.client for r in rows if r.method == "raw"} == {1, 2}
    for row in rows:  # client 2's raw encode missed in its trials: they are marked, client 1's not
        assert row.emulation_flagged == (row.client == 2 and row.method == "raw"), row
    data = read_manifest(run_dir / "manifest.json")
    assert [c.client for c in data.device.calibrations] == [None, "client2"] and data.client_devices == []


def test_a_session_reuses_each_client_hosts_own_calibration(tmp_path):
    """On one machine a resumed session uses each host's calibration again: client 1's, and a further
    client host's (recorded with its role), never the one for the other."""
    exp = load_experiment(write_experiment(tmp_path, GROUPS))
    manifest = ManifestFile(
        tmp_path / "manifest.json", Manifest(run_id="r", status="running", experiment=exp)
    )
    rows = [
        CalibrationRow.of(
            "kernel", None, "mul", 800, target=1.0, achieved=1.0, tolerance=DeviceTolerance(10.0)
        )
    ]
    p4, bone = load_device(P4), load_device(BONE)

    def calibration(slowdown: float) -> Calibration:
        return Calibration(tolerance_pct=10.0, rows=rows, scale={"k": slowdown})

    record_calibration(manifest, p4, "scaled", calibration(1.0), "first")
    record_calibration(manifest, bone, "scaled", calibration(2.0), "second", client="client3")
    record_calibration(manifest, p4, "scaled", calibration(3.0), "third", client="client2")
    assert reusable(manifest, "client", "scaled", None, True, P4).at == "first"
    assert reusable(manifest, "client", "scaled", None, True, BONE, "client3").at == "second"
    assert reusable(manifest, "client", "scaled", None, True, P4, "client2").at == "third"
    assert reusable(manifest, "client", "scaled", None, False, P4) is None  # not this machine's hosts
