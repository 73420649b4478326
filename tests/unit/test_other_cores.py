"""The host's other cores held by spinners while a replica's short stage is timed (issue 44)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import pytest

import contracts.other_cores as other_cores
import contracts.short_work as short_work
from contracts.cpu_lock import unpreempted_thread
from contracts.manifest import Session
from contracts.other_cores import HOLD_UNDER_S, IDLE_CHECK_S, MAX_HOLD_S, OtherCores, current_core, fifo_path
from contracts.short_work import BUDGET_S, SHORT_S, per_run_cpu_s
from testbed.backends import replicas
from testbed.sweep.spinners import holding_spinners, shared_lock


def cpu_ticks(pid: int) -> int:
    """A process's user and system CPU time so far, in clock ticks (`/proc/<pid>/stat`)."""
    stat = Path(f"/proc/{pid}/stat").read_bytes()
    fields = stat[stat.rindex(b")") + 2 :].split()
    return int(fields[11]) + int(fields[12])


def test_a_thread_that_does_not_hold_its_core_holds_no_other_core(tmp_path):
    """A paced stage, a stage under a quota, or no lock: nothing is sent, the affinity is left alone."""
    before = os.sched_getaffinity(0)
    with OtherCores(str(tmp_path / "cpu.lock")).held() as held:
        assert held == [] and os.sched_getaffinity(0) == before
    with OtherCores(None).held() as held:
        assert held == []


def test_without_spinners_a_hold_does_nothing_and_the_thread_is_let_go(tmp_path, monkeypatch):
    monkeypatch.setattr(other_cores, "holding_core", lambda: True)
    before = os.sched_getaffinity(0)
    with OtherCores(str(tmp_path / "cpu.lock")).held() as held:
        assert held == [] and os.sched_getaffinity(0) == {current_core()}  # pinned for the block
    assert os.sched_getaffinity(0) == before


@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="one core: no other core to hold")
def test_a_sweeps_spinners_hold_the_other_cores_for_the_block_only_and_end_with_it(tmp_path, monkeypatch):
    """Real spinner processes: each spends CPU while a holder holds, none after it lets go; they end
    and their FIFOs go with the block."""
    lock = str(tmp_path / "cpu.lock")
    monkeypatch.setattr(other_cores, "holding_core", lambda: True)
    session = Session("now", 0, "running")
    with holding_spinners(lock, session) as ready:
        assert ready == list(range(os.cpu_count())) == session.held_cores  # the run records them
        spinners = _spinner_pids(lock)
        with OtherCores(lock).held() as held:
            mine = current_core()
            spun = {core: cpu_ticks(spinners[core]) for core in held}
            time.sleep(0.1)  # the holder sleeps; its other cores' spinners spin
            spun = {core: cpu_ticks(spinners[core]) - spun[core] for core in held}
        assert sorted(held) == [c for c in range(os.cpu_count()) if c != mine]
        assert all(ticks > 0 for ticks in spun.values()), spun
        time.sleep(0.05)
        idle = {core: cpu_ticks(spinners[core]) for core in held}
        time.sleep(0.2)
        assert {core: cpu_ticks(spinners[core]) for core in held} == idle  # let go: asleep
    assert not list(tmp_path.glob("cpu.lock.core*"))
    for pid in spinners.values():
        assert not Path(f"/proc/{pid}").exists() or b"zombie" in Path(f"/proc/{pid}/status").read_bytes()


def _spinner_pids(lock: str) -> dict[int, int]:
    """Core -> the pid of its spinner for `lock` (from their command lines)."""
    found = {}
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"contracts.other_cores" in argv and lock.encode() in argv:
            found[int(argv[argv.index(lock.encode()) + 1])] = int(proc.name)
    return found


def test_a_spinner_lets_go_by_itself_when_its_holder_never_does(tmp_path):
    """A holder that died mid-hold: its spinner spins `MAX_HOLD_S`, then sleeps; and it ends when its
    FIFO is removed."""
    lock = str(tmp_path / "cpu.lock")
    proc = subprocess.Popen([sys.executable, "-m", "contracts.other_cores", lock, "0"])
    try:
        deadline = time.monotonic() + 5
        while not Path(fifo_path(lock, 0)).exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        fd = os.open(fifo_path(lock, 0), os.O_WRONLY | os.O_NONBLOCK)
        os.write(fd, other_cores.HOLD)
        os.close(fd)
        time.sleep(MAX_HOLD_S + 0.1)
        asleep = cpu_ticks(proc.pid)
        time.sleep(0.2)
        assert cpu_ticks(proc.pid) == asleep
        Path(fifo_path(lock, 0)).unlink()
        assert proc.wait(timeout=IDLE_CHECK_S + 3) == 0
    finally:
        proc.kill()


