"""A client's concurrent requests (issue 29's concurrency), without root: the experiment's
`concurrency`, the plan's request streams, the labels, the device's shared cores and the pacing of a
client stage, and a sweep through a fake client host with a worker per request stream."""

from __future__ import annotations

import threading
import time
from dataclasses import replace

import pytest

from client.device_cores import DeviceCores, Pacer
from client.scaler import Scaler
from contracts.device import key
from contracts.errors import UserError
from contracts.run import TRIALS_FILE, read_trials
from contracts.stages import label_clients, offload_label
from contracts.worker_api import WorkerEmulation
from testbed.experiment import load_experiment, planned_trials
from testbed.sweep.bookkeeping import start_run
from testbed.sweep.phases import run_sweep
from testbed.sweep.plan import plan_trials
from testbed.sweep.worker_link import emulation_args
from tests.fakes import FAKE_SWEEP
from tests.helpers import write_experiment

CONCURRENT = replace(FAKE_SWEEP, methods=("raw",), sizes=(100,), rates_mbps=(10.0,), concurrency=(1, 2))

BASE = """\
    ops: [mul]
    sizes: [800]
    rates: [40]
    methods: [raw]
    reps: 3
    client_device: paper-p4
    concurrency: [1, 2, 4]
"""


def test_an_experiment_varies_the_requests_a_client_has_outstanding(tmp_path):
    exp = load_experiment(write_experiment(tmp_path, BASE + "    server_workers: 4\n"))
    assert (exp.concurrency, exp.together, exp.server_workers) == ((1, 2, 4), True, 4)
    assert planned_trials(exp) == 3 + 3 * (1 + 2 + 4)  # the local baseline, then c trials per repetition
    assert not load_experiment(write_experiment(tmp_path, BASE.replace("[1, 2, 4]", "[1]"))).together


@pytest.mark.parametrize(
    "change, words",
    [
        (("[1, 2, 4]", "[2, 2]"), "repeats a value"),
        (("[1, 2, 4]", "[1, 33]"), "at most 32 requests"),
        (("reps: 3", "reps: 3..20"), "fixed repetitions"),
        (("[raw]", "[raw, grpc]"), "over HTTP"),
        (("reps: 3", "reps: 3\n    server_stack: cgi"), "wsgi stack"),
        (("reps: 3", "reps: 3\n    server_workers: 5"), "give 1 to 4"),
        (("reps: 3", "reps: 3\n    mode: throttle"), "emulated scaled"),
    ],
)
def test_what_concurrent_requests_cannot_do_is_refused_in_one_line(tmp_path, change, words):
    with pytest.raises(UserError, match=words):
        load_experiment(write_experiment(tmp_path, BASE.replace(*change)))


def test_the_plan_has_c_trials_per_repetition_one_per_request_stream():
    trials = plan_trials(CONCURRENT)
    assert len(trials) == planned_trials(CONCURRENT) == 2 + 2 * (1 + 2)
    remote = [t for t in trials if t.method == "raw"]
    assert [(t.concurrency, t.rep, t.stream) for t in remote] == [
        (1, 0, 1), (1, 1, 1), (2, 0, 1), (2, 0, 2), (2, 1, 1), (2, 1, 2)
    ]  # fmt: skip
    assert remote[0].cell != remote[2].cell and remote[2].cell == remote[3].cell
    assert all(t.concurrency is None and t.stream is None for t in plan_trials(FAKE_SWEEP))


def test_labels_carry_the_requests_outstanding_per_client():
    assert offload_label("raw", "python", concurrency=4) == "raw-c4"
    label = offload_label("raw", "python", 2, parallelism=2, concurrency=8)
    assert label == "raw-x2-p2-c8" and label_clients(label) == 2
    assert "raw-c1" in CONCURRENT.offload_labels() and "raw-c2" in CONCURRENT.offload_labels()


