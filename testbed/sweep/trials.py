"""A trial and its checks: run one through the client's worker (bringing back what died), check
what it ran through (the shaping, the switch: `TrialCheck`, the one check of every shaped trial)
and repair it, warm a worker up, shape and validate a rate; and the cells of a plan that ended
without a usable trial. The sweep and the task stream both run their trials through these."""

from __future__ import annotations

import json
import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from contracts.run import TrialRecord
from contracts.stages import GRPC, offload_label
from contracts.worker_api import TrialResult
from testbed.backends.lab import Lab
from testbed.experiment import Experiment
from testbed.link.guard import ShapingGuard, SwitchWatch
from testbed.link.repairs import (
    heal,
    not_kept,
    repair_shaping,
    shape_and_validate,
    shaping_guard,
)
from testbed.run_files import ManifestFile
from testbed.sweep.plan import Trial
from testbed.sweep.worker_link import WorkerDied, WorkerLink

log = logging.getLogger("testbed.sweep")


def cell_label(t: Trial) -> str:
    where = "local" if t.link is None else f"@ {t.link.label()} {offload_label(t.method, t.server)}"
    return f"{t.op} {t.size} {where}"


def run_trial(
    lab: Lab, exp: Experiment, worker: WorkerLink, run_dir: Path, t: Trial
) -> tuple[TrialResult, WorkerLink]:
    """One trial; on failure, bring back whatever died (worker, server) so the next trial can run."""
    try:
        result = worker.run(t)
    except (WorkerDied, TimeoutError, json.JSONDecodeError) as exc:
        result = TrialResult(ok=False, error=f"{type(exc).__name__}: {exc}")
        log.warning("trial %d: %s; restarting the client worker", t.trial, exc)
        worker = restarted(lab, exp, worker)
    if not result.ok:
        log.warning("trial %d (%s) failed: %s", t.trial, cell_label(t), result.error)
    return result, worker


def restarted(lab: Lab, exp: Experiment, worker: WorkerLink) -> WorkerLink:
    """A new worker in place of one that died, hung or was killed (on the same host, emulating the same)."""
    worker.proc.kill()
    worker.close()
    return WorkerLink(lab, exp, worker.stderr_path, worker.calibration, worker.role)


@dataclass
class Checked:
    """A shaped trial, run and checked: its result (failed, saying why, when what it ran through was
    wrong), its worker (a new one if it had to be restarted), what was wrong with the shaping and
    with the switch (empty: nothing), the seconds the check added to the trial (watching the
    switch while it ran, the reading after it: what the bench's shaping check figure is), and, when
    it is a second attempt (`run_checked`), what was repaired after the first failed (its row's
    `repair`; None: it is the first)."""

    result: TrialResult
    worker: WorkerLink
    wrong: str = ""
    switch: list[str] = field(default_factory=list)
    check_s: float = 0.0
    repair: str | None = None

    @property
    def kept(self) -> bool:
        return self.result.ok and not self.wrong and not self.switch


class TrialCheck:
    """The one check of every shaped trial, around it: while it runs its switch is watched
    (`SwitchWatch`: a dead switch ends the trial at once); after it, the appliance is read back in one
    request (`appliance.check`: the HTB classes and the switch's daemons) and the classes compared
    with the shaping asked for (`guard`, the rate group's). A trial alone runs through one
    (`run_checked`); a cell whose clients offload at once has one for the cell (`together`): their
    threads share its guard (`since_start`), one reading at a time and in order, so that no reading
    is compared with a later one. What is then repaired is the caller's to decide."""

    def __init__(self, lab: Lab, exp: Experiment, run_dir: Path, guard: ShapingGuard) -> None:
        self.lab, self.exp, self.run_dir, self.guard = lab, exp, run_dir, guard
        self._reading = threading.Lock()

    def run(self, worker: WorkerLink, t: Trial) -> Checked:
        started = time.perf_counter()
        with SwitchWatch(self._switch_now, worker.proc.kill) as watch:
            ran = time.perf_counter()
            result, worker = run_trial(self.lab, self.exp, worker, self.run_dir, t)
            ran = time.perf_counter() - ran
        if watch.ended and worker.proc.poll() is not None:  # killed just after it answered
            worker = restarted(self.lab, self.exp, worker)
        with self._reading:
            reading = self.lab.appliance_check()
            wrong = self.guard.check(reading.classes, result) or ""
        switch = reading.switch or watch.found
        if switch:
            own = "ended when the switch was found down while it ran" if watch.ended else None
            result = not_kept(result, f"the switch was down: {'; '.join(switch)}", own)
        elif wrong:
            result = not_kept(result, f"the shaping was wrong while it ran: {wrong}")
        return Checked(result, worker, wrong, switch, time.perf_counter() - started - ran)

    def _switch_now(self) -> list[str]:
        """What is wrong with the switch's daemons now (the quick check `appliance.check` makes)."""
        return self.lab.appliance_check().switch


