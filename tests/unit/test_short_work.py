"""A short stage's CPU time is timed again over repeated runs of its work (issue 44, item 1)."""

from __future__ import annotations

import time

import numpy as np
import pytest

from contracts.codecs import get_codec
from contracts.short_work import BLOCKS, MAX_RUNS, SHORT_S, per_run_cpu_s
from contracts.stages import parse_server_timing
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


def test_a_long_run_is_its_own_figure_and_a_short_one_the_median_block_of_repeated_runs():
    clock = Clock(5e-6)
    assert per_run_cpu_s(clock.work, 0.01, clock) == 0.01 and clock.runs == 0  # long: not run again
    # one run said 40 us (a cold run's noise); its work repeated takes 5 us a run
    assert per_run_cpu_s(clock.work, 40e-6, clock) == pytest.approx(5e-6)
    assert clock.runs == round(SHORT_S / 40e-6)  # enough runs to spend SHORT_S at the first run's pace
    clock = Clock(1e-9)
    per_run_cpu_s(clock.work, 0.0, clock)  # a run the clock could not see: repeated, but boundedly
    assert clock.runs == MAX_RUNS


def test_a_slow_first_block_and_an_interrupted_one_leave_the_figure():
    clock = Clock(4e-6)
    slow = {0: 3.0, 3: 15.0}  # the first block after a wait runs at a third of the pace; one interrupted

    def work() -> None:
        clock.now += clock.per_run * slow.get(clock.runs // (clock.total // BLOCKS), 1.0)
        clock.runs += 1

    clock.total = round(SHORT_S / 8e-6)
    assert per_run_cpu_s(work, 8e-6, clock) == pytest.approx(4e-6)
    assert clock.runs == clock.total


def test_the_servers_short_stage_reports_its_repeated_runs_and_a_long_one_its_own():
    raw = get_codec("raw")
    result = np.arange(64.0).reshape(8, 8)
    clock = StageClock()
    runs = []
    with clock.stage("encode") as stage:
        raw.encode_response(result)
        stage.repeatable(lambda: runs.append(raw.encode_response(result)))
    assert len(runs) >= 1 and stage.again is None  # run again, then dropped with its data
    cpu = parse_server_timing(clock.header(), "cpu")["encode"]
    assert 0 < cpu < SHORT_S  # seconds per run, its repeated runs' mean

    long = StageClock()
    with long.stage("compute") as stage:
        spin = time.process_time() + SHORT_S
        while time.process_time() < spin:
            pass
        stage.repeatable(lambda: runs.append("again"))
    assert "again" not in runs  # its one run was long enough to time


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
