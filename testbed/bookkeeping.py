"""A run's bookkeeping: its manifest (what was planned, the sessions, every validation), the row
each trial leaves in trials.csv, and the sweep log.
"""

from __future__ import annotations

import logging
import os
import platform
import time
from pathlib import Path

from contracts.errors import UserError
from contracts.run import MANIFEST_FILE, Counters, LinkCheck, Manifest, Repair, Session, TrialRecord
from testbed.backends.lab import Lab
from testbed.experiment import Experiment
from testbed.results import ManifestFile, environment
from testbed.sweep.plan import Trial, device_names, plan_trials


def start_run(run_dir: Path, run_id: str, exp: Experiment, lab: Lab) -> ManifestFile:
    if run_dir.exists() and any(run_dir.iterdir()):
        raise UserError(f"{run_dir} already exists", "give another --name, or --resume it")
    run_dir.mkdir(parents=True, exist_ok=True)
    manifest = ManifestFile(
        run_dir / MANIFEST_FILE,
        Manifest(
            run_id=run_id,
            status="running",
            experiment=exp,
            inventory=str(lab.inv.path),
            client_cpu=lab.inv.client_cpu.as_dict(),
            environment=environment(),
            planned_trials=len(plan_trials(exp)),
            started_at=now(),
            client_device_names=device_names(exp),
        ),
    )
    manifest.save()
    return manifest


def now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S%z")


def start_session(manifest: ManifestFile, skipped_done: int, testbeds: list[dict] | None = None) -> Session:
    """A session (one `testbed sweep`, first or resumed) begins; returns its entry for `end_session`.

    The sweep holds the testbed's lock, so an earlier session still marked running was killed.
    """
    for earlier in manifest.manifest.sessions:
        if earlier.status == "running":
            earlier.status = "interrupted"
            earlier.ended_at = earlier.ended_at or last_written(manifest.path.parent)
    session = Session(
        started_at=now(),
        skipped_done=skipped_done,
        status="running",
        pid=os.getpid(),
        hostname=platform.node(),
        testbeds=testbeds,
    )
    manifest.manifest.sessions.append(session)
    manifest.update(status="running")
    return session


def last_written(run_dir: Path) -> str | None:
    """When a killed session last wrote to its run (a trial's row, a log line): its end as far as the
    run can tell, so the wall time of a run resumed after a kill still adds up (`benchmarks.grid`)."""
    times = [p.stat().st_mtime for p in run_dir.iterdir() if p.is_file() and p.name != MANIFEST_FILE]
    if not times:
        return None
    return time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(max(times)))


def end_session(manifest: ManifestFile, session: Session, status: str) -> None:
    session.ended_at, session.status = now(), status
    manifest.update(status=status, ended_at=now())


def add_validation(manifest: ManifestFile, *entries: LinkCheck) -> None:
    manifest.manifest.validation.extend(entries)
    manifest.save()


def add_repair(manifest: ManifestFile, repair: Repair) -> None:
    manifest.manifest.repairs.append(repair)
    manifest.save()


def counters_before(manifest: ManifestFile, lab: Lab, rate_mbps: float) -> Counters:
    """The appliance's counters as a rate's trials begin; `counters_after` completes the entry.

    A counter that cannot be read is recorded as such and the sweep goes on: counters annotate the
    trials, they do not decide whether they are valid.
    """
    entry = Counters(rate_mbps=rate_mbps, ports={"up": lab.up_if, "down": lab.down_if}, replica=lab.replica)
    try:
        entry.before = lab.counters().to_json()
    except UserError as exc:
        entry.error = exc.message
    manifest.manifest.counters.append(entry)
    manifest.save()
    return entry


def counters_after(manifest: ManifestFile, entry: Counters, lab: Lab, trial_ids: list[int]) -> None:
    entry.trials = trial_ids
    if entry.before is not None:
        try:
            entry.after = lab.counters().to_json()
        except UserError as exc:
            entry.error = exc.message
    manifest.save()


def trial_row(run_id: str, t: Trial, record: dict) -> TrialRecord:
    """The row of trial `t` from what the worker reported: a field the schema lacks raises (a bug)."""
    return TrialRecord(
        **{
            **record,
            "run_id": run_id,
            "trial": t.trial,
            "op": t.op,
            "size": t.size,
            "dtype": t.dtype,
            "rate_mbps": t.rate_mbps,
            "method": t.method,
            "server": t.server or None,
            "rep": t.rep,
            "clients": t.clients,
            "client": t.client,
            "parallelism": t.parallelism,
            "io_kb": t.io_kb,
            "concurrency": t.concurrency,
            "stream": t.stream,
            "device": t.device,
            "ok": bool(record.get("ok")),
            "error": record.get("error"),
        }
    )


def setup_log(log: logging.Logger, path: Path) -> None:
    """Send `log` to `path` (only there), replacing the file of an earlier session."""
    for h in list(log.handlers):
        log.removeHandler(h)
        h.close()
    handler = _LogFile(path)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    log.propagate = False


class _LogFile(logging.FileHandler):
    """sweep.log, whose lines are dropped when they cannot be written (a full results file system):
    logging's default prints a traceback per line on the terminal, and the sweep's own stop already
    names the problem in one line."""

    def handleError(self, record: logging.LogRecord) -> None:
        pass

    def close(self) -> None:
        try:
            super().close()
        except OSError:
            pass  # its last lines could not be flushed (see handleError)