class Recorder:
    """Stands for `OtherCores`: counts the holds and the work run inside them."""

    def __init__(self) -> None:
        self.holds, self.inside = 0, False

    @contextmanager
    def held(self):
        self.holds += 1
        self.inside = True
        try:
            yield [1]
        finally:
            self.inside = False


class Clock:
    def __init__(self, per_run: float, recorder: Recorder) -> None:
        self.now, self.per_run, self.recorder, self.held_runs = 0.0, per_run, recorder, 0

    def __call__(self) -> float:
        return self.now

    def work(self) -> None:
        self.now += self.per_run
        self.held_runs += self.recorder.inside


@pytest.fixture
def recorder(monkeypatch) -> Recorder:
    rec = Recorder()
    monkeypatch.setattr(short_work.OtherCores, "from_env", classmethod(lambda cls: rec))
    return rec


def test_a_short_stages_repeated_runs_are_timed_with_the_other_cores_held(recorder):
    clock = Clock(50e-6, recorder)
    per_run_cpu_s(clock.work, 50e-6, clock)
    assert recorder.holds == 1 and clock.held_runs == round(BUDGET_S / 50e-6)


def test_a_stage_of_milliseconds_holds_them_only_while_its_runs_are_short_enough(recorder):
    clock = Clock(0.004, recorder)
    per_run_cpu_s(clock.work, 0.004, clock)  # two more runs of 4 ms: 8 ms of the others' time
    assert recorder.holds == 1 and clock.held_runs == 2
    clock = Clock(HOLD_UNDER_S * 2, recorder)
    per_run_cpu_s(clock.work, HOLD_UNDER_S * 2, clock)
    assert recorder.holds == 1 and clock.held_runs == 0
    assert SHORT_S < 0.004 < HOLD_UNDER_S


def test_a_kernel_on_several_blas_threads_holds_nothing(recorder, monkeypatch):
    """BLAS's other threads would wait for the held cores, and the process's clock would count it."""
    monkeypatch.setenv("OPENBLAS_NUM_THREADS", "2")
    per_run_cpu_s(lambda: None, 50e-6, time.process_time)
    assert recorder.holds == 0
    monkeypatch.setenv("OPENBLAS_NUM_THREADS", "1")
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    per_run_cpu_s(lambda: None, 50e-6, time.process_time)
    assert recorder.holds == 1


def test_down_removes_a_crashed_sweeps_spinner_fifos(tmp_path, monkeypatch):
    monkeypatch.setattr(replicas, "CPU_LOCK", str(tmp_path / "cpu.lock"))
    for core in (0, 1):
        os.mkfifo(fifo_path(replicas.CPU_LOCK, core))
    removed = replicas.remove_cpu_lock(tmp_path)
    assert len([r for r in removed if "spinner FIFO" in r]) == 2 and not list(tmp_path.iterdir())


def test_one_testbed_here_holds_no_core_and_its_session_says_so():
    session = Session("now", 0, "running")
    with holding_spinners(None, session) as ready:
        assert ready == [] == session.held_cores


def test_spinners_are_for_testbeds_that_share_this_machines_lock():
    class Inv:
        def __init__(self, lock):
            self.cpu_lock = lock

    class Tb:
        def __init__(self, lock):
            self.lab = type("Lab", (), {"inv": Inv(lock)})()

    assert shared_lock([Tb("/run/testbed/cpu.lock"), Tb("/run/testbed/cpu.lock")]) == "/run/testbed/cpu.lock"
    assert shared_lock([Tb(None)]) is None and shared_lock([Tb(None), Tb(None)]) is None


def test_holding_the_core_is_what_lets_a_thread_hold_the_others():
    with unpreempted_thread(False):
        assert not other_cores.holding_core()
