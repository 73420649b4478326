"""What the sweep writes into its run (through `testbed.run_files`): the manifest it starts with, the row
each trial leaves in trials.csv, and the appliance's counters around a rate's trials."""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path

import numpy as np

from contracts.device import DeviceProfile
from contracts.errors import UserError
from contracts.run import Counters, Manifest, TrialRecord
from contracts.stage_targets import missed_stages, stage_targets
from contracts.worker_api import TrialResult
from testbed.backends.lab import Lab
from testbed.experiment import Experiment
from testbed.run_files import ManifestFile, create_run, environment, now
from testbed.sweep.plan import Trial, device_names, plan_trials


def start_run(run_dir: Path, run_id: str, exp: Experiment, lab: Lab) -> ManifestFile:
    """A sweep's (or a task stream's) new run: its manifest says what is planned, on what, from when."""
    return create_run(
        run_dir,
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


def counters_before(manifest: ManifestFile, lab: Lab, rate_mbps: float) -> Counters:
    """The appliance's counters as a rate's trials begin; `counters_after` completes the entry.

    A counter that cannot be read is recorded as such and the sweep goes on: counters annotate the
    trials, they do not decide whether they are valid.
    """
    entry = Counters(
        rate_mbps=rate_mbps, ports={"up": lab.up_if, "down": lab.down_if}, replica=lab.replica,
        delay_ms=lab.delay_ms, loss_pct=lab.loss_pct,
    )  # fmt: skip
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


def own_stages_missed(
    exp: Experiment,
    t: Trial,
    result: TrialResult,
    client: DeviceProfile | None,
    server: DeviceProfile | None,
) -> list[str]:
    """The trial's stages whose emulated time missed its device's target by more than the experiment's
    tolerance (`client`, `server`: the devices its stages emulate; `server` None where its server is
    not the Python one). What marks a trial `emulation_flagged`: its own stages, not its (op, size)'s
    calibration, which runs the work in another process, with other caches, minutes earlier."""
    targets = stage_targets(t.op, t.size, t.method, np.dtype(t.dtype).itemsize, client, server)
    times = {column: getattr(result, column) for column in targets}
    return missed_stages(times, targets, exp.device_tolerance)


def trial_row(
    run_id: str,
    t: Trial,
    result: TrialResult,
    *,
    emulation_flagged: bool = False,
    replica: int | None = None,
    repair: str | None = None,
    wire: tuple[float, float] | None = None,
) -> TrialRecord:
    """The row of trial `t` from what the worker reported, every field of the result its column's (one
    the schema lacks raises: a bug), with what the sweep adds: whether one of its own stages missed
    its device's target (`own_stages_missed`), the testbed that ran it, what was repaired before this
    attempt, and an RPC study's bytes per call each way on the link (`testbed.sweep.rpc_wire`)."""
    measured = {f.name: getattr(result, f.name) for f in fields(result)}
    return TrialRecord(
        **{
            **measured,  # its trial number is the plan's, below
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
            "delay_ms": t.delay_ms,
            "loss_pct": t.loss_pct,
            "dataset": t.dataset,
            "emulation_flagged": emulation_flagged,
            "replica": replica,
            "repair": repair,
            "wire_up": wire[0] if wire else None,
            "wire_down": wire[1] if wire else None,
        }
    )
