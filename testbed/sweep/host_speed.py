"""The host's speed through a sweep: a recorder of probes beside the trials (`contracts.steadiness`).

A calibration probes its host for the seconds around it; the trials then run for minutes or hours,
and on a shared machine the host's speed comes and goes in spells meanwhile (measured on the 2-core
VM, 2026-11-28: the same work 1.6-1.9x slower for a second or longer, 0-98% of the time from one
minute to the next). So while a sweep's testbeds all run on this machine, a niced process probes it
every `contracts.steadiness.RECORD_EVERY_S` into the run's `host_speed.csv` (appended: a resumed
sweep adds its sessions'), and the analysis says which trials ran while it was slow
(`analysis.host_speed`). Over SSH the trials run on other machines, which this one's probes would
not describe: nothing is recorded. The recorder dies with the sweep (a parent-death signal).
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from contracts.hosts import Backend
from contracts.steadiness import HOST_SPEED_FILE
from testbed.guest_run import die_with_parent, stop

if TYPE_CHECKING:
    from testbed.sweep.testbeds import Testbed


def recorder_argv(run_dir: Path) -> list[str]:
    """The recorder's command: probes appended to the run's `host_speed.csv` until it is ended."""
    return [sys.executable, "-m", "contracts.steadiness", str(run_dir / HOST_SPEED_FILE)]


@contextmanager
def recording_host_speed(run_dir: Path, testbeds: Sequence[Testbed]) -> Iterator[bool]:
    """The recorder running for the block where every testbed is on this machine (netns); whether it
    runs."""
    if not testbeds or any(tb.lab.inv.backend != Backend.NETNS for tb in testbeds):
        yield False
        return
    proc = subprocess.Popen(
        recorder_argv(run_dir),
        preexec_fn=die_with_parent,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
    )
    try:
        yield True
    finally:
        stop(proc)
