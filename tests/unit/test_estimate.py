"""The duration model's arithmetic on figures chosen so that every term is easy to check by hand, and
the progress line's ETA, which scales the model by what the trials so far took.

This checks the arithmetic, not the model's accuracy: that is measured against a real run in
tests/privileged/test_sweep_adaptive.py and recorded in docs/measurements.md.
"""

from __future__ import annotations

import logging
from dataclasses import replace

import pytest

from contracts.device import DeviceProfile, SpeedCurve
from contracts.stages import LOCAL
from contracts.units import expected_goodput
from testbed.estimate import (
    HTTP_HEADERS,
    TRIAL_OVERHEAD_S,
    DurationModel,
    HostSpeeds,
    format_duration,
    measure_host,
    replica_hint,
)
from testbed.experiment import Experiment, Validation
from testbed.sweep.progress import PRIOR_S, Progress
from testbed.sweep.progress import log as progress_log

DEVICE = DeviceProfile(
    name="round",
    kernels={"mul": SpeedCurve(((100, 1.0),))},  # 1 GFLOP/s
    marshalling={"raw": {"encode": 100.0, "decode": 200.0}},  # MB/s of matrix data
)
HOST = HostSpeeds(gflops=10.0, codecs={"raw": {"encode": 1000.0, "decode": 1000.0}}, wire_ratio={"raw": 1.5})
EXP = Experiment(
    name="m", ops=("mul",), sizes=(500,), rates_mbps=(10.0,), methods=("raw",), reps=4, warmup=0,
    validation=Validation(enabled=False), min_reps=2,
)  # fmt: skip


def test_a_local_trial_is_the_device_compute_time():
    model = DurationModel(EXP, HOST, DEVICE)
    assert model.trial_s("mul", 500, None, LOCAL) == pytest.approx(
        2 * 500**3 / 1e9 + TRIAL_OVERHEAD_S
    )  # 0.25 s


def test_a_remote_trial_adds_the_device_marshalling_the_wire_and_the_server():
    model = DurationModel(EXP, HOST, DEVICE)
    data = 500 * 500 * 8  # 2 MB per matrix
    client = 2 * data / 100e6 + data / 200e6  # two operands encoded at 100 MB/s, the product decoded at 200
    goodput = expected_goodput(10_000_000) / 8
    wire = (2 * data * 1.5 + HTTP_HEADERS) / goodput + (data * 1.5 + HTTP_HEADERS) / goodput
    server = 2 * 500**3 / 10e9 + 2 * data / 1e9 + data / 1e9
    expected = client + wire + server + TRIAL_OVERHEAD_S
    assert model.trial_s("mul", 500, 10.0, "raw") == pytest.approx(expected)
    assert 7.5 < wire < 7.7  # 9 MB at 9.56 Mbit/s of goodput


def test_on_the_cgi_stack_every_http_trial_pays_a_process_start_up_and_grpc_does_not():
    host = replace(HOST, cgi_start_s=0.3, codecs={**HOST.codecs, "grpc": HOST.codecs["raw"]})
    host = replace(host, wire_ratio={**HOST.wire_ratio, "grpc": 1.5})
    wsgi, cgi = (
        DurationModel(EXP, host, DEVICE),
        DurationModel(replace(EXP, server_stack="cgi"), host, DEVICE),
    )
    assert cgi.trial_s("mul", 500, 10.0, "raw") == pytest.approx(wsgi.trial_s("mul", 500, 10.0, "raw") + 0.3)
    assert cgi.trial_s("mul", 500, 10.0, "grpc") == wsgi.trial_s("mul", 500, 10.0, "grpc")
    assert cgi.trial_s("mul", 500, None, LOCAL) == wsgi.trial_s("mul", 500, None, LOCAL)


def test_a_server_device_with_a_start_up_figure_gives_the_trials_start_up_and_the_host_its_wall_time():
    host = replace(HOST, cgi_start_s=0.3)
    server = replace(DEVICE, name="srv", stack={"server_start": 1.2})
    plain = DurationModel(
        replace(EXP, server_stack="cgi"), host, DEVICE, server_device=replace(DEVICE, name="srv")
    )
    model = DurationModel(replace(EXP, server_stack="cgi"), host, DEVICE, server_device=server)
    assert model.trial_s("mul", 500, 10.0, "raw") == pytest.approx(
        plain.trial_s("mul", 500, 10.0, "raw") + 0.9
    )
    # the testbed's own time: the process starts at this host's speed whatever the device
    assert model.wall_s("mul", 500, 10.0, "raw") == plain.wall_s("mul", 500, 10.0, "raw")


