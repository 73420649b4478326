"""Running a sweep: for each rate shape the link, validate it, and run the trials through the worker.

Every finished trial is a row in trials.csv at once; a failed trial is a row with its error, after
which a dead server or worker is restarted and the sweep goes on. `--resume` runs exactly the trials
that have no row yet.

The parts around the flow have their own modules: `worker_link` (the trial worker on the client),
`progress` (the progress line), `signals` (SIGTERM as Ctrl-C) and `bookkeeping` (manifest, trial rows,
sweep.log).
"""

from __future__ import annotations

import json
import logging
from collections import Counter
from collections.abc import Iterable
from pathlib import Path

from contracts.device import DeviceProfile, stack_key
from contracts.errors import UserError
from contracts.run import TRIALS_FILE, TrialRecord, read_trials
from contracts.trials import GRPC, LOCAL
from testbed import device_emulation
from testbed.bookkeeping import (
    counters_after,
    counters_before,
    end_session,
    now,
    setup_log,
    start_session,
    trial_row,
)
from testbed.estimate import Model
from testbed.experiment import Experiment
from testbed.lab import Lab
from testbed.plan import Trial, phases, plan_trials
from testbed.progress import Progress
from testbed.repairs import Unrepairable, heal, not_kept, repair_shaping, shape_and_validate, shaping_guard
from testbed.results import ManifestFile, TrialFile
from testbed.rounds import Rounds
from testbed.shaping_guard import ShapingGuard
from testbed.signals import sigterm_as_interrupt
from testbed.worker_link import WorkerDied, WorkerLink

log = logging.getLogger("testbed.sweep")


def cell_label(t: Trial) -> str:
    where = "local" if t.method == LOCAL else f"@ {t.rate_mbps:g} Mbit/s {t.method}"
    return f"{t.op} {t.size} {where}"


