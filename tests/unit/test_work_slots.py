"""The server's work slots and pacing without a server: the stage clock's `queue` and paced stages,
the trial's stage times from a header with `queue` (server time, not communication), and the row's
`t_server_queue` (trials format 6)."""

from __future__ import annotations

import threading
import time

import pytest

from client.offload import stage_times
from client.scaler import Scaler
from contracts.device import DeviceProfile, SpeedCurve
from contracts.run import FORMAT_VERSION, TrialRecord, TrialWriter, read_trials
from contracts.stages import format_server_timing, parse_server_timing
from server.timing import StageClock

DEVICE = DeviceProfile(
    "tiny", {"mul": SpeedCurve(((10, 2 * 10**3 / 0.05 / 1e9),))}, {"raw": {"decode": 1.0, "encode": 1.0}}
)


def test_a_paced_stage_lasts_its_target_and_reports_the_hosts_part():
    clock = StageClock(DEVICE)
    with clock.stage("compute") as stage:
        stage.work("mul", 10)  # 0.05 s on the device
    with clock.stage("decode") as stage:
        stage.work("mul", 10, "raw", 20_000)  # 20 kB at 1 MB/s: 0.02 s
    assert clock.ms["compute"] == pytest.approx(50.0, abs=15.0) and clock.host_ms["compute"] < 5.0
    assert clock.ms["decode"] == pytest.approx(20.0, abs=15.0)
    header = clock.header()
    assert parse_server_timing(header, "host") == pytest.approx(
        {k: v / 1000 for k, v in clock.host_ms.items()}, abs=1e-6
    )


def test_an_unpaced_clock_and_a_failed_paced_stage_are_not_slept():
    clock = StageClock()
    with clock.stage("compute") as stage:
        stage.work("mul", 10)
    assert clock.ms["compute"] < 5.0 and clock.host_ms == {}
    paced = StageClock(DEVICE)
    start = time.perf_counter()
    with pytest.raises(ValueError), paced.stage("compute") as stage:
        stage.work("mul", 10)
        raise ValueError
    assert time.perf_counter() - start < 0.04 and "compute" in paced.ms


def test_a_profile_without_the_work_is_an_error_naming_it():
    with (
        pytest.raises(RuntimeError, match="tiny has no figure for 'json'"),
        StageClock(DEVICE).stage("encode") as s,
    ):
        s.work("mul", 10, "json", 800)


def test_the_wait_for_a_work_slot_is_the_queue_entry():
    slots = threading.BoundedSemaphore(1)
    slots.acquire()
    threading.Timer(0.05, slots.release).start()
    clock = StageClock()
    with clock.queued(slots):
        pass
    assert clock.ms["queue"] == pytest.approx(50.0, abs=30.0)
    free = StageClock()
    with free.queued(None):
        pass
    assert "queue" not in free.ms


def test_queueing_is_server_time_not_communication():
    header = format_server_timing({"queue": 500.0, "decode": 100.0, "compute": 300.0, "encode": 100.0})
    wall = (0.0, 0.2, 0.2, 2.2, 2.2, 2.3)  # encode 0.2 s, request 2.0 s, decode 0.1 s
    times = stage_times(wall, (0.0, 0.2, 2.2, 2.3), header)
    assert times["t_server_queue"] == pytest.approx(0.5)
    assert times["t_comm"] == pytest.approx(2.0 - 0.5 - 0.5)
    assert times["t_total"] == pytest.approx(2.3)
    # a server device scales the server's stages; the queue, a wait, stays in the completion time
    out = {**times, "cpu_server_decode": 0.1, "cpu_server_compute": 0.3, "cpu_server_encode": 0.1}
    Scaler(None, {"decode|raw|mul|10": 2.0, "kernel|mul|10": 2.0, "encode|raw|mul|10": 2.0}).remote(
        out, "mul", 10, "raw"
    )
    assert out["t_total"] == pytest.approx(0.2 + 1.0 + 0.5 + 2 * 0.5 + 0.1)
    assert stage_times(wall, (0.0, 0.2, 2.2, 2.3), "decode;dur=1")["t_server_queue"] is None


def test_rows_carry_the_queue_and_older_rows_read_without_it(tmp_path):
    path = tmp_path / "trials.csv"
    writer = TrialWriter(path)
    row = TrialRecord("mul", 200, "raw", True, run_id="r", trial=1, rate_mbps=20.0, t_total=1.0)
    writer.write(TrialRecord(**{**row.__dict__, "t_server_queue": 0.25}))
    writer.write(row)
    writer.close()
    trials = read_trials(path)
    assert trials.version == FORMAT_VERSION >= 6
    assert [r.t_server_queue for r in trials.records] == [0.25, None]


def test_the_servers_waits_for_the_hosts_cpu_lock_are_reported_and_no_time_of_the_trial(
    tmp_path, monkeypatch
):
    """Replicas on one host: another testbed's stage holds the CPU lock for 50 ms while this request's
    decode asks for it; the server reports the wait (`cpulock`), and the trial's communication and
    completion time exclude it (issue 25's check: it was in communication)."""
    import fcntl
    import os

    from contracts.cpu_lock import CpuLock

    path = str(tmp_path / "cpu.lock")
    monkeypatch.setattr("server.timing.CPU_LOCK", CpuLock(path))
    other = os.open(path, os.O_RDWR | os.O_CREAT)
    fcntl.flock(other, fcntl.LOCK_EX)
    threading.Timer(0.05, lambda: fcntl.flock(other, fcntl.LOCK_UN)).start()
    clock = StageClock()
    with clock.stage("decode"):
        pass
    with clock.stage("compute"):
        pass
    os.close(other)
    assert clock.ms["cpulock"] == pytest.approx(50.0, abs=30.0)
    header = format_server_timing({"decode": 100.0, "compute": 300.0, "encode": 100.0, "cpulock": 400.0})
    times = stage_times((0.0, 0.2, 0.2, 2.2, 2.2, 2.3), (0.0, 0.2, 2.2, 2.3), header)
    assert times["t_comm"] == pytest.approx(2.0 - 0.5 - 0.4) and times["t_total"] == pytest.approx(2.3 - 0.4)
    monkeypatch.setattr("server.timing.CPU_LOCK", CpuLock(None))
    unlocked = StageClock()  # one testbed: no lock, nothing to report
    with unlocked.stage("decode"):
        pass
    assert "cpulock" not in unlocked.ms