def test_the_start_up_is_measured_only_for_the_cgi_stack():
    assert measure_host(("raw",)).cgi_start_s == 0.0
    assert measure_host(("raw",), cgi=True).cgi_start_s > 0  # a new interpreter importing NumPy


def test_without_a_device_the_client_is_this_host_under_its_quota():
    model = DurationModel(EXP, HOST, None, cpu_quota=0.25)
    assert model.trial_s("mul", 500, None, LOCAL) == pytest.approx(4 * 2 * 500**3 / 10e9 + TRIAL_OVERHEAD_S)


def test_the_sweep_is_every_cell_times_its_reps_plus_set_up_and_a_range_when_adaptive():
    model = DurationModel(EXP, HOST, DEVICE)
    per_rep = model.wall_s("mul", 500, None, LOCAL) + model.wall_s("mul", 500, 10.0, "raw")
    assert model.duration_s() == pytest.approx((2 * per_rep, 4 * per_rep))
    fixed = DurationModel(
        replace(EXP, min_reps=None, warmup=1, validation=Validation(duration=2)), HOST, DEVICE
    )
    setup = (2 * 2 + 1) + per_rep
    assert fixed.duration_s() == pytest.approx((4 * per_rep + setup,) * 2)


def test_replicas_share_the_trials_and_the_cpu_share_says_how_many_the_lock_lets_overlap():
    one, four = DurationModel(EXP, HOST, DEVICE), DurationModel(EXP, HOST, DEVICE, replicas=4)
    setup = one.setup_s()
    assert four.setup_s() == setup  # each replica sets its own rates up, side by side
    assert four.duration_s()[1] - setup == pytest.approx((one.duration_s()[1] - setup) / 4)
    # scaled: the testbed's wall time is this host's CPU work plus the wire; the lock serializes the work
    cells = [("mul", 500, None, LOCAL), ("mul", 500, 10.0, "raw")]
    wall = sum(one.wall_s(*c) for c in cells)
    cpu = wall - one.wire_s(*cells[1]) - 2 * TRIAL_OVERHEAD_S
    assert one.cpu_share() == pytest.approx(cpu / wall) and 0 < one.cpu_share() < 0.2  # the link dominates


def test_a_scaled_client_takes_this_hosts_time_and_a_throttled_one_the_devices():
    scaled, throttled = (
        DurationModel(EXP, HOST, DEVICE),
        DurationModel(replace(EXP, mode="throttle"), HOST, DEVICE),
    )
    assert scaled.wall_s("mul", 500, None, LOCAL) == pytest.approx(2 * 500**3 / 10e9 + TRIAL_OVERHEAD_S)
    assert throttled.wall_s("mul", 500, None, LOCAL) == throttled.trial_s("mul", 500, None, LOCAL)
    data = 500 * 500 * 8
    device_client = 2 * data / 100e6 + data / 200e6
    host_client = 3 * data / 1000e6
    remote = scaled.trial_s("mul", 500, 10.0, "raw")
    assert scaled.wall_s("mul", 500, 10.0, "raw") == pytest.approx(remote - device_client + host_client)
    assert throttled.wall_s("mul", 500, 10.0, "raw") == pytest.approx(remote)


def test_the_host_measurement_gives_each_codecs_bytes_on_the_wire():
    host = measure_host(("raw", "json", LOCAL))
    assert host.wire_ratio["raw"] == pytest.approx(1.0)
    assert host.wire_ratio["json"] > 2  # about 19 characters for an 8-byte float
    assert host.gflops > 0 and set(host.codecs) == {"raw", "json"}


