"""The spinners that hold the host's other cores while a replica's short stage is timed.

`contracts.other_cores` says why: testbeds on one host time their short stages with the rest of the
host still, so the sweep starts one spinner per core for its session when several of its testbeds
share this machine's CPU lock, and ends them with it. A spinner dies with the sweep (a parent-death
signal), ends by itself once its FIFO is gone, and `testbed down` removes the FIFOs with the lock
(`testbed.backends.replicas.remove_cpu_lock`).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from contracts.other_cores import fifo_path
from testbed.guest_run import die_with_parent, stop

if TYPE_CHECKING:
    from contracts.manifest import Session
    from testbed.sweep.testbeds import Testbed

READY_S = 5.0  # a spinner makes its FIFO within this long, or the sweep goes on without it


@contextmanager
def holding_spinners(lock_path: str | None, session: Session | None = None) -> Iterator[list[int]]:
    """One spinner per core of this host for the CPU lock at `lock_path` for the block (none without
    a lock: one testbed here); it gets the cores whose spinner is ready, and `session` records them
    (`held_cores`: a run's figures depend on whether its short stages were timed so)."""
    if lock_path is None:
        if session is not None:
            session.held_cores = []
        yield []
        return
    Path(lock_path).parent.mkdir(parents=True, exist_ok=True)
    cores = list(range(os.cpu_count() or 1))
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "contracts.other_cores", lock_path, str(core)],
            preexec_fn=die_with_parent,
            stdin=subprocess.DEVNULL,
        )
        for core in cores
    ]
    try:
        ready = _ready(lock_path, cores, procs)
        if session is not None:
            session.held_cores = ready
        yield ready
    finally:
        for core in cores:
            Path(fifo_path(lock_path, core)).unlink(missing_ok=True)
        for proc in procs:
            stop(proc)


def _ready(lock_path: str, cores: list[int], procs: list[subprocess.Popen]) -> list[int]:
    deadline = time.monotonic() + READY_S
    while time.monotonic() < deadline:
        ready = [c for c in cores if Path(fifo_path(lock_path, c)).exists()]
        if len(ready) == len(cores) or any(p.poll() is not None for p in procs):
            return ready
        time.sleep(0.02)
    return [c for c in cores if Path(fifo_path(lock_path, c)).exists()]


def shared_lock(testbeds: Sequence[Testbed]) -> str | None:
    """The CPU lock the sweep's testbeds on this machine share (replicas), or None (one testbed here)."""
    locks = {tb.lab.inv.cpu_lock for tb in testbeds if tb.lab.inv.cpu_lock}
    return locks.pop() if len(locks) == 1 and len(testbeds) > 1 else None
