"""Running a sweep: for each rate shape the link, validate it, and run the trials through the worker.

Every finished trial is a row in trials.csv at once; a failed trial is a row with its error, after
which a dead server or worker is restarted and the sweep goes on. `--resume` runs exactly the trials
that have no row yet.
"""

from __future__ import annotations

import json
import logging
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from contracts.errors import UserError
from contracts.trials import LOCAL
from testbed.experiment import Experiment
from testbed.lab import Lab
from testbed.plan import Trial, phases, plan_trials
from testbed.results import Manifest, TrialWriter, completed_trials, environment
from testbed.validate import validate_rate

log = logging.getLogger("testbed.sweep")


class WorkerDied(Exception):
    pass


class Worker:
    """The client host's trial worker process, spoken to in JSON lines.

    A reader thread turns its stdout into a queue, so a trial can time out whatever carries the
    pipe (a local process or an SSH channel).
    """

    def __init__(self, lab: Lab, exp: Experiment, stderr_path: Path) -> None:
        host = lab.host("client")
        self._stderr = open(stderr_path, "ab")  # noqa: SIM115 - lives as long as the worker
        self.timeout = exp.trial_timeout
        self.proc = host.popen(
            host.python(
                "client.worker",
                "--url",
                lab.server_url,
                "--seed",
                str(exp.seed),
                "--timeout",
                str(exp.trial_timeout),
            ),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
        )
        self._lines: queue.Queue[bytes] = queue.Queue()
        threading.Thread(target=self._pump, daemon=True).start()
        # importing numpy under a small CPU quota takes a while
        self._read(timeout=max(120.0, self.timeout))

    def _pump(self) -> None:
        for line in iter(self.proc.stdout.readline, b""):
            self._lines.put(line)
        self._lines.put(b"")

    def _read(self, timeout: float) -> dict:
        try:
            line = self._lines.get(timeout=timeout)
        except queue.Empty:
            raise TimeoutError(f"no answer from the client worker within {timeout:g} s") from None
        if not line:
            raise WorkerDied(f"the client worker exited (status {self.proc.poll()})")
        return json.loads(line)

    def run(self, trial: Trial) -> dict:
        spec = {
            "trial": trial.trial,
            "op": trial.op,
            "size": trial.size,
            "dtype": trial.dtype,
            "method": trial.method,
        }
        try:
            self.proc.stdin.write((json.dumps(spec) + "\n").encode())
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError) as exc:
            raise WorkerDied("the client worker exited") from exc
        return self._read(self.timeout + 30)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def close(self) -> None:
        try:
            if self.proc.stdin:
                self.proc.stdin.close()
            self.proc.wait(timeout=10)
        except (subprocess.TimeoutExpired, OSError):
            self.proc.kill()
            self.proc.wait()
        self._stderr.close()


@dataclass
class Progress:
    total_trials: int
    total_cells: int
    cells_left: dict
    done: int = 0
    started: float = 0.0
    ran: int = 0

    def __post_init__(self) -> None:
        self.started = time.monotonic()
        self.tty = sys.stderr.isatty()
        self._last = 0.0

    def show(self, label: str, trial: Trial | None = None, final: bool = False) -> None:
        if trial is not None:
            self.done += 1
            self.ran += 1
            self.cells_left[trial.cell] -= 1
        cells_done = sum(1 for v in self.cells_left.values() if v == 0)
        eta = ""
        if self.ran:
            per = (time.monotonic() - self.started) / self.ran
            eta = f" ETA {_duration(per * (self.total_trials - self.done))}"
        line = (
            f"[cells {cells_done}/{self.total_cells}] trials {self.done}/{self.total_trials} "
            f"{_bar(self.done, self.total_trials)} {label}{eta}"
        )
        now = time.monotonic()
        if self.tty:
            sys.stderr.write("\r\033[K" + line + ("\n" if final else ""))
            sys.stderr.flush()
        elif final or now - self._last > 10:
            print(line, file=sys.stderr, flush=True)
            self._last = now


def _bar(done: int, total: int, width: int = 20) -> str:
    filled = int(width * done / total) if total else width
    return "[" + "#" * filled + "." * (width - filled) + "]"


def _duration(seconds: float) -> str:
    seconds = int(seconds)
    return (
        f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
        if seconds >= 3600
        else f"{seconds // 60}m{seconds % 60:02d}s"
    )


def cell_label(t: Trial) -> str:
    where = "local" if t.method == LOCAL else f"@ {t.rate_mbps:g} Mbit/s {t.method}"
    return f"{t.op} {t.size} {where}"


@contextmanager
def sigterm_as_interrupt():
    """A `kill` ends the sweep as cleanly as Ctrl-C does."""

    owner = os.getpid()

    def handler(signum, frame):
        if os.getpid() != owner:  # a forked helper (pyroute2's netns workers): just end, as by default
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGTERM)
            return
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def start_run(run_dir: Path, run_id: str, exp: Experiment, lab: Lab) -> Manifest:
    if run_dir.exists() and any(run_dir.iterdir()):
        raise UserError(f"{run_dir} already exists", "give another --name, or --resume it")
    run_dir.mkdir(parents=True, exist_ok=True)
    manifest = Manifest(
        run_dir / "manifest.json",
        {
            "run_id": run_id,
            "status": "running",
            "experiment": exp.as_dict(),
            "inventory": str(lab.inv.path),
            "client_cpu": {
                "cpu_quota": lab.inv.client_cpu.cpu_quota,
                "blas_threads": lab.inv.client_cpu.blas_threads,
                "blas_core": lab.inv.client_cpu.blas_core,
            },
            "environment": environment(),
            "planned_trials": len(plan_trials(exp)),
            "validation": [],
            "started_at": _now(),
            "ended_at": None,
            "sessions": [],
        },
    )
    manifest.save()
    return manifest


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S%z")