def test_the_eta_is_the_model_scaled_by_what_the_trials_took(monkeypatch):
    clock = [100.0]
    monkeypatch.setattr("testbed.sweep.progress.time.monotonic", lambda: clock[0])
    cells = {("a",): 4, ("b",): 4}
    progress = Progress(
        8, 2, dict(cells), seconds={("a",): 1.0, ("b",): 3.0}, min_left={("a",): 2, ("b",): 2}
    )
    assert progress.eta() == (pytest.approx(8.0), pytest.approx(16.0))  # the model alone, before any trial

    class T:
        cell = ("b",)

    clock[0] += 6.0  # the first trial took twice what the model said
    progress.show("x", T())
    f = (6 + PRIOR_S) / (3 + PRIOR_S)
    assert progress.eta() == (pytest.approx(f * (2 + 3)), pytest.approx(f * (4 + 9)))
    progress.close_cells([("b",)])  # the stopping rule closed cell a
    assert progress.eta() == (pytest.approx(f * 3), pytest.approx(f * 9)) and progress.saved == 4

    long = Progress(1000, 1, {("b",): 1000}, seconds={("b",): 1.0})
    clock[0] += 2 * 500.0  # 500 trials later, all at twice the model's time: the pace is what counts
    for _ in range(500):
        long.show("x", T())
    assert long.eta()[1] == pytest.approx(2 * 500, rel=0.1)


def test_a_rates_set_up_before_short_trials_makes_no_spike(monkeypatch):
    clock = [0.0]
    monkeypatch.setattr("testbed.sweep.progress.time.monotonic", lambda: clock[0])
    progress = Progress(60, 10, {("c",): 60}, seconds={("c",): 0.1})

    class T:
        cell = ("c",)

    clock[0] += 10.0 + 6 * 0.1  # validation and warm-up, then six trials as fast as the model said
    for _ in range(6):
        progress.show("x", T())
    assert progress.eta()[1] < 1.2 * 54 * 0.1  # not 17x the model, as elapsed / modelled would say


def test_durations_read_as_minutes_or_hours():
    assert (format_duration(59.6), format_duration(3725)) == ("1m00s", "1h02m")


def test_grpc_is_estimated_with_its_codec_protobuf():
    host = measure_host(("protobuf", "grpc"))
    assert host.wire_ratio["grpc"] == pytest.approx(host.wire_ratio["protobuf"])
    device = replace(DEVICE, marshalling={"protobuf": {"encode": 50.0, "decode": 400.0}})
    model = DurationModel(replace(EXP, methods=("grpc",)), host, device)
    assert model.client_marshal_s("grpc", "encode", 10**6) == pytest.approx(10**6 / 50e6)


def test_the_replica_hint_is_said_when_replicas_run_or_would_help():
    assert replica_hint(0.6, 1) is None  # one testbed keeps the CPU busy enough
    assert replica_hint(0.3, 1).endswith("--replicas 3 would keep this host's CPU busy")
    assert replica_hint(0.3, 4).endswith("about 3 testbeds can share this host's CPU lock (running 4)")


def test_the_progress_line_goes_quiet_when_its_terminal_goes_away(monkeypatch, caplog):
    """A sweep of hours outlives the terminal or pipe it reports to (a broken pipe killed one and left
    its testbeds up); the first failed write is logged and the line goes quiet."""
    writes = []

    class Gone:
        def write(self, text):
            writes.append(text)
            raise BrokenPipeError(32, "Broken pipe")

        def flush(self):
            pass

        def isatty(self):
            return False

    monkeypatch.setattr("testbed.sweep.progress.sys.stderr", Gone())
    monkeypatch.setattr(progress_log, "propagate", True)  # a fake sweep before may have set it False
    caplog.set_level(logging.WARNING, logger=progress_log.name)
    progress = Progress(2, 1, {("c",): 2})
    progress.note("a warning")
    progress.show("x", final=True)
    progress.note("another")
    assert writes == ["a warning\n"] and progress.detached
    assert "terminal went away" in caplog.text


def test_a_trial_in_a_closed_cell_never_makes_the_eta_negative(monkeypatch):
    # measured: a paper-grid resume showed "ETA -1m42s..56m44s" once closed cells ran again
    clock = [0.0]
    monkeypatch.setattr("testbed.sweep.progress.time.monotonic", lambda: clock[0])
    progress = Progress(4, 1, {("c",): 4}, seconds={("c",): 1.0}, min_left={("c",): 2})

    class T:
        cell = ("c",)

    progress.close_cells([])  # the rule closed the cell, then it reopened: three more trials ran
    for _ in range(3):
        clock[0] += 1.0
        progress.show("x", T())
    low, high = progress.eta()
    assert low == 0 and high == 0
    assert (progress.done, progress.total_trials, progress.saved) == (3, 3, 1)
