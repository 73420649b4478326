"""The devices' slowdowns follow this host's speed through the trials' own CPU times: a kind of
work's slowdown is its target over the mean of its recent runs, the calibration's mean among them
until newer runs push it out; the client's by the client's runs, the server's by the server's
(client/scaler.py)."""

import json
from dataclasses import replace

import pytest

from client.scaler import CLIENT, REFERENCE_WINDOW, SERVER, Scaler
from client.worker import TrialWorker
from contracts.calibration import CalibrationRow
from contracts.device import key, stack_key
from contracts.stages import LOCAL
from contracts.tolerance import DeviceTolerance
from contracts.worker_api import TrialSpec, WorkerEmulation
from testbed.sweep.worker_link import emulation_args

KERNEL = key("kernel", "mul", 400)
ENCODE = key("encode", "mul", 400, "json")
DECODE = key("decode", "mul", 400, "json")


def test_a_slowdown_is_the_target_over_the_recent_mean_of_this_hosts_runs():
    # calibrated at 0.01 s of host CPU for a 1 s target: 100x
    scaler = Scaler({KERNEL: 100.0}, targets={KERNEL: 1.0})
    assert scaler.factor("kernel", "mul", 400) == pytest.approx(100.0)
    scaler.refer(CLIENT, KERNEL, 0.03)  # the first trial's run: the calibration's mean leaves
    assert scaler.factor("kernel", "mul", 400) == pytest.approx(1 / 0.03)
    scaler.refer(CLIENT, KERNEL, 0.01)  # the host sped up again: mean 0.02 s, 50x
    assert scaler.factor("kernel", "mul", 400) == pytest.approx(50.0)
    for _ in range(REFERENCE_WINDOW):
        scaler.refer(CLIENT, KERNEL, 0.0125)  # older runs are pushed out
    assert scaler.factor("kernel", "mul", 400) == pytest.approx(80.0)
    local = {"t_total": 0.02, "cpu_total": 0.0125}
    scaler.local(local, "mul", 400)
    assert local["t_total"] == pytest.approx(1.0)  # the device's second, whatever the drift


def test_without_targets_the_calibrations_slowdowns_hold():
    fixed = Scaler({KERNEL: 100.0})
    fixed.refer(CLIENT, KERNEL, 0.03)  # nothing to follow: ignored
    assert fixed.factor("kernel", "mul", 400) == 100.0
    server = {key("decode", "mul", 400, "json"): 4.0, key("kernel", "mul", 400): 30.0,
              key("encode", "mul", 400, "json"): 2.0}  # fmt: skip
    scaler = Scaler({ENCODE: 3.0, DECODE: 5.0}, server, targets={ENCODE: 0.6, DECODE: 0.5})
    scaler.refer(CLIENT, ENCODE, 0.3)  # the first trial's run, in the calibration's 0.2 s place: 2x
    scaler.refer(SERVER, key("kernel", "mul", 400), 0.2)  # the server has no targets: ignored
    remote = {"t_client_encode": 0.3, "cpu_client_encode": 0.2, "t_request": 1.5, "t_client_decode": 0.1,
              "cpu_client_decode": 0.1, "t_server_decode": 0.1, "cpu_server_decode": 0.1, "t_server_compute": 0.1,
              "cpu_server_compute": 0.1, "t_server_encode": 0.1, "cpu_server_encode": 0.1, "t_comm": 1.2}  # fmt: skip
    scaler.remote(remote, "mul", 400, "json")
    assert remote["t_client_encode"] == pytest.approx(0.2 * 2.0)
    assert remote["t_client_decode"] == pytest.approx(0.1 * 5.0)  # no reference yet: the calibration's
    assert remote["t_server_compute"] == pytest.approx(0.1 * 30.0)  # the server's: the calibration's