def run_sweep(lab: Lab, exp: Experiment, run_dir: Path, manifest: Manifest, keep_up: bool = False) -> dict:
    """Run what is missing from `run_dir`; return a summary. The testbed is brought up if needed."""
    run_id = manifest.data["run_id"]
    csv_path = run_dir / "trials.csv"
    trials = plan_trials(exp)
    done = completed_trials(csv_path)
    todo = phases(exp, trials, done)
    _setup_log(run_dir / "sweep.log")
    cells: dict = {}
    for t in trials:
        cells[t.cell] = cells.get(t.cell, 0) + (t.trial not in done)
    progress = Progress(len(trials), len(cells), cells, done=len(done))
    writer = TrialWriter(csv_path)
    session = {"started_at": _now(), "skipped_done": len(done), "status": "running"}
    manifest.data["sessions"].append(session)
    manifest.update(status="running")
    brought_up = False
    worker = None
    failed = 0
    status = "interrupted"
    try:
        with sigterm_as_interrupt():
            brought_up = lab.up()
            lab.apply_cpu_limit()  # the experiment's profile, also on a testbed that was already up
            if not lab.server_alive():
                lab.start_offload_server()
            log.info("run %s: %d trials planned, %d already done", run_id, len(trials), len(done))
            for rate, phase in todo:
                if rate is not None:
                    progress.show(f"validating {rate:g} Mbit/s")
                    problem = shape_and_validate(lab, exp, rate, manifest)
                    if problem:
                        for t in phase:
                            writer.write(trial_row(run_id, t, {"ok": False, "error": problem}))
                            failed += 1
                            progress.show(cell_label(t), t)
                        continue
                if worker is None:
                    worker = Worker(lab, exp, run_dir / "worker.log")
                worker = warm_up(lab, exp, worker, run_dir, phase)
                for t in phase:
                    progress.show(cell_label(t))
                    record, worker = run_trial(lab, exp, worker, run_dir, t)
                    writer.write(trial_row(run_id, t, record))
                    failed += not record.get("ok")
                    progress.show(cell_label(t), t)
                writer.sync()
            status = "complete"
    finally:
        progress.show("done" if status == "complete" else "stopped", final=True)
        writer.close()
        if worker is not None:
            worker.close()
        session.update(ended_at=_now(), status=status)
        manifest.update(status=status, ended_at=_now())
        if brought_up and not keep_up:
            lab.down()
        elif not brought_up:
            lab.shape(lab.inv.link)  # leave a testbed that was up before as the inventory describes it
    return {
        "run_dir": str(run_dir),
        "trials": len(trials),
        "ran": progress.ran,
        "failed": failed,
        "status": status,
    }


def shape_and_validate(lab: Lab, exp: Experiment, rate_mbps: float, manifest: Manifest) -> str | None:
    """Shape for this rate and check it; a reason to skip the rate, or None when it can be trusted."""
    rate_bps = int(round(rate_mbps * 1e6))
    lab.set_rate(rate_bps)
    if not exp.validation.enabled:
        manifest.data["validation"].append({"rate_mbps": rate_mbps, "skipped": "validation disabled"})
        manifest.save()
        return None
    v = exp.validation
    for attempt in range(1 + v.retries):
        checks = validate_rate(lab, rate_bps, v.duration, v.tolerance_pct, shape=False)
        for c in checks:
            manifest.data["validation"].append({**c.as_dict(), "attempt": attempt + 1, "at": _now()})
        manifest.save()
        if all(c.ok for c in checks):
            log.info(
                "rate %g Mbit/s validated: %s",
                rate_mbps,
                ", ".join(f"{c.direction} {c.measured_mbps} Mbit/s" for c in checks),
            )
            return None
        log.warning(
            "rate %g Mbit/s failed validation (attempt %d): %s",
            rate_mbps,
            attempt + 1,
            [c.as_dict() for c in checks if not c.ok],
        )
    bad = "; ".join(
        f"{c.direction} measured {c.measured_mbps} vs {c.expected_mbps} Mbit/s" for c in checks if not c.ok
    )
    return f"link validation failed at {rate_mbps:g} Mbit/s ({bad}); rate skipped"


def warm_up(lab: Lab, exp: Experiment, worker: Worker, run_dir: Path, phase: list[Trial]) -> Worker:
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


def run_trial(lab: Lab, exp: Experiment, worker: Worker, run_dir: Path, t: Trial) -> tuple[dict, Worker]:
    """One trial; on failure, bring back whatever died (worker, server) so the next trial can run."""
    try:
        record = worker.run(t)
    except (WorkerDied, TimeoutError, json.JSONDecodeError) as exc:
        record = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
        log.warning("trial %d: %s; restarting the client worker", t.trial, exc)
        worker.proc.kill()
        worker.close()
        worker = Worker(lab, exp, run_dir / "worker.log")
    if not record.get("ok"):
        log.warning("trial %d (%s) failed: %s", t.trial, cell_label(t), record.get("error"))
        if t.method != LOCAL and not lab.server_alive():
            log.warning("the offload server died; restarting it")
            lab.start_offload_server()
    return record, worker


def trial_row(run_id: str, t: Trial, record: dict) -> dict:
    return {
        **record,
        "run_id": run_id,
        "trial": t.trial,
        "op": t.op,
        "size": t.size,
        "dtype": t.dtype,
        "rate_mbps": t.rate_mbps,
        "method": t.method,
        "rep": t.rep,
        "ok": bool(record.get("ok")),
        "error": record.get("error"),
    }


def _setup_log(path: Path) -> None:
    for h in list(log.handlers):
        log.removeHandler(h)
        h.close()
    handler = logging.FileHandler(path)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    log.propagate = False
