"""What the sweep itself costs: changing the shaped rate between cells, and each trial's bookkeeping.

- Rate change: `lab.set_rate`, as the sweep calls it between cells, alternating 40 and 100 Mbit/s;
  median in ms, through the appliance's resident agent (the first call, which starts the agent, is
  not counted). Target: under 10 ms.
- Rate change over SSH: the same, with the appliance reached through the SSH backend
  (`benchmarks.ssh_appliance`: `sshd -i` in the appliance's namespace); the SSH protocol and its
  channel are the backend's own, only the network hop is a pipe. Target: under 100 ms.
- Bookkeeping: per trial, the worker's JSON round trip (request line to the client host, answer line
  back, parsed: the time `WorkerLink.run` takes beyond the trial's own completion time) plus appending
  and flushing its row with the sweep's `TrialFile`. Against a 400x400 raw trial at 100 Mbit/s;
  target: under 1% of the trial's completion time.
- Shaping check: per trial, what the sweep's check of every shaped trial adds to it
  (`testbed.sweep.trials.TrialCheck`, run as the sweep runs it: its switch watched in a thread while it
  runs, then the appliance's classes read back through its agent, with its switch's daemons in the
  same request), against the same trial; target: under 2%. It is what keeps a trial that ran
  unshaped, or through a dead switch, out of the results.

The per-trial figures are medians over CHECKED_TRIALS trials: the reading after a trial finds the
appliance's agent idle (about twice its cost back to back) and comes out one of two ways (2026-11-27,
2 CPUs: about 1.7 ms, or 3.5-5 ms a third of the time), so a median of three could land on either.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from benchmarks.common import Row, median, skipped
from benchmarks.session import BENCH_EXPERIMENT, BenchError, run_ok, trial
from benchmarks.ssh_appliance import appliance_over_ssh
from contracts.errors import UserError
from testbed.backends.lab import Lab
from testbed.link.repairs import shaping_guard
from testbed.run_files import TrialFile
from testbed.sweep.bookkeeping import trial_row
from testbed.sweep.trials import TrialCheck
from testbed.sweep.worker_link import WorkerLink

SECTION = "orchestration"
RATES_MBPS = (40.0, 100.0)
RATE_TARGET = ("<", 10.0)
SSH_RATE_TARGET = ("<", 100.0)
BOOKKEEPING_SIZE = 400
BOOKKEEPING_RATE = 100.0
BOOKKEEPING_TARGET = ("<", 1.0)
RATE_CHANGE = "rate change (set_rate)"
SSH_RATE_CHANGE = "rate change over SSH (set_rate)"
BOOKKEEPING = "bookkeeping / trial"
SHAPING_CHECK = "shaping check / trial"
SHAPING_CHECK_TARGET = ("<", 2.0)
CHECKED_TRIALS = {True: 9, False: 21}  # quick or not: the trials the per-trial figures are medians of


def cases(quick: bool) -> list[tuple[str, str, str, tuple | None]]:
    return [
        (RATE_CHANGE, "40 <-> 100 Mbit/s", "ms", RATE_TARGET),
        (SSH_RATE_CHANGE, "40 <-> 100 Mbit/s, sshd -i in the appliance netns", "ms", SSH_RATE_TARGET),
        (BOOKKEEPING, f"raw mul {BOOKKEEPING_SIZE} @ {BOOKKEEPING_RATE:g} Mbit/s", "%", BOOKKEEPING_TARGET),
        (
            SHAPING_CHECK,
            f"raw mul {BOOKKEEPING_SIZE} @ {BOOKKEEPING_RATE:g} Mbit/s",
            "%",
            SHAPING_CHECK_TARGET,
        ),
    ]


def rate_changes(lab: Lab, n: int, which: int = 0) -> Row:
    """`which`: the case (the embedded lab's, or the one over SSH)."""
    (figure, case, unit, target) = cases(False)[which]
    lab.set_rate(int(RATES_MBPS[-1] * 1e6))  # the agent's start is the command's, once, not a change's
    times = []
    for i in range(n):
        rate = RATES_MBPS[i % len(RATES_MBPS)]
        start = time.perf_counter()
        lab.set_rate(int(rate * 1e6))
        times.append(time.perf_counter() - start)
    ms = [t * 1e3 for t in times]
    return Row(
        SECTION,
        figure,
        case,
        median(ms),
        unit,
        target,
        note=f"median of {n}, max {max(ms):.1f} ms",
        details={"n": n, "max_ms": max(ms)},
    )


def ssh_rate_changes(lab: Lab, n: int) -> Row:
    with appliance_over_ssh(lab) as over_ssh:
        return rate_changes(over_ssh, n, which=1)


def bookkeeping(lab: Lab, worker: WorkerLink, n: int) -> list[Row]:
    """The sweep's own cost per trial: its bookkeeping, and the check of what the trial ran through
    (its own row: a measurement-validity check, not bookkeeping, made by the sweep's own code)."""
    (figure, case, unit, target) = cases(False)[2]
    (check_figure, _, _, check_target) = cases(False)[3]
    lab.set_rate(int(BOOKKEEPING_RATE * 1e6))
    run_ok(worker, trial(0, BOOKKEEPING_SIZE, BOOKKEEPING_RATE))  # warm-up
    round_trips, checks, writes, totals = [], [], [], []
    with tempfile.TemporaryDirectory(prefix="bench-bookkeeping-") as tmp:
        check = TrialCheck(lab, BENCH_EXPERIMENT, Path(tmp), shaping_guard(lab, BOOKKEEPING_RATE))
        writer = TrialFile(Path(tmp) / "trials.csv")  # the sweep's own writer
        try:
            for i in range(n):
                t = trial(i, BOOKKEEPING_SIZE, BOOKKEEPING_RATE)
                start = time.perf_counter()
                done = check.run(worker, t)
                took, worker, result = time.perf_counter() - start, done.worker, done.result
                if not done.kept:
                    raise BenchError(f"a bookkeeping trial failed or the testbed broke: {result.error}")
                round_trips.append(took - done.check_s - result.t_total)
                checks.append(done.check_s)
                start = time.perf_counter()
                writer.write(trial_row("bench", t, result))
                writes.append(time.perf_counter() - start)
                totals.append(result.t_total)
        finally:
            writer.close()
    cost, trial_ms = median(round_trips) + median(writes), median(totals) * 1e3
    check_ms = median(checks) * 1e3
    return [
        Row(
            SECTION,
            figure,
            case,
            100 * cost / median(totals),
            unit,
            target,
            note=f"{cost * 1e3:.3f} ms (worker round trip {median(round_trips) * 1e3:.3f} ms, row "
            f"{median(writes) * 1e3:.3f} ms) per {trial_ms:.0f} ms trial (median of {n})",
            details={
                "n": n,
                "bookkeeping_ms": cost * 1e3,
                "round_trip_ms": median(round_trips) * 1e3,
                "row_write_ms": median(writes) * 1e3,
                "trial_ms": trial_ms,
            },
        ),
        Row(
            SECTION,
            check_figure,
            case,
            100 * check_ms / trial_ms,
            unit,
            check_target,
            note=f"{check_ms:.3f} ms (the switch watched while the trial ran, then the appliance's "
            f"classes and daemons read back through its agent; max {max(checks) * 1e3:.3f} ms) per "
            f"{trial_ms:.0f} ms trial (median of {n})",
            details={"n": n, "shaping_check_ms": check_ms, "max_ms": max(checks) * 1e3, "trial_ms": trial_ms},
        ),
    ]


def run(lab: Lab, worker: WorkerLink, quick: bool = False, progress: Callable = print) -> list[Row]:
    rows = []
    changes = 10 if quick else 30
    progress("orchestration: rate changes")
    rows.append(rate_changes(lab, changes))
    progress("orchestration: rate changes over SSH")
    try:
        rows.append(ssh_rate_changes(lab, changes))
    except (BenchError, UserError) as exc:  # the SSH stand-in could not be set up: the rest goes on
        figure, case, unit, target = cases(quick)[1]
        rows.append(skipped(SECTION, figure, case, unit, str(exc), target))
    n = CHECKED_TRIALS[quick]
    progress(f"orchestration: bookkeeping of {n} raw mul {BOOKKEEPING_SIZE} trials")
    try:
        rows += bookkeeping(lab, worker, n)
    except BenchError as exc:
        rows += [
            skipped(SECTION, figure, case, unit, str(exc), target)
            for figure, case, unit, target in cases(quick)[2:]
        ]
    return rows