def test_the_server_follows_its_own_runs_and_never_the_clients():
    """Issue 25's checks: the client's runs rose 14-34% over its calibration while the server's CPU
    time for the same work rose 0-6% (its stages came out 12-25% low when they followed the client's);
    with four testbeds the server's own start-up rose 45% and its kernel 25% (its stages came out that
    much high when they followed nothing). Each device follows its own host's runs."""
    server_kernel = key("kernel", "mul", 400, "json")  # the cgi stack: the kernel of json requests
    server = {key("decode", "mul", 400, "json"): 4.0, server_kernel: 30.0,
              key("encode", "mul", 400, "json"): 2.0, stack_key("server_start"): 2.0}  # fmt: skip
    server_targets = {server_kernel: 0.3, stack_key("server_start"): 0.4}  # calibration means 0.01, 0.2 s
    scale = {ENCODE: 3.0, DECODE: 5.0, KERNEL: 100.0}
    targets = {ENCODE: 0.6, DECODE: 0.5, KERNEL: 1.0}  # calibration means: 0.2, 0.1 and 0.01 s
    scaler = Scaler(scale, server, targets, server_targets)
    # the first trials' runs, each in its calibration's place
    scaler.refer(CLIENT, ENCODE, 0.3)  # the client's encode 1.5x slower
    scaler.refer(CLIENT, KERNEL, 0.03)  # the client's kernel 3x: nothing of the server's
    assert scaler.server_factor("kernel", "mul", 400, "json") == pytest.approx(30.0)
    scaler.refer(SERVER, server_kernel, 0.0125)  # the server's kernel 1.25x
    scaler.refer(SERVER, stack_key("server_start"), 0.25)  # its start-up 1.25x
    assert scaler.server_factor("kernel", "mul", 400, "json") == pytest.approx(24.0)
    assert scaler.factor("kernel", "mul", 400) == pytest.approx(1.0 / 0.03)
    remote = {"t_client_encode": 0.3, "cpu_client_encode": 0.2, "t_request": 1.5, "t_client_decode": 0.1,
              "cpu_client_decode": 0.1, "t_server_decode": 0.1, "cpu_server_decode": 0.1, "t_server_compute": 0.1,
              "cpu_server_compute": 0.0125, "t_server_encode": 0.1, "cpu_server_encode": 0.1, "t_comm": 1.2,
              "t_server_start": 0.3, "cpu_server_start": 0.25}  # fmt: skip
    scaler.remote(remote, "mul", 400, "json")
    assert remote["t_server_compute"] == pytest.approx(0.3)  # the device's kernel at the host's mean
    assert remote["t_server_decode"] == pytest.approx(0.1 * 4.0)  # no target: the calibration's
    assert remote["t_server_start"] == pytest.approx(0.4)  # the device's start-up at the host's mean
    assert remote["t_comm"] == pytest.approx(1.2 - 0.3 + 0.4)
    assert remote["t_client_encode"] == pytest.approx(0.2 * 0.6 / 0.3)  # the client's follow its own


def test_a_trials_runs_are_the_stages_a_slowdown_follows_and_the_servers_only_pythons():
    """A remote trial's runs: the client's stages and the Python server's, each only where a window
    follows it (a throttled client with a server device publishes nothing of the client's). Another
    language's server runs the same work at its own speed (C++'s kernel 14x faster than NumPy's), and
    the calibration timed Python's code: its runs would drag the Python server's slowdowns."""
    server = {key("decode", "mul", 400, "json"): 4.0, key("kernel", "mul", 400): 30.0,
              key("encode", "mul", 400, "json"): 2.0, stack_key("server_start"): 2.0}  # fmt: skip
    everything = {k: 0.3 for k in server}
    scaler = Scaler({ENCODE: 3.0, DECODE: 5.0}, server, {ENCODE: 0.6, DECODE: 0.5}, everything)
    out = {"cpu_client_encode": 0.2, "cpu_client_decode": 0.1, "cpu_server_decode": 0.05,
           "cpu_server_compute": 0.01, "cpu_server_encode": 0.03, "t_server_start": 0.2,
           "cpu_server_start": 0.15}  # fmt: skip
    assert scaler.runs(out, "mul", 400, "json") == [
        (CLIENT, ENCODE, 0.2), (CLIENT, DECODE, 0.1), (SERVER, key("decode", "mul", 400, "json"), 0.05),
        (SERVER, key("kernel", "mul", 400), 0.01),  # no kernel of json requests calibrated: every method's
        (SERVER, key("encode", "mul", 400, "json"), 0.03), (SERVER, stack_key("server_start"), 0.15),
    ]  # fmt: skip
    assert scaler.runs(out, "mul", 400, "json", server="cpp") == [
        (CLIENT, ENCODE, 0.2),
        (CLIENT, DECODE, 0.1),
    ]
    kernel_only = Scaler({ENCODE: 3.0}, server, None, {key("kernel", "mul", 400): 0.3})
    assert kernel_only.runs(out, "mul", 400, "json") == [(SERVER, key("kernel", "mul", 400), 0.01)]
    assert Scaler({ENCODE: 3.0}).runs(out, "mul", 400, "json") == []  # nothing follows
    local = Scaler({KERNEL: 100.0}, targets={KERNEL: 1.0})
    assert local.runs({"cpu_total": 0.01}, "mul", 400, LOCAL) == [(CLIENT, KERNEL, 0.01)]