def run_checked(
    lab: Lab,
    exp: Experiment,
    worker: WorkerLink,
    run_dir: Path,
    t: Trial,
    guard: ShapingGuard,
    manifest: ManifestFile,
) -> tuple[Checked, ShapingGuard | None, str | None]:
    """A shaped trial, checked (`TrialCheck`), and what the sweep does about what the check found.

    A trial that failed, or ran while the switch was down, has the testbed healed (`repairs.heal`)
    and runs once more if something was repaired: its row is then that second attempt's, with what
    was repaired in `repair`. A trial that ran through a wrong shaping is failed and the shaping
    repaired. Returns the trial checked (its result, its worker and that `repair`), the guard for
    the rate's next trial, and why the rate's remaining trials cannot run (None: they can)."""
    rate = t.rate_mbps
    first = None  # (what was repaired, why the first attempt failed)
    for attempt in (1, 2):
        done = TrialCheck(lab, exp, run_dir, guard).run(worker, t)
        worker = done.worker
        if done.kept:
            break
        if done.wrong and not done.switch:
            reason = repair_shaping(lab, exp, rate, manifest, done.wrong, t.trial)
            return done, None if reason else shaping_guard(lab, rate), reason
        if done.switch:
            why = f"trial {t.trial} ran while the switch was down"
        else:
            why = f"trial {t.trial} failed: {done.result.error}"
        healing = heal(lab, exp, rate, manifest, why, [t.trial], grpc=t.method == GRPC, switch=done.switch)
        if not healing.repairs:
            break  # every host is healthy: the failure is the trial's own
        if healing.link:
            return done, None, healing.link
        guard = shaping_guard(lab, rate)
        if attempt == 1:
            first = (healing.parts, done.result.error)
    if first:
        parts, error = first
        done.repair = f"{parts} repaired after the first attempt failed: {error}"
    return done, guard, None


def validate_or_heal(lab: Lab, exp: Experiment, rate_mbps: float, manifest: ManifestFile) -> str | None:
    """Shape and validate a rate; if it fails, ask the hosts for their health, and if something was
    broken and repaired, validate again. Why the rate cannot be used, or None."""
    reason = shape_and_validate(lab, exp, rate_mbps, manifest)
    if reason is None:
        return None
    healing = heal(lab, exp, rate_mbps, manifest, reason, [], grpc=GRPC in exp.methods, iperf3=True)
    if not healing.repairs:
        return reason  # every host is healthy: the link cannot be emulated at this rate
    if any(r.part == "switch" for r in healing.repairs):
        return healing.link  # validated again after the switch's restart
    return shape_and_validate(lab, exp, rate_mbps, manifest)


def warm_up(lab: Lab, exp: Experiment, worker: WorkerLink, run_dir: Path, group: list[Trial]) -> WorkerLink:
    """Untimed trials at each op's smallest size, per method, before the rate group's timed ones."""
    if not exp.warmup:
        return worker
    seen = {}
    for t in group:
        seen.setdefault((t.op, t.method, t.server), t)
    for (op, method, server), t in seen.items():
        size = min(exp.sizes_of(op))  # a fetch: the dataset of the fewest files, once, as planned
        probe = Trial(-1, op, size, t.dtype, t.rate_mbps, method, -1, server, dataset=exp.dataset_of(size))
        for _ in range(exp.warmup):
            _, worker = run_trial(lab, exp, worker, run_dir, probe)
    return worker


def unusable_cells(trials: list[Trial], records: Iterable[TrialRecord]) -> list[tuple[str, str]]:
    """The cells of the plan without a single ok trial, each with why: how many of its trials failed
    and their most common error, or that none ran. In the plan's order."""
    rows = {r.trial: r for r in records if r.trial is not None}
    by_cell: dict[tuple, list[Trial]] = {}
    for t in trials:
        by_cell.setdefault(t.cell, []).append(t)
    unusable = []
    for cell_trials in by_cell.values():
        ran = [rows[t.trial] for t in cell_trials if t.trial in rows]
        if any(r.ok for r in ran):
            continue
        if not ran:
            why = "no trial ran"
        else:
            error, _ = Counter(r.error or "no error recorded" for r in ran).most_common(1)[0]
            why = f"{len(ran)} trial(s), all failed; most common error: {error}"
        unusable.append((cell_label(cell_trials[0]), why))
    return unusable


def run_threads(threads: list[threading.Thread], stop: Callable[[], None]) -> None:
    """Start the threads and wait for them all. Ctrl-C reaches this thread between joins: then `stop`
    (which ends what is in flight), a minute at most for each thread to end, and the interrupt goes on."""
    for thread in threads:
        thread.start()
    try:
        while any(thread.is_alive() for thread in threads):
            for thread in threads:
                thread.join(timeout=0.2)
    except BaseException:
        stop()
        for thread in threads:
            thread.join(timeout=60)
        raise