def test_a_devices_cores_serve_stages_in_turn_from_when_each_is_ready(tmp_path):
    path = str(tmp_path / "cores.json")
    one, also = DeviceCores(path, 1), DeviceCores(path, 1)  # two workers of one client
    assert one.take(10.0, 2.0) == 12.0
    assert also.take(10.5, 1.0) == 13.0  # waited for the first stage's core
    assert one.take(20.0, 1.0) == 21.0  # the core was free: from when the stage was ready
    two = DeviceCores(str(tmp_path / "two.json"), 2)
    assert [two.take(0.0, 1.0) for _ in range(3)] == [1.0, 1.0, 2.0]
    (tmp_path / "bad.json").write_text("not json")
    assert DeviceCores(str(tmp_path / "bad.json"), 1).take(5.0, 1.0) == 6.0  # unreadable: every core free
    with pytest.raises(ValueError, match="at least one core"):
        DeviceCores(path, 0)


def test_paced_stages_last_the_devices_time_and_queue_for_its_core(tmp_path):
    """Two workers of a one-core device encode at once: each stage's device time is its CPU time
    times the slowdown (0.01 s x 10), the second waits for the first's core."""
    path = str(tmp_path / "cores.json")
    pacers = [Pacer(DeviceCores(path, 1)) for _ in range(2)]
    for pacer in pacers:
        pacer.device_s = lambda kind, cpu_s: cpu_s * 10.0
    ends: list[float] = []
    ready = time.perf_counter()
    threads = [
        threading.Thread(target=lambda p=p: ends.append(p.stage("encode", ready, 0.01))) for p in pacers
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    took = sorted(e - ready for e in ends)
    assert took[0] == pytest.approx(0.1, abs=0.05) and took[1] == pytest.approx(0.2, abs=0.05)
    unpaced = Pacer(DeviceCores(str(tmp_path / "other.json"), 1))  # no device times set: no wait
    assert unpaced.stage("encode", ready, 5.0) - time.perf_counter() < 0.01


def test_paced_client_stages_are_not_scaled_again():
    enc, dec = key("encode", "mul", 400, "raw"), key("decode", "mul", 400, "raw")
    scaler = Scaler({enc: 10.0, dec: 10.0})
    out = {"t_client_encode": 0.5, "cpu_client_encode": 0.01, "t_client_decode": 0.4, "cpu_client_decode": 0.01,
           "t_request": 1.0, "t_comm": 1.0, "t_total": 1.9}  # fmt: skip
    scaler.remote(dict(out), "mul", 400, "raw")
    paced = dict(out)
    scaler.remote(paced, "mul", 400, "raw", paced=True)
    assert (paced["t_client_encode"], paced["t_client_decode"], paced["t_total"]) == (0.5, 0.4, 1.9)


def test_the_worker_is_given_the_devices_cores_to_share():
    calibration = WorkerEmulation(
        scale={"k": 2.0}, rows=[], cores=("/run/testbed/tb/client/device-cores.json", 1)
    )
    args = emulation_args(calibration)
    assert args[args.index("--device-cores") + 1 :][:2] == ["/run/testbed/tb/client/device-cores.json", "1"]
    assert "--device-cores" not in emulation_args(WorkerEmulation(scale={"k": 2.0}, rows=[]))


def test_a_sweep_runs_each_request_stream_on_a_worker_of_its_own(lab, tmp_path):
    run_dir = tmp_path / "run"
    manifest = start_run(run_dir, "fake-concurrency", CONCURRENT, lab)
    summary = run_sweep(lab, CONCURRENT, run_dir, manifest)
    assert (summary["status"], summary["failed"]) == ("complete", 0)
    planned = plan_trials(CONCURRENT)
    records = {r.trial: r for r in read_trials(run_dir / TRIALS_FILE).records}
    assert sorted(records) == [t.trial for t in planned]
    assert all(
        (records[t.trial].concurrency, records[t.trial].stream) == (t.concurrency, t.stream) for t in planned
    )
    first, second = lab.hosts["client"].workers  # both on the client's host
    assert {s["trial"] for s in second.specs if s["trial"] >= 0} == {
        t.trial for t in planned if t.stream == 2
    }
    assert {s["trial"] for s in first.specs if s["trial"] >= 0} == {
        t.trial for t in planned if t.stream in (None, 1)
    }
    assert (run_dir / "worker-client-2.log").exists()
    assert manifest.manifest.experiment.concurrency == (1, 2)