def test_a_trial_is_scaled_by_the_runs_before_it_and_then_is_one_of_them(monkeypatch):
    """Local trials on this host: each one's device time is its CPU time times the target over the
    mean of the runs before it (the worker's own figure for the first, then the earlier trials'), and
    its own CPU time joins them afterwards, the stand-in leaving at the first; no work runs beside the
    trials (a second run found warm caches)."""
    size = 64
    k = key("kernel", "mul", size)
    scaler = Scaler({k: 1000.0}, targets={k: 0.5})  # calibrated at 0.5 ms of host CPU
    seeded = []
    seed = scaler.seed
    monkeypatch.setattr(scaler, "seed", lambda *a: seeded.append(a[2]) or seed(*a))
    worker = TrialWorker("http://127.0.0.1:9", seed=1, timeout=5.0, scaler=scaler)
    spec = TrialSpec(trial=0, op="mul", size=size, dtype="float64", method=LOCAL)
    first = worker.run(spec).to_json()
    assert first["ok"], first
    (own,) = seeded  # the worker's own figure in the calibration's place (`meet`)
    assert own != 0.0005 and first["t_total"] == pytest.approx(first["cpu_total"] * 0.5 / own)
    assert list(scaler.recent[CLIENT][k]) == pytest.approx([first["cpu_total"]])  # the trial's run, alone
    second = worker.run(replace(spec, trial=1)).to_json()
    assert second["t_total"] == pytest.approx(second["cpu_total"] * 0.5 / first["cpu_total"])
    assert list(scaler.recent[CLIENT][k]) == pytest.approx([first["cpu_total"], second["cpu_total"]])
    # untimed: a fresh process's first runs are no reference
    warm_up = worker.run(replace(spec, trial=-1)).to_json()
    assert warm_up["ok"] and len(scaler.recent[CLIENT][k]) == 2


def test_a_remote_trials_client_stages_are_its_reference_runs():
    scaler = Scaler({ENCODE: 3.0, DECODE: 5.0}, targets={ENCODE: 0.6, DECODE: 0.5})
    worker = TrialWorker("http://127.0.0.1:9", seed=1, timeout=5.0, scaler=scaler)
    worker.follow({"cpu_client_encode": 0.3, "cpu_client_decode": 0.2}, "mul", 400, "json")
    assert list(scaler.recent[CLIENT][ENCODE]) == pytest.approx([0.3])  # in the calibration's place
    assert list(scaler.recent[CLIENT][DECODE]) == pytest.approx([0.2])
    worker.follow({"cpu_client_encode": 0.2, "cpu_client_decode": 0.2}, "mul", 400, "json")
    assert list(scaler.recent[CLIENT][ENCODE]) == pytest.approx([0.3, 0.2])
    assert scaler.factor("encode", "mul", 400, "json") == pytest.approx(0.6 / 0.25)


def test_the_worker_gets_each_devices_targets_with_its_slowdowns():
    def row(target_s: float) -> CalibrationRow:  # of KERNEL
        return CalibrationRow.of(
            "kernel", None, "mul", 400, target_s, achieved=target_s, tolerance=DeviceTolerance(10.0)
        )

    calibration = WorkerEmulation(scale={KERNEL: 100.0}, rows=[row(1.0)],
                                  server_scale={KERNEL: 7.0}, server_rows=[row(0.2)])  # fmt: skip
    args = emulation_args(calibration)
    assert json.loads(args[args.index("--targets") + 1]) == {KERNEL: 1.0}
    assert json.loads(args[args.index("--server-targets") + 1]) == {KERNEL: 0.2}
    assert json.loads(args[args.index("--scale") + 1]) == {KERNEL: 100.0} and "--server-scale" in args
    assert emulation_args(WorkerEmulation(quotas={"base": 0.1})) == [
        "--quotas",
        '{"base": 0.1}',
    ]  # throttle: none
    assert emulation_args(None) == []


def test_a_scaled_worker_meets_each_work_once_untimed_before_its_first_trial(monkeypatch):
    """The first run of new work pays first-touch costs no later run does: a scaled worker runs each
    (op, size, method)'s work once, untimed, before its first trial; a worker without a device does not."""
    import client.worker as worker_module

    ran = []
    real = worker_module.execute
    monkeypatch.setattr(worker_module, "execute", lambda op, operands: ran.append(op) or real(op, operands))
    k = key("kernel", "mul", 32)
    worker = TrialWorker(
        "http://127.0.0.1:9", seed=1, timeout=5.0, scaler=Scaler({k: 10.0}, targets={k: 0.1})
    )
    spec = TrialSpec(trial=0, op="mul", size=32, dtype="float64", method=LOCAL)
    assert worker.run(spec).ok
    met = len(ran)  # the untimed run, then its figure timed as a trial times it (`Scaler.seed`)
    assert met >= 2 and set(ran) == {"mul"}
    for trial in range(1, 3):
        assert worker.run(replace(spec, trial=trial)).ok
    assert len(ran) == met  # once, for the first trial (the trials' own runs are `local_times`')
    worker.meet("mul", worker.operands("mul", 32, "float64"), "raw")  # a method's first trial: its codec
    assert len(ran) == met + 1  # the kernel untimed; a method's figures are its codec's, not the kernel's
    plain = TrialWorker("http://127.0.0.1:9", seed=1, timeout=5.0)
    assert plain.run(spec).ok and len(ran) == met + 1


