"""A stage's CPU time: the clock it is read from, and a short stage's timed again over repeated runs.

**The clock** (`cpu_clock`). Marshalling runs on the thread that calls it, alone; a kernel may run
on BLAS's threads too. So an encode or decode is timed with the calling thread's CPU clock, a kernel
with the process's: a gRPC process's other threads (its pollers, the previous call's connection
closing) spend CPU while a stage runs that is no stage's, and the process clock counted it (measured,
the fidelity check of 2026-11-27 on 4 testbeds: the Python gRPC server's decode of a 1200x1200
request at 7.5-63 ms of process CPU against 1.4-4.7 ms in its calibration's single-threaded process,
the client's gRPC decode at 0.9-4.4 ms against 0.75).

**Short stages.**
The scaled mode multiplies a stage's CPU time on this host by the device's slowdown for its work.
RAW's stages are microseconds here (measured on the 2-core VM: the client's decode of a 400x400
result 4.5 us, its encode 15 us) and milliseconds on the paper's devices (3.2 and 6.4 ms on
paper-p4), slowdowns of 400-700: one run's CPU time there is the clock's, the interpreter's and
the caches' noise as much as the work's (a trial's single RAW decode came out at up to several
times its warm time), and that noise times 700 put the scaled stages 56-187% above their targets in
the shipped paper run. So a stage whose one run took under `SHORT_S` of CPU is timed again, its work
repeated until about `BUDGET_S` has been spent, and its CPU time is per run: the work's speed on
this host now, which the device's slowdown scales. The repetitions are taken in `BLOCKS` blocks and
the figure is the fastest block's mean per run: the first block after a wait is slower (measured, RAW's
decode of a 500x500 result: 5.0-5.5 us in the first block after 0.2-3 s idle, 3.7-3.9 in the next four;
the smoke run's decodes after a 40 Mbit/s transfer came out 7-9 us where those after 100 Mbit/s took
4.7-4.9), an interruption lands in one block, and such accidents only add CPU time. A budget of
2 ms with the median block left the server's RAW encode of a 700x700 result at 71-127 us over 12
fresh processes (2026-11-27, alone on the 2-core VM) where the same processes' later runs took
68-80: one run of the encode is 70 us, so 2 ms is 5 blocks of 5 runs, the first of them still slow.
With 10 ms and the fastest block: 70-86 us. The calibration times short work the same way
(`client.scaled_calibration`), and the slowdowns follow these runs (`client.scaler`), so the two
agree.

**Stages of milliseconds.** A stage of `SHORT_S` up to `LONG_S` is run `REPEATS - 1` times again and
its figure is the fastest of its `REPEATS` runs, the trial's own first among them. One run of such
work carries whatever happened to that run: the first touch of memory the process had not used (the
Python gRPC server's first decode of a mul 1200 request: 37 ms against 2.6 ms for the same request
later, and its second run too, since the first run's operands are still alive while it allocates:
a median of three kept 37), an interruption, another testbed's burst on the other core (measured
alone: RAW's encode of a 700x700 result, median 101 us over 10 processes, 154 and 173 us in two of 10
with a memory copy running on the other core). Such accidents only add CPU time to a run, never take
any away, so the fastest run is the one with least of them: the work's speed on this host now. A stage
whose runs again came out under `SHORT_S` is a short stage whose first run paid for fresh memory, and
is timed as one, at their pace: in a fresh process (the cgi stack's every request) RAW's encode of a
1200x1200 result took 4.2 ms once and 0.25 ms a run from its sixth or so, and the fastest of its
first three runs came out at 0.34-0.47 ms over 10 processes where the short stages' rule gives
0.24-0.30 (measured alone on the 2-core VM, 2026-11-27); on 4 testbeds such stages had been 10-22%
off their targets either way. Longer
stages are one run: their own length averages over such accidents, and running them again would
cost what the trial's work costs.

**A figure far above its kind's recent runs is taken again** (`expected_s`: this host's recent CPU
seconds for the same work, the reference the device's slowdown divides by). Measured in the
4-testbed check of 2026-11-27: mul 400's kernel in the cgi server came out at 3.05 and 3.50 ms as the
fastest of three runs where its other trials took 1.98-2.08, mul 1200's at 103.7 ms against 55-56,
the client's gRPC decode of a mul 1200 result at 1.67 ms against 0.84; while on the quiet machine a
busy loop, a memory copy, JSON encoding or iperf3 over loopback, beside the stage on its core or on
the other, moved the same work's CPU time by under 5% (mul 400: 2.0-2.1 ms, 186 of 186 within 17%).
Such a spell passes: a figure more than `OUTLIER` above the reference is taken again, up to
`RETRIES` times, and the fastest stands, which a replay of that check's CPU times put at 27 of 98
trials flagged instead of 75 (and the smoke run's 7 of 42 at none). Only slow figures: a run cannot
be faster than the work, and a reference above today's speed is the window's to follow
(`client.scaler`). A figure within `OUTLIER` costs nothing more.

The stage's real run is kept where it was: its result is the one used and its wall time is the
trial's; only the CPU time the slowdown multiplies is the repeated runs'. The repeated runs take
time in the middle of the request on the server, which reports it (`retime` in `Server-Timing`) so
that communication and the completion time exclude it, and runs them only when the request asks
(`RETIME_HEADER`: a scaled server device's trials and calibration).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from contextlib import nullcontext
from dataclasses import dataclass, field

from contracts.other_cores import HOLD_UNDER_S, OtherCores, single_threaded_blas

SHORT_S = 0.002  # one run under this much CPU is timed again over repeated runs
BUDGET_S = 0.01  # the CPU the repeated runs of such a stage spend, about
LONG_S = 0.1  # one run under this much (and SHORT_S or more) is run again, the fastest of REPEATS runs
REPEATS = 3  # the runs of a stage of milliseconds the fastest is taken of
MAX_RUNS = 10_000  # a bound on the repetitions, whatever the clock said of one run
BLOCKS = 5  # the repetitions' blocks, of which the fastest is the figure
OUTLIER = 0.05  # a figure this far above its expected CPU seconds is taken again: half the tolerance
RETRIES = 2  # at most this many more figures of a stage so taken
KERNEL = "kernel"  # the kind of work timed with the process's clock (BLAS's threads are its)


@dataclass(frozen=True)
class Expected:
    """A trial's expected CPU seconds on this host per kind of work (`encode`, `decode`, `kernel`):
    the client's stages' and the server's, the references its devices' slowdowns divide by now
    (`client.scaler.Scaler.expected`). Empty: nothing is taken again for being slow."""

    client: Mapping[str, float] = field(default_factory=dict)
    server: Mapping[str, float] = field(default_factory=dict)


NOTHING = Expected()


def cpu_clock(kind: str) -> Callable[[], float]:
    """The CPU clock a stage of `kind` (kernel, encode, decode) is timed with: the process's for a
    kernel, the calling thread's for marshalling."""
    return time.process_time if kind == KERNEL else time.thread_time