def run_sweep(
    lab: Lab,
    exp: Experiment,
    run_dir: Path,
    manifest: ManifestFile,
    keep_up: bool = False,
    device: DeviceProfile | None = None,
    model: Model | None = None,
    server_device: DeviceProfile | None = None,
) -> dict:
    """Run what is missing from `run_dir`; return a summary. The testbed is brought up if needed.

    With a `device`, the client host is calibrated for it first (`testbed.device_emulation`), with a
    `server_device` the server host for that one; with a `model` (`testbed.estimate`), the progress
    line's ETA comes from it."""
    run_id = manifest.manifest.run_id
    csv_path = run_dir / TRIALS_FILE
    trials = plan_trials(exp)
    outcomes = read_trials(csv_path).outcomes() if csv_path.exists() and csv_path.stat().st_size else {}
    done = set(outcomes)
    rounds = Rounds(exp, trials, outcomes) if exp.adaptive else None
    todo = rounds.blocks() if rounds else phases(exp, trials, done)
    setup_log(log, run_dir / "sweep.log")
    cells: dict = {}
    for t in trials:
        cells[t.cell] = cells.get(t.cell, 0) + (t.trial not in done)
    progress = Progress(len(trials), len(cells), cells, done=len(done))
    if model is not None:
        progress.seconds = {cell: model.cell_s(cell) for cell in cells}
    if rounds:
        progress.min_left = {cell: max(0, exp.min_reps - rounds.done(cell)) for cell in cells}
        progress.close_cells(rounds.open_cells())
    writer = TrialFile(csv_path)  # a write that fails stops the sweep in one line (UserError)
    session = start_session(manifest, skipped_done=len(done))
    brought_up = was_up = False
    worker = None
    failed = 0
    status = "interrupted"
    try:
        with sigterm_as_interrupt():
            lab.server_stack = exp.server_stack
            brought_up = lab.up()
            was_up = not brought_up
            lab.apply_cpu_limit()  # the experiment's profile, also on a testbed that was already up
            if not lab.server_alive(grpc=GRPC in exp.methods) or (
                was_up and lab.running_stack() != exp.server_stack  # up with the other stack
            ):
                lab.restart_offload_server()
            calibration, marks = calibrate_devices(lab, exp, manifest, progress, device, server_device)
            log.info("run %s: %d trials planned, %d already done", run_id, len(trials), len(done))
            problems: dict = {}  # rate -> why it is skipped (None: validated), once per session
            warmed: set = set()
            for rate, phase in todo:
                if rate is not None and rate not in problems:
                    progress.show(f"validating {rate:g} Mbit/s")
                    problems[rate] = validate_or_heal(lab, exp, rate, manifest)
                elif rate is not None and not problems[rate]:
                    lab.set_rate(int(round(rate * 1e6)))  # validated earlier in this session
                if problems.get(rate):
                    for t in phase:
                        row = trial_row(run_id, t, {"ok": False, "error": problems[rate]})
                        writer.write(row)
                        failed += 1
                        progress.show(cell_label(t), t)
                        if rounds:
                            rounds.record(row)
                    if rounds:
                        progress.close_cells(rounds.open_cells())
                    continue
                if worker is None:
                    worker = WorkerLink(lab, exp, run_dir / "worker.log", calibration)
                if rate not in warmed:
                    worker = warm_up(lab, exp, worker, run_dir, phase)
                    warmed.add(rate)
                counters = counters_before(manifest, lab, rate) if rate is not None else None
                guard = None if rate is None else shaping_guard(lab, rate)
                for t in phase:
                    if problems.get(rate):  # the link broke and could not be repaired
                        record = {"ok": False, "error": problems[rate]}
                    elif guard is None:
                        progress.show(cell_label(t))
                        record, worker = run_trial(lab, exp, worker, run_dir, t)
                    else:
                        progress.show(cell_label(t))
                        record, worker, guard, problems[rate] = run_checked(
                            lab, exp, worker, run_dir, t, guard, manifest
                        )
                    if device is not None or server_device is not None:
                        record["emulation_flagged"] = (t.op, t.size, t.method) in marks
                    row = trial_row(run_id, t, record)
                    writer.write(row)
                    failed += not row.ok
                    progress.show(cell_label(t), t)
                    if rounds:
                        rounds.record(row)
                if counters is not None:
                    counters_after(manifest, counters, lab, [t.trial for t in phase])
                if rounds:
                    progress.close_cells(rounds.open_cells())
                writer.sync()
            status = "complete"
    except Unrepairable as exc:
        status = "stopped"
        log.error("the sweep stopped: %s", exc)
        raise UserError(
            f"the sweep stopped: {exc}",
            f"repair it (what was measured is in {run_dir / 'sweep.log'}), then continue with: "
            f"testbed sweep --resume {run_dir}",
        ) from None
    except UserError:
        status = "stopped"  # a problem to fix first (e.g. a full results file system); --resume goes on
        raise
    finally:
        finished = status == "complete"  # otherwise an exception is under way
        progress.show("done" if finished else "stopped", final=True)
        # the end's own writes can fail as the sweep's did (a full file system): each step runs
        # whatever the others did, and never turns a stop under way into another error
        late = _quietly(writer.close)
        if worker is not None:
            worker.close()
        if late is not None and status == "complete":
            status = "stopped"
        # the manifest cannot be written: it keeps saying "running", which reads as interrupted
        # once this process is gone (`Manifest.killed`)
        late = _quietly(lambda: end_session(manifest, session, status)) or late
        restore = None
        if brought_up and not keep_up:
            restore = lab.down
        elif was_up or brought_up:
            restore = lambda: lab.shape(lab.inv.link)  # noqa: E731 - a testbed that stays up, as the inventory has it
        if restore is not None and finished:
            restore()
        elif restore is not None:  # a stop under way (say a broken switch) stays the error reported
            _quietly(restore)
        if late is not None and finished:  # no other error is under way: this one is the stop
            raise late
    return {
        "run_dir": str(run_dir),
        "trials": len(trials) if rounds is None else len(trials) - progress.saved,
        "ran": progress.ran,
        "failed": failed,
        "status": status,
        "unusable": unusable_cells(trials, read_trials(csv_path).records if csv_path.exists() else []),
    }


def server_stack_costs(exp: Experiment, profile: DeviceProfile) -> dict[str, float]:
    """What the server device's stack costs on the device, for the worker's server scale: the cgi
    stack's process start-up where the profile gives it (otherwise this host's start-up stays)."""
    start = profile.stack.get("server_start")
    if exp.server_stack != "cgi" or start is None:
        return {}
    return {stack_key("server_start"): start}


def calibrate_devices(
    lab: Lab,
    exp: Experiment,
    manifest: ManifestFile,
    progress: Progress,
    device: DeviceProfile | None,
    server_device: DeviceProfile | None,
) -> tuple[dict | None, set]:
    """At the start of a session, each host that emulates a device is calibrated for it and the
    calibration recorded. Returns what the trial worker needs (the client's calibration, and the
    server's slowdowns as `server_scale`; None: neither is a device) and the (op, size, method) of
    every trial a missed target marks."""
    calibration, marks = None, set()
    for role, profile in (("client", device), ("server", server_device)):
        if profile is None:
            continue
        progress.show(f"calibrating the {role} host for device {profile.name}")
        log.info("calibrating the %s host for device %s", role, profile.name)
        if role == "client":
            result = device_emulation.emulate_for(lab, profile, exp)
            device_emulation.record(manifest, profile, exp.mode, result, now())
            calibration = {**(calibration or {}), **result}
        else:
            result = device_emulation.emulate_server_for(lab, profile, exp)
            device_emulation.record(manifest, profile, "scaled", result, now(), "server")
            scale = {**result["scale"], **server_stack_costs(exp, profile)}
            calibration = {**(calibration or {}), "server_scale": scale}
        missed = device_emulation.flagged(result)
        if role == "server":  # its kernel is in every remote trial of its (op, size), in no local one
            remote = [m for m in exp.methods if m != LOCAL]
            missed = {(op, size, m) for op, size, w in missed for m in (remote if w == LOCAL else [w])}
        marks |= missed
        progress.reset_clock()
        if missed:
            what = ", ".join(f"{op} {size} {m}" for op, size, m in sorted(missed))
            log.warning("%s device emulation misses its tolerance for: %s", role, what)
            progress.note(
                f"{role} device {profile.name}: emulation outside {device_emulation.TOLERANCE_PCT:g}% for "
                f"{what}; those trials are marked emulation_flagged"
            )
    return calibration, marks


