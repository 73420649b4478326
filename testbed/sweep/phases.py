"""Running a sweep, in phases: for each rate shape the link, validate it, and run the trials through
the worker.

Every finished trial is a row in trials.csv at once; a failed trial is a row with its error, after
which a dead server or worker is restarted and the sweep goes on. `--resume` runs exactly the trials
that have no row yet.

The rest of the sweep has its own modules beside this one: `trials` (a trial, its checks and repairs,
the warm-up), `together` (a cell with several clients at once), `calibration` (the hosts calibrated
for their devices), `testbeds` (what the sweep keeps of each testbed), `worker_link` (the trial
worker on the client), `progress` (the progress line), `bookkeeping` (what the sweep writes: the
manifest it starts with, trial rows, counters), `setup` (what it is set up with), and
`testbed.run_files` (the one writer of the run's files: manifest, trials.csv, sweep.log).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from contextlib import nullcontext
from dataclasses import replace
from pathlib import Path

from contracts.device import PACED, DeviceProfile, Mode
from contracts.errors import UserError
from contracts.grid import LinkPoint, is_unshaped
from contracts.hosts import Backend, Role
from contracts.run import TRIALS_FILE, Device, read_trials
from contracts.stages import GRPC, PYTHON, TAGLESS
from contracts.worker_api import TrialResult, WorkerEmulation
from testbed.backends.lab import Lab
from testbed.estimate import DurationModel
from testbed.experiment import Experiment
from testbed.link.repairs import Unrepairable, shaping_guard
from testbed.quiet import NoQuiet, Quiet
from testbed.run_files import ManifestFile, TrialFile, end_session, setup_log, start_session
from testbed.signals import sigterm_as_interrupt
from testbed.sweep import device_emulation, transfers
from testbed.sweep.bookkeeping import counters_after, counters_before, own_stages_missed, trial_row
from testbed.sweep.calibration import calibrate_devices, calibrate_host
from testbed.sweep.host_speed import recording_host_speed
from testbed.sweep.plan import Trial, device_names, plan_trials, rate_groups
from testbed.sweep.progress import Progress
from testbed.sweep.rounds import Rounds
from testbed.sweep.rpc_wire import WireCount, shape_for_calls
from testbed.sweep.scheduler import WorkSource, split_by_rep
from testbed.sweep.spinners import holding_spinners, shared_lock
from testbed.sweep.testbeds import Testbed
from testbed.sweep.together import Together
from testbed.sweep.trials import (
    cell_label,
    run_checked,
    run_threads,
    run_trial,
    unusable_cells,
    warm_up,
)
from testbed.sweep.worker_link import WorkerLink

log = logging.getLogger("testbed.sweep")


def run_sweep(
    labs: Lab | Sequence[Lab],
    exp: Experiment,
    run_dir: Path,
    manifest: ManifestFile,
    keep_up: bool = False,
    device: DeviceProfile | None = None,
    model: DurationModel | None = None,
    server_device: DeviceProfile | None = None,
    recalibrate: bool = False,
) -> dict:
    """Run what is missing from `run_dir` on one testbed or several (replicas); return a summary.
    Each testbed is brought up if needed.

    With a `device`, each client host is calibrated for it first (`testbed.sweep.device_emulation`; a resumed
    session on the same machine uses the run's calibration again unless told to `recalibrate`), with a
    `server_device` each server host for that one; with a `model` (`testbed.estimate`), the progress
    line's ETA comes from it."""
    labs = [labs] if isinstance(labs, Lab) else list(labs)
    sweep = Sweep(labs, exp, run_dir, manifest, keep_up, device, server_device, model)
    sweep.recalibrate = recalibrate
    return sweep.run()


class Sweep(Together):
    """A sweep over the typed run files, in phases: `prepare` (the plan, what is done, the session),
    per testbed `bring_up` and `calibrate`, then `trials` (units of work handed to the testbeds by a
    `WorkSource`, each unit: shape and validate its rate, warm up, run and check its trials), and
    `finish` (close the files and the session, take down or restore each testbed)."""

    def __init__(
        self,
        labs: list[Lab],
        exp: Experiment,
        run_dir: Path,
        manifest: ManifestFile,
        keep_up: bool = False,
        device: DeviceProfile | None = None,
        server_device: DeviceProfile | None = None,
        model: DurationModel | None = None,
    ) -> None:
        self.testbeds = [Testbed(lab) for lab in labs]
        if len(labs) > 1:
            for i, lab in enumerate(labs):
                lab.replica = i
        self.exp, self.run_dir, self.manifest, self.keep_up = exp, run_dir, manifest, keep_up
        self.device, self.server_device, self.model = device, server_device, model
        # clients of several devices: the further ones by name, and each client host's device's name
        self.further = device_emulation.resolve_client_devices(exp, manifest)
        self.role_devices = dict(zip(labs[0].client_roles, device_names(exp), strict=False))
        self.lock = threading.RLock()  # the writer, the progress line and the counts, across testbeds
        # the embedded testbeds share this machine: a validation waits for it to be quiet (testbed.quiet)
        here = [tb for tb in self.testbeds if tb.lab.inv.backend == Backend.NETNS]
        quiet = Quiet() if len(here) > 1 else NoQuiet()
        for tb in self.testbeds:
            tb.quiet = quiet if tb in here else NoQuiet()
        self.failed = 0
        self.status = "interrupted"
        self.recalibrate = False  # a resumed session on the same machine calibrates anyway

    # ---------------------------------------------------------------- phases
    def run(self) -> dict:
        self.prepare()
        try:
            lock, here = shared_lock(self.testbeds), recording_host_speed(self.run_dir, self.testbeds)
            with sigterm_as_interrupt(), here, holding_spinners(lock, self.session):
                for tb in self.testbeds:
                    self.bring_up(tb)
                self.session.datapath = ",".join(sorted({tb.lab.datapath() for tb in self.testbeds}))
                self.manifest.save()
                self.calibrate_all()
                log.info(
                    "run %s: %d trials planned, %d already done on %d testbed(s)",
                    self.run_id, len(self.trials), len(self.done), len(self.testbeds),
                )  # fmt: skip
                self.run_trials()
            self.status = "complete"
        except Unrepairable as exc:
            self.status = "stopped"
            log.error("the sweep stopped: %s", exc)
            raise UserError(
                f"the sweep stopped: {exc}",
                f"repair it (what was measured is in {self.run_dir / 'sweep.log'}), then continue with: "
                f"testbed sweep --resume {self.run_dir}",
            ) from None
        except UserError:
            self.status = "stopped"  # a problem to fix first (e.g. a full results file system)
            raise
        finally:
            self.finish()
        csv_path = self.run_dir / TRIALS_FILE
        return {
            "run_dir": str(self.run_dir),
            "trials": len(self.trials) if self.rounds is None else len(self.trials) - self.progress.saved,
            "ran": self.progress.ran,
            "failed": self.failed,
            "status": self.status,
            "unusable": unusable_cells(
                self.trials, read_trials(csv_path).records if csv_path.exists() else []
            ),
        }

    def prepare(self) -> None:
        """The plan, what trials.csv already holds, the progress line, the writer and the session."""
        exp = self.exp
        self.run_id = self.manifest.manifest.run_id
        csv_path = self.run_dir / TRIALS_FILE
        self.trials = plan_trials(exp)
        outcomes = read_trials(csv_path).outcomes() if csv_path.exists() and csv_path.stat().st_size else {}
        self.done = set(outcomes)
        self.rounds = Rounds(exp, self.trials, outcomes) if exp.adaptive else None
        if self.rounds:
            self.source = WorkSource(rounds=self.rounds, parts=len(self.testbeds))
        else:
            units = rate_groups(exp, self.trials, self.done)
            self.source = WorkSource(split_by_rep(units) if len(self.testbeds) > 1 else units)
        setup_log(log, self.run_dir / "sweep.log")
        cells: dict = {}
        for t in self.trials:
            cells[t.cell] = cells.get(t.cell, 0) + (t.trial not in self.done)
        self.progress = Progress(len(self.trials), len(cells), cells, done=len(self.done))
        if self.model is not None:
            self.progress.seconds = {cell: self.model.cell_s(cell) for cell in cells}
        if self.rounds:
            self.progress.min_left = {c: max(0, exp.min_reps - self.rounds.done(c)) for c in cells}
            self.progress.close_cells(self.rounds.open_cells())
        self.writer = TrialFile(csv_path)  # a write that fails stops the sweep in one line (UserError)
        testbeds = [
            {"replica": tb.lab.replica, "inventory": str(tb.lab.inv.path), "prefix": tb.lab.inv.prefix,
             "backend": tb.lab.inv.backend}
            for tb in self.testbeds
        ] if len(self.testbeds) > 1 else None  # fmt: skip
        self.session = start_session(self.manifest, skipped_done=len(self.done), testbeds=testbeds)

    def bring_up(self, tb: Testbed) -> None:
        lab, exp = tb.lab, self.exp
        lab.server_stack = exp.server_stack
        lab.grpc_servers = exp.servers
        if exp.together:  # the server the requests share: its work slots, and the device in real time
            lab.work_slots, lab.pace = exp.server_workers, self.server_device
        lab.parts = max(exp.parallelism or (1,)) * max(exp.concurrency or (1,))  # connections per client
        if exp.datasets:
            transfers.serve_datasets(lab)
        tb.use = lab.use(self.keep_up).open()
        if exp.datasets:
            transfers.make_datasets(lab, exp)
        if exp.rpc_study:
            shape_for_calls(lab, self.session)
        lab.apply_cpu_limit()  # the experiment's profile, also on a testbed that was already up
        if not lab.server_alive(grpc=GRPC in exp.methods, tagless=TAGLESS in exp.methods) or (
            tb.use.was_up
            and (
                lab.running_stack() != exp.server_stack  # up with the other stack
                or lab.inv.server_blas_threads is not None  # started before the device's BLAS threads
                or exp.together  # started without the experiment's work slots and pacing
                or lab.parts > 1  # ... or threads for the parts of requests
                or bool(exp.datasets)  # ... or without the datasets
            )
        ):
            lab.restart_offload_server()

    def calibrate_all(self) -> None:
        """Each testbed's hosts calibrated for their devices, one testbed after the other (a calibration
        needs a quiet host). The embedded testbeds share this machine, so in scaled mode the first one's
        calibration is every one's: the same CPU and the same code time the same work, and a
        calibration of the paper's grid takes the better part of an hour (both devices' slowdowns
        then follow this host in each testbed's own worker: `client.scaler`). Throttle mode sets each
        testbed's own CPU quotas, so each of those calibrates. A transfer sweep calibrates nothing,
        nor does an RPC study (its calls run at host speed)."""
        if self.exp.rpc_study:
            return
        if self.exp.datasets:
            transfers.record_device(self.manifest, self.device, self.exp)
            return
        if self.exp.together and self.server_device is not None:  # paced: recorded, not calibrated
            manifest = self.manifest.manifest
            if manifest.server_device is None:
                manifest.server_device = Device(profile=self.server_device.as_dict(), mode=PACED)
                self.manifest.save()
        here = [tb for tb in self.testbeds if tb.lab.inv.backend == Backend.NETNS]
        shared = here[1:] if len(here) > 1 and (self.device is None or self.exp.mode == Mode.SCALED) else []
        for tb in self.testbeds:
            if tb in shared:
                tb.calibration = here[0].calibration
                continue
            users = [t.lab.replica for t in here] if shared and tb is here[0] else None
            tb.calibration = calibrate_devices(
                tb.lab,
                self.exp,
                self.manifest,
                self.progress,
                self.device,
                None if self.exp.together else self.server_device,  # paced: nothing to calibrate
                users,
                None if self.recalibrate else self.session.started_at,
            )
            for host, profile in self.calibrated_clients(tb):
                result = calibrate_host(
                    tb.lab, self.exp, self.manifest, self.progress, "client", profile, None,
                    None if self.recalibrate else self.session.started_at, host,
                )  # fmt: skip
                tb.emulations[host] = result.with_server(tb.calibration)  # the server's, as client 1's

    def client_profile(self, role: str) -> DeviceProfile | None:
        """The device client host `role` emulates (None: none, it runs as its host)."""
        return self.further.get(self.role_devices.get(role)) or self.device

    def calibrating_host(self, tb: Testbed, role: str) -> str:
        """The client host whose calibration client host `role` uses. On one machine (embedded) a
        device is calibrated once, on its first client; an SSH lab's client machines each calibrate
        their own (machines differ in speed, and a calibration is of a host)."""
        if not tb.lab.clients_share_a_machine:
            return role
        device = self.role_devices.get(role)  # None: every client is of client 1's device
        return next((r for r, d in self.role_devices.items() if d == device), "client")

    def calibrated_clients(self, tb: Testbed) -> list[tuple[str, DeviceProfile]]:
        """The client hosts after client 1 that calibrate for their device, each with its device."""
        roles = [r for r in tb.lab.client_roles[1:] if self.calibrating_host(tb, r) == r]
        return [(r, profile) for r in roles if (profile := self.client_profile(r)) is not None]

    def run_trials(self) -> None:
        """Every unit of work, on the one testbed, or on each testbed in a thread of its own."""
        if len(self.testbeds) == 1:
            self.work(self.testbeds[0])
            return
        errors: list[BaseException] = []

        def work(tb: Testbed) -> None:
            try:
                self.work(tb)
            except BaseException as exc:  # noqa: BLE001 - re-raised in the sweep's own thread
                errors.append(exc)
                self.source.stop()

        def stop() -> None:
            self.source.stop()
            for tb in self.testbeds:  # a trial in flight ends with its worker; no row is written
                for worker in [tb.worker, *tb.workers.values()]:
                    if worker is not None:
                        worker.proc.kill()

        run_threads([threading.Thread(target=work, args=(tb,), daemon=True) for tb in self.testbeds], stop)
        if errors:
            raise errors[0]

    def work(self, tb: Testbed) -> None:
        """Units from the source until there are none; the testbed keeps its link while it can."""
        point = None
        while (unit := self.source.take(point)) is not None:
            try:
                point = unit[0]
                self.run_unit(tb, *unit)
            finally:
                self.source.done()

    def run_unit(self, tb: Testbed, point: LinkPoint | None, group: list[Trial]) -> None:
        """One group at a point of the link: shape and validate it (once a session: its rate, and its
        delay and loss where the sweep varies them), warm up, run and check its trials, read the
        appliance's counters around them."""
        lab, exp = tb.lab, self.exp
        rate = point.rate_mbps if point is not None else None
        unshaped = is_unshaped(rate)  # an RPC study's: no shaping, nothing to validate or guard
        if tb.prepare(point, exp, self.manifest, self.show):
            for t in group:
                self.record(tb, t, TrialResult(ok=False, error=tb.problems[point]))
            self.close_cells()
            return
        if tb.worker is None:
            tb.worker = WorkerLink(lab, exp, self.worker_log(tb), self.worker_emulation(tb, "client"))
        if rate not in tb.warmed:  # once a rate: a delay or a loss changes no code path to warm up
            with tb.quiet.shared():
                tb.worker = warm_up(lab, exp, tb.worker, self.run_dir, group)
            tb.warmed.add(rate)
        if exp.together and point is not None:  # the local baseline: the first client alone, below
            self.run_together(tb, point, group)
            return
        counters = counters_before(self.manifest, lab, rate) if rate is not None and not unshaped else None
        guard = None if rate is None or unshaped else shaping_guard(lab, rate)
        # the local baseline has the machine to itself (testbed.quiet): its scaled time multiplies a
        # few milliseconds of this host's CPU time by hundreds
        with tb.quiet.alone() if rate is None else nullcontext():
            for t in group:
                if self.source.stopped:
                    return  # another testbed failed, or the user interrupted: no row for what did not run
                repair = None
                wire = WireCount(lab) if exp.rpc_study else None  # its bytes per call on the link
                if tb.problems.get(point):  # the link broke and could not be repaired
                    result = TrialResult(ok=False, error=tb.problems[point])
                elif unshaped:  # an RPC study's batch on the unshaped link: no shaping to check
                    self.show(cell_label(t))
                    with tb.quiet.shared():
                        result, tb.worker = run_trial(lab, exp, tb.worker, self.run_dir, t)
                elif guard is None:  # the local baseline: on client 1, or on its device's client
                    self.show(cell_label(t))
                    role = lab.client_roles[(t.client or 1) - 1]
                    worker = self.stream_worker(tb, role, role, [t])
                    result, worker = run_trial(lab, exp, worker, self.run_dir, t)
                    self.keep_worker(tb, role, worker)
                else:
                    self.show(cell_label(t))
                    with tb.quiet.shared():
                        done, guard, tb.problems[point] = run_checked(
                            lab, exp, tb.worker, self.run_dir, t, guard, self.manifest
                        )
                    result, tb.worker, repair = done.result, done.worker, done.repair
                if self.source.stopped:
                    return  # the trial was cut short by the stop (its worker killed): it runs on resume
                flagged = self.flagged(tb, t, result)
                self.record(
                    tb,
                    t,
                    result,
                    emulation_flagged=flagged,
                    repair=repair,
                    wire=wire and wire.per_call(result),
                )
        if counters is not None:
            counters_after(self.manifest, counters, lab, [t.trial for t in group])
        self.close_cells()
        with self.lock:
            self.writer.sync()

    def stream_worker(self, tb: Testbed, role: str, name: str, trials: list[Trial]) -> WorkerLink:
        """The worker of request stream `name` on client host `role` (client 1's first stream: the
        testbed's worker); a further client's or stream's first cell starts it, warmed up as the first's."""
        worker = tb.worker if name == Role.CLIENT else tb.workers.get(name)
        if worker is None:
            emulation = self.worker_emulation(tb, role)
            worker = WorkerLink(tb.lab, self.exp, self.worker_log(tb, name), emulation, role)
            worker = warm_up(tb.lab, self.exp, worker, self.run_dir, trials)
            tb.workers[name] = worker
        return worker

    @staticmethod
    def keep_worker(tb: Testbed, name: str, worker: WorkerLink) -> None:
        """A stream's worker after a trial (a new one when the trial had to restart it)."""
        if name == Role.CLIENT:
            tb.worker = worker
        else:
            tb.workers[name] = worker

    def flagged(self, tb: Testbed, t: Trial, result: TrialResult) -> bool:
        """Whether one of the trial's own stages missed its device's target (`own_stages_missed`): its
        row's `emulation_flagged`."""
        if not result.ok or t.dataset or (self.device is None and self.server_device is None):
            return False
        client = self.client_profile(tb.lab.client_roles[(t.client or 1) - 1])
        server = self.server_device if t.server in ("", PYTHON) else None  # the Python code's targets
        return bool(own_stages_missed(self.exp, t, result, client, server))

    def finish(self) -> None:
        """Close the files and the session, and take each testbed down (or restore its link). The
        end's own writes can fail as the sweep's did (a full file system): each step runs whatever the
        others did, and never turns a stop under way into another error."""
        finished = self.status == "complete"  # otherwise an exception is under way
        self.progress.show("done" if finished else "stopped", final=True)
        late = _quietly(self.writer.close)
        for tb in self.testbeds:
            for worker in [tb.worker, *tb.workers.values()]:
                if worker is not None:
                    worker.close()
        if late is not None and self.status == "complete":
            self.status = "stopped"
        # the manifest cannot be written: it keeps saying "running", which reads as interrupted
        # once this process is gone (`Manifest.killed`)
        late = _quietly(lambda: end_session(self.manifest, self.session, self.status)) or late
        for tb in self.testbeds:  # a stop under way (say a broken switch) stays the error reported
            if tb.use is not None:
                tb.use.close(failing=not finished)
        if late is not None and finished:  # no other error is under way: this one is the stop
            raise late

    # ---------------------------------------------------------------- shared between testbeds
    def record(
        self,
        tb: Testbed,
        t: Trial,
        result: TrialResult,
        *,
        emulation_flagged: bool = False,
        repair: str | None = None,
        wire: tuple[float, float] | None = None,
    ) -> None:
        """A trial's row (`trial_row`: the result, and what the sweep adds to it: the testbed's
        replica), written at once; its cell's progress; the adaptive rule's results."""
        row = trial_row(
            self.run_id, t, result, emulation_flagged=emulation_flagged, replica=tb.lab.replica,
            repair=repair, wire=wire,
        )  # fmt: skip
        with self.lock:
            self.writer.write(row)
            self.failed += not row.ok
            self.progress.show(cell_label(t), t)
            if self.rounds:
                self.rounds.record(row)

    def close_cells(self) -> None:
        """Adaptive: the progress line stops counting what the stopping rule has closed (per unit: the
        rule looks at every cell)."""
        if self.rounds:
            with self.lock:
                self.progress.close_cells(self.rounds.open_cells())

    def show(self, label: str) -> None:
        with self.lock:
            self.progress.show(label)

    def worker_emulation(self, tb: Testbed, role: str) -> WorkerEmulation | None:
        """What a trial worker on client host `role` emulates the devices with: the calibration, and
        with concurrency (scaled) the device's cores, a timeline every worker of that host shares
        (`client.device_cores`)."""
        host = self.calibrating_host(tb, role)
        calibration = tb.emulations.get(host, tb.calibration)
        device = self.client_profile(role)
        if not (self.exp.concurrency and calibration and calibration.scale and device):
            return calibration
        path = str(tb.lab.host(role).state_dir / "device-cores.json")
        return replace(calibration, cores=(path, device.cores))

    def worker_log(self, tb: Testbed, role: str = "client") -> Path:
        """worker.log; a replica's worker-R.log; a further client's (or request stream's) worker-NAME.log."""
        if role != Role.CLIENT:
            return self.run_dir / f"worker-{role}.log"
        return self.run_dir / ("worker.log" if tb.lab.replica is None else f"worker-{tb.lab.replica}.log")


def _quietly(step) -> UserError | None:
    """One step of the end of a session: a UserError it raises (its write failed) is logged and
    returned instead, so the steps after it still run (the testbed is still taken down)."""
    try:
        step()
    except UserError as exc:
        log.warning("ending the session: %s", exc)
        return exc
    return None