def per_run_cpu_s(
    work: Callable[[], object],
    one_run_s: float,
    clock=time.process_time,
    expected_s: float | None = None,
) -> float:
    """The CPU seconds of one run of `work`: `one_run_s` (its run's) when that is `LONG_S` or more;
    from `SHORT_S`, the fastest of it and `REPEATS - 1` runs again unless that is under `SHORT_S`;
    under `SHORT_S`, the fastest of
    `BLOCKS` blocks' mean per run, enough runs in all to spend about `BUDGET_S` at the first run's
    pace. With `expected_s` (this host's recent CPU seconds for the work), a figure more than
    `OUTLIER` above it is taken again, up to `RETRIES` times, and the fastest figure stands."""

    def again() -> float:
        start = clock()
        work()
        return _figure(work, clock() - start, clock)

    return again_while_slow(_figure(work, one_run_s, clock), again, expected_s)


def again_while_slow(figure_s: float, again: Callable[[], float], expected_s: float | None) -> float:
    """`figure_s`, or while it is more than `OUTLIER` above `expected_s`, the fastest of it and up to
    `RETRIES` more figures from `again` (each the work taken again, timed by the same rule)."""
    for _ in range(RETRIES):
        if expected_s is None or figure_s <= expected_s * (1 + OUTLIER):
            break
        figure_s = min(figure_s, again())
    return figure_s


def _figure(work: Callable[[], object], one_run_s: float, clock) -> float:
    """One figure of `work`'s CPU seconds per run by the rule of its length, from a run of `one_run_s`."""
    if one_run_s >= LONG_S:
        return one_run_s
    others = OtherCores.from_env()
    if clock is time.process_time and not single_threaded_blas():  # a kernel with BLAS's threads:
        others = OtherCores(None)  # they would wait on the held cores, and the process's clock counts it
    if one_run_s >= SHORT_S:
        runs = [one_run_s]
        with others.held() if one_run_s < HOLD_UNDER_S else nullcontext():
            for _ in range(REPEATS - 1):
                start = clock()
                work()
                runs.append(clock() - start)
        if min(runs) >= SHORT_S:
            return min(runs)
        one_run_s = min(runs)  # short once its memory is warm: timed as a short stage, at that pace
    runs = min(MAX_RUNS, math.ceil(BUDGET_S / max(one_run_s, BUDGET_S / MAX_RUNS)))
    per_block = max(1, runs // BLOCKS)
    blocks = []
    with others.held():
        for _ in range(BLOCKS):
            start = clock()
            for _ in range(per_block):
                work()
            blocks.append((clock() - start) / per_block)
    return min(blocks)
