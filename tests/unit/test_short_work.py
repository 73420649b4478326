"""A short stage's CPU time is timed again over repeated runs of its work (issue 44, item 1)."""

from __future__ import annotations

import time

import numpy as np
import pytest

from client.offload import stage_times
from contracts.codecs import get_codec
from contracts.short_work import BLOCKS, BUDGET_S, LONG_S, MAX_RUNS, REPEATS, SHORT_S, per_run_cpu_s
from contracts.stages import RETIME_HEADER, SERVER_RETIME, asks_retime, parse_server_timing
from server.timing import StageClock


class Clock:
    """A CPU clock that each run of the work advances by `per_run` seconds."""

    def __init__(self, per_run: float) -> None:
        self.now, self.per_run, self.runs = 0.0, per_run, 0

    def __call__(self) -> float:
        return self.now

    def work(self) -> None:
        self.runs += 1
        self.now += self.per_run


def test_a_long_run_is_its_own_figure_and_a_short_one_the_fastest_block_of_repeated_runs():
    clock = Clock(5e-6)
    assert per_run_cpu_s(clock.work, LONG_S, clock) == LONG_S and clock.runs == 0  # long: not run again
    # one run said 40 us (a cold run's noise); its work repeated takes 5 us a run
    assert per_run_cpu_s(clock.work, 40e-6, clock) == pytest.approx(5e-6)
    assert clock.runs == round(BUDGET_S / 40e-6)  # enough runs to spend BUDGET_S at the first run's pace
    clock = Clock(1e-9)
    per_run_cpu_s(clock.work, 0.0, clock)  # a run the clock could not see: repeated, but boundedly
    assert clock.runs == MAX_RUNS


def test_a_stage_of_milliseconds_is_the_fastest_of_its_run_and_two_more():
    """A first run that paid for fresh memory (40 ms) leaves the figure: its work again takes 5 ms."""
    clock = Clock(0.005)
    assert per_run_cpu_s(clock.work, 0.04, clock) == pytest.approx(0.005)
    assert clock.runs == REPEATS - 1
    # the first run and the first again both paid (the first's memory still alive), the third did not
    times = iter([0.037, 0.0026])

    def work() -> None:
        clock.now += next(times)

    assert per_run_cpu_s(work, 0.037, clock) == pytest.approx(0.0026)
    assert SHORT_S <= 0.0026 and LONG_S > 0.037


def test_a_slow_first_block_and_an_interrupted_one_leave_the_figure():
    clock = Clock(4e-6)
    # the first block after a wait runs at a third of the pace, the second still slowed; one interrupted:
    # a median of the blocks would keep the second's 6 us
    slow = {0: 3.0, 1: 1.5, 3: 15.0}

    def work() -> None:
        clock.now += clock.per_run * slow.get(clock.runs // (clock.total // BLOCKS), 1.0)
        clock.runs += 1

    clock.total = round(BUDGET_S / 8e-6)
    assert per_run_cpu_s(work, 8e-6, clock) == pytest.approx(4e-6)
    assert clock.runs == clock.total


def test_the_servers_short_stage_reports_its_repeated_runs_and_a_long_one_its_own():
    raw = get_codec("raw")
    result = np.arange(64.0).reshape(8, 8)
    clock = StageClock(retime=True)
    runs = []
    with clock.stage("encode") as stage:
        raw.encode_response(result)
        stage.repeatable(lambda: runs.append(raw.encode_response(result)))
    assert len(runs) >= 1 and stage.again is None  # run again, then dropped with its data
    cpu = parse_server_timing(clock.header(), "cpu")["encode"]
    assert 0 < cpu < SHORT_S  # seconds per run, its repeated runs' mean
    assert parse_server_timing(clock.header())[SERVER_RETIME] > 0  # the time it took, said

    long = StageClock(retime=True)
    with long.stage("compute") as stage:
        spin = time.process_time() + LONG_S
        while time.process_time() < spin:
            pass
        stage.repeatable(lambda: runs.append("again"))
    assert "again" not in runs  # its one run was long enough to time
    assert parse_server_timing(long.header())[SERVER_RETIME] < 0.001  # asked: said, and next to nothing


def test_the_server_times_a_stage_again_only_when_the_request_asks():
    raw = get_codec("raw")
    result = np.arange(64.0).reshape(8, 8)
    runs = []
    for headers, asked in (({}, False), ({RETIME_HEADER: "1"}, True), ({"x-retime": "1"}, True)):
        clock = StageClock(retime=asks_retime(headers))
        with clock.stage("encode") as stage:
            raw.encode_response(result)
            stage.repeatable(lambda: runs.append(1))
        assert bool(runs) is asked and (SERVER_RETIME in parse_server_timing(clock.header())) is asked
        runs.clear()


def test_the_servers_time_timing_again_is_neither_communication_nor_the_trials():
    """The server took 0.3 s over its stages' again-runs: the request's 1 s less that is what the
    network and the stages had, so communication and the completion time leave it out."""
    wall = (0.0, 0.1, 0.1, 1.1, 1.1, 1.2)  # encode 0.1, request 1.0, decode 0.1
    timing = "decode;dur=100;cpu=90, compute;dur=200;cpu=200, encode;dur=100;cpu=80, retime;dur=300"
    times = stage_times(wall, (0.0, 0.1, 0.0, 0.1), timing)
    assert times["t_request"] == pytest.approx(1.0 - 0.3)  # the request as no retiming made it
    assert times["t_comm"] == pytest.approx(times["t_request"] - 0.4)
    assert times["t_total"] == pytest.approx(0.1 + 1.0 - 0.3 + 0.1)
    plain = stage_times(wall, (0.0, 0.1, 0.0, 0.1), timing.rsplit(", ", 1)[0])
    assert plain["t_comm"] == pytest.approx(0.6) and plain["t_total"] == pytest.approx(1.2)


def test_a_marshalling_stage_counts_its_own_threads_cpu_and_a_kernel_the_processs():
    """Another thread's CPU during a stage (a gRPC process's pollers) is no stage's: an encode or decode
    is timed with its thread's clock; a kernel with the process's (BLAS's threads are its own)."""
    import threading

    def spin(seconds: float) -> None:
        end = time.thread_time() + seconds
        while time.thread_time() < end:
            pass

    for name, counted in (("decode", False), ("compute", True)):
        clock = StageClock()
        with clock.stage(name):
            other = threading.Thread(target=spin, args=(0.05,))
            other.start()
            other.join()
        cpu = parse_server_timing(clock.header(), "cpu")[name]
        assert (cpu >= 0.04) is counted, (name, cpu)