def test_a_trial_expects_of_each_stage_what_its_slowdown_divides_by():
    """What a stage is expected to take on this host (a figure far above it is taken again:
    contracts.short_work) is its slowdown's reference: the recent runs' mean, else the calibration's;
    the server's only when its device follows the Python server's stages."""
    s_decode, s_kernel = key("decode", "mul", 400, "json"), key("kernel", "mul", 400)
    scaler = Scaler(
        {ENCODE: 3.0, DECODE: 5.0, KERNEL: 100.0},
        {s_decode: 4.0, s_kernel: 50.0},
        targets={ENCODE: 0.6, DECODE: 0.5, KERNEL: 1.0},
        server_targets={s_decode: 0.4, s_kernel: 1.0},
    )
    scaler.refer(CLIENT, ENCODE, 0.3)  # the first trial's run, in the calibration's place
    remote = scaler.expected("mul", 400, "json")
    assert remote.client == pytest.approx({"encode": 0.3, "decode": 0.1})
    assert remote.server == pytest.approx({"decode": 0.1, "kernel": 0.02})  # no encode target: none
    assert scaler.expected("mul", 400, "json", server="cpp").server == {}
    assert scaler.expected("mul", 400, LOCAL).client == pytest.approx({"kernel": 0.01})
    assert scaler.expected("inv", 400, "json").client == {}  # no calibration of it: nothing expected
    assert Scaler({KERNEL: 100.0}).expected("mul", 400, LOCAL).client == {}  # no targets, no reference


def test_the_worker_asks_each_stage_against_its_expected_time(monkeypatch):
    """A scaled local trial's kernel is timed with what the scaler expects of it."""
    import client.offload as offload

    seen = []
    real = offload.per_run_cpu_s
    monkeypatch.setattr(offload, "per_run_cpu_s", lambda *a: seen.append(a[3]) or real(*a))
    k = key("kernel", "mul", 32)
    scaler = Scaler({k: 10.0}, targets={k: 0.1})
    seeded = []
    seed = scaler.seed
    monkeypatch.setattr(scaler, "seed", lambda *a: seeded.append(a[2]) or seed(*a))
    worker = TrialWorker("http://127.0.0.1:9", seed=1, timeout=5.0, scaler=scaler)
    assert worker.run(TrialSpec(trial=0, op="mul", size=32, dtype="float64", method=LOCAL)).ok
    assert seen == [pytest.approx(seeded[0])] and seeded[0] != pytest.approx(0.01)  # its own figure (`meet`)
    assert worker.client.asks() == {}  # no server device: the server is not asked


def test_a_worker_seeds_each_followed_window_with_its_own_figure_of_the_work():
    """The same work runs at another speed in the long-lived worker than in the calibration's process:
    the worker's first meeting of a method's work times its encode and decode as a trial would and
    puts them in the calibration's place; other kinds of work keep theirs."""
    size = 48
    enc, dec, kernel = (key("encode", "mul", size, "json"), key("decode", "mul", size, "json"),
                        key("kernel", "mul", size))  # fmt: skip
    scaler = Scaler({enc: 100.0, dec: 100.0, kernel: 100.0}, targets={enc: 1.0, dec: 1.0, kernel: 1.0})
    worker = TrialWorker("http://127.0.0.1:9", seed=1, timeout=5.0, scaler=scaler)
    worker.meet("mul", worker.operands("mul", size, "float64"), "json")
    for k in (enc, dec):
        (own,) = scaler.recent[CLIENT][k]
        assert own != pytest.approx(0.01) and 0 < own < 0.01  # a 48x48 JSON text: microseconds, not 10 ms
    assert list(scaler.recent[CLIENT][kernel]) == [pytest.approx(0.01)]  # not this method's: untouched
    fixed = Scaler({enc: 100.0})  # no targets: nothing follows, nothing seeded
    TrialWorker("http://127.0.0.1:9", seed=1, timeout=5.0, scaler=fixed).meet(
        "mul", worker.operands("mul", size, "float64"), "json"
    )
    assert fixed.recent[CLIENT] == {}