def _quietly(step) -> UserError | None:
    """One step of the end of a session: a UserError it raises (its write failed) is logged and
    returned instead, so the steps after it still run (the testbed is still taken down)."""
    try:
        step()
    except UserError as exc:
        log.warning("ending the session: %s", exc)
        return exc
    return None


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


def warm_up(lab: Lab, exp: Experiment, worker: WorkerLink, run_dir: Path, phase: list[Trial]) -> WorkerLink:
    """Untimed trials at each op's smallest size, per method, before the phase's timed ones."""
    if not exp.warmup:
        return worker
    seen = {}
    for t in phase:
        seen.setdefault((t.op, t.method), t)
    for (op, method), t in seen.items():
        probe = Trial(-1, op, min(exp.sizes), t.dtype, t.rate_mbps, method, -1)
        for _ in range(exp.warmup):
            _, worker = run_trial(lab, exp, worker, run_dir, probe)
    return worker


def run_trial(
    lab: Lab, exp: Experiment, worker: WorkerLink, run_dir: Path, t: Trial
) -> tuple[dict, WorkerLink]:
    """One trial; on failure, bring back whatever died (worker, server) so the next trial can run."""
    try:
        record = worker.run(t)
    except (WorkerDied, TimeoutError, json.JSONDecodeError) as exc:
        record = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
        log.warning("trial %d: %s; restarting the client worker", t.trial, exc)
        worker.proc.kill()
        worker.close()
        worker = WorkerLink(lab, exp, run_dir / "worker.log", worker.calibration)
    if not record.get("ok"):
        log.warning("trial %d (%s) failed: %s", t.trial, cell_label(t), record.get("error"))
    return record, worker


def run_checked(
    lab: Lab,
    exp: Experiment,
    worker: WorkerLink,
    run_dir: Path,
    t: Trial,
    guard: ShapingGuard,
    manifest: ManifestFile,
) -> tuple[dict, WorkerLink, ShapingGuard | None, str | None]:
    """A shaped trial, then the check of what it ran through (its shaping, the switch's daemons).

    A trial that failed, or ran while the switch was down, has the testbed healed (`repairs.heal`)
    and runs once more if something was repaired: its row is then that second attempt's, with what
    was repaired in `repair`. A trial that ran through a wrong shaping is failed and the shaping
    repaired. Returns the record, the worker, the guard for the rate's next trial, and why the
    rate's remaining trials cannot run (None: they can)."""
    rate = t.rate_mbps
    first = None  # (what was repaired, why the first attempt failed)
    for attempt in (1, 2):
        record, worker = run_trial(lab, exp, worker, run_dir, t)
        reading = lab.appliance_check()
        wrong = guard.check(reading["classes"], record)
        broken = reading["switch"]
        if record.get("ok") and not wrong and not broken:
            break
        if wrong and not broken:
            reason = repair_shaping(lab, exp, rate, manifest, wrong, t.trial)
            return not_kept(record, wrong), worker, None if reason else shaping_guard(lab, rate), reason
        if broken:
            why = f"trial {t.trial} ran while the switch was down"
            own = record.get("error")
            record = {**record, "ok": False, "error": f"not kept, the switch was down: {'; '.join(broken)}"}
            if own:
                record["error"] += f" (the trial itself: {own})"
        else:
            why = f"trial {t.trial} failed: {record.get('error')}"
        healing = heal(lab, exp, rate, manifest, why, [t.trial], grpc=t.method == GRPC, switch=broken)
        if not healing.repairs:
            break  # every host is healthy: the failure is the trial's own
        if healing.link:
            return record, worker, None, healing.link
        guard = shaping_guard(lab, rate)
        if attempt == 1:
            first = (healing.parts, record.get("error"))
    if first:
        parts, error = first
        record["repair"] = f"{parts} repaired after the first attempt failed: {error}"
    return record, worker, guard, None


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
