"""How steady this host's speed is: probes of one fixed piece of work, timed by the thread's CPU clock.

The scaled mode multiplies a stage's CPU time on this host by a slowdown calibrated on the same host,
so it assumes the host's speed holds from one run of a work to the next. Where it does not, no rule
of the emulation can put a trial's stage within its tolerance, and the run should say so rather than
leave a researcher to find half the trials flagged. Measured on the 2-core VM (2026-11-28, alone, no
testbed up): a Python loop that takes 1.9 ms took 1.6-1.9 times that in 27-90% of its runs, in
spells of a few runs to about a second, CPU time equal to wall time (so not preemption: the physical
core ran slower, as under another tenant's hyperthread), the same with the other core idle or busy;
on that day the 4-testbed fidelity check flagged 79% of its trials, where it had flagged 11.5% on a
day the same probe would have found steady.

The calibration probes its host before and after its work (`PASS_S` each) and records the result,
a `Steadiness`, beside its rows; the sweep says when a host is unsteady and the report's fidelity
verdict has a row for it. The probe is the interpreter's own work (what marshalling is made of), a
fixed number of iterations, so its fastest figure also says how fast the host's interpreter is.

A calibration's probes cover the seconds around it; a sweep's trials run for minutes to hours after
it, and the host's spells come and go meanwhile. So a sweep whose testbeds all run on this machine
also records the host's speed throughout (`record`, `python -m contracts.steadiness FILE`: a probe
every `RECORD_EVERY_S`, to `HOST_SPEED_FILE` in the run's directory), and the analysis says how
many flagged trials ran while the host was slow (`analysis.host_speed`).
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

PROBE_ITERATIONS = 50_000  # one probe's loop: about 2 ms of CPU on the 2-core VM's fast state
PASS_S = 2.0  # each pass of probes, before and after the calibration's work (wall seconds)
UNSTEADY_SHARE = 0.05  # more slow probes than this: a stage's figures miss their tolerance as often
# a sweep's record of the host's speed: a probe this often (2 ms of CPU in 250 ms: under 1% of a core,
# and the host's spells, measured at a second or so, each seen by several probes)
RECORD_EVERY_S = 0.25
HOST_SPEED_FILE = "host_speed.csv"  # in a run's directory: `at,probe_ms` (Unix seconds, CPU ms)
HOST_SPEED_HEADER = "at,probe_ms"


@dataclass(frozen=True, slots=True, kw_only=True)
class Steadiness:
    """A host's speed over its probes: how many, the fastest, and the share more than `slow_pct`
    above the fastest (the device tolerance's percent: a stage's run that slow misses its target)."""

    probes: int
    fastest_ms: float
    median_ratio: float  # the median probe over the fastest
    worst_ratio: float  # the slowest probe over the fastest
    slow_pct: float  # a probe more than this percent above the fastest is slow
    slow_share: float  # the share of such probes, 0..1

    @classmethod
    def of(cls, figures_s: Sequence[float], slow_pct: float) -> Steadiness:
        """The summary of probes' CPU seconds."""
        if not figures_s:
            raise ValueError("no probes")
        fastest = min(figures_s)
        above = fastest * (1 + slow_pct / 100)
        return cls(
            probes=len(figures_s),
            fastest_ms=fastest * 1e3,
            median_ratio=statistics.median(figures_s) / fastest,
            worst_ratio=max(figures_s) / fastest,
            slow_pct=slow_pct,
            slow_share=sum(f > above for f in figures_s) / len(figures_s),
        )

    @property
    def unsteady(self) -> bool:
        """More than `UNSTEADY_SHARE` of the probes slow."""
        return self.slow_share > UNSTEADY_SHARE

    def describe(self) -> str:
        """One line: 'speed unsteady: 31% of 1000 probes of 1.9 ms more than 10% slower than the fastest
        (median 1.02x, worst 1.85x)'."""
        state = "unsteady" if self.unsteady else "steady"
        return (
            f"speed {state}: {self.slow_share:.0%} of {self.probes} probes of {self.fastest_ms:.2g} ms "
            f"more than {self.slow_pct:g}% slower than the fastest "
            f"(median {self.median_ratio:.2f}x, worst {self.worst_ratio:.2f}x)"
        )


def probe() -> float:
    """One probe: the thread's CPU seconds for `PROBE_ITERATIONS` of an interpreter loop."""
    start = time.thread_time()
    total = 0
    for i in range(PROBE_ITERATIONS):
        total += i * i
    return time.thread_time() - start


def probe_pass(duration_s: float = PASS_S, one: Callable[[], float] = probe) -> list[float]:
    """Probes one after another for `duration_s` of wall time (at least one)."""
    end = time.monotonic() + duration_s
    figures = [one()]
    while time.monotonic() < end:
        figures.append(one())
    return figures


def record(
    path: Path,
    every_s: float = RECORD_EVERY_S,
    one: Callable[[], float] = probe,
    clock: Callable[[], float] = time.time,
    sleep: Callable[[float], object] = time.sleep,
    probes: int | None = None,
) -> None:
    """Append a probe's time to `path` every `every_s` (a line `at,probe_ms`, flushed one by one, the
    header first in a new file), until `probes` have been taken (None: until the process is ended).
    A file system that fills up ends the record quietly: it describes the trials, it is none of them,
    and the sweep says what to do about the space itself."""
    try:
        size = _whole_lines(path) if path.is_file() else 0
        with path.open("a", encoding="utf-8") as out:
            if size == 0:
                out.write(HOST_SPEED_HEADER + "\n")
            taken = 0
            while probes is None or taken < probes:
                at, figure = clock(), one()
                out.write(f"{at:.3f},{figure * 1e3:.4f}\n")
                out.flush()
                taken += 1
                sleep(every_s)
    except OSError:
        return


def _whole_lines(path: Path) -> int:
    """Cut off a line an earlier recorder was ended in the middle of (its figure may be cut short
    too); the file's size after."""
    with path.open("r+b") as f:
        size = f.seek(0, os.SEEK_END)
        f.seek(max(0, size - 4096))
        tail = f.read()
        whole = size - len(tail) + tail.rfind(b"\n") + 1
        if whole != size:
            f.truncate(whole)
        return whole


if __name__ == "__main__":  # `python -m contracts.steadiness FILE`: the sweep's recorder (niced)
    os.nice(19)  # a probe waits for an idle moment rather than delay a trial; its CPU time is the same
    record(Path(sys.argv[1]))
