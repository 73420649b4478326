"""Decisions over time: a seeded task stream run against a replayed link trace, once per policy.

A device decides per task whether to offload, on a network whose bandwidth moves (the paper's
"systems that support a dynamic computation offloading decision"). Each policy (`testbed.online.policies`)
gets the same stream on the same trace, replayed from its start for it (`testbed.link.trace_replay`), so the
analysis can compare them task by task and build the hindsight oracle from the always-local and
always-remote runs (`analysis.online`).

The device runs one task at a time: a task starts at its arrival or when the previous one ends,
whichever is later, and ends its device completion time (`t_total`, the trial's stages as a sweep
has them) later; the orchestrator waits on the trace's clock until then. In scaled mode the host
computes faster than the device, so within a task its transfer starts after the host's encode rather
than the device's: each row records that difference (`lag_s`); throttle mode has none.

The experiment (devices, mode, stack, dtype, connection) is the model run's: the online policy's
per-stage model was fitted on it, so the stream runs on what it describes.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from contracts.config import load_yaml
from contracts.errors import UserError
from contracts.grid import parse_sizes
from contracts.run import Experiment
from contracts.stages import LOCAL, STAGES
from contracts.tasks import STREAM_FILE, TaskRecord, TaskWriter
from contracts.trace import ReplayPlan
from contracts.worker_api import TrialResult
from testbed.backends.lab import Lab
from testbed.experiment import known_methods, known_ops
from testbed.link.trace import DEFAULT_GRANULARITY_MS, load_trace
from testbed.link.trace_replay import LEAD_S, replay
from testbed.online.policies import KINDS, Decision, Policy
from testbed.sweep.plan import Trial
from testbed.sweep.progress import Progress

log = logging.getLogger(__name__)
PROBE_TRIAL = -2  # the worker's trial id of an online policy's probe (-1: a warm-up)


@dataclass(frozen=True)
class Task:
    task: int
    arrival_s: float  # on the trace's clock
    op: str
    size: int


@dataclass(frozen=True)
class StreamSpec:
    """A stream file: the trace, the tasks (a seeded arrival process and mix), methods and policies."""

    name: str
    trace: Path
    count: int
    mean_gap_s: float
    ops: tuple[str, ...]
    sizes: tuple[int, ...]
    methods: tuple[str, ...]
    policies: tuple[str, ...] = KINDS
    seed: int = 1
    down_trace: Path | None = None
    granularity_ms: int = DEFAULT_GRANULARITY_MS
    window: int = 3
    stale_s: float = 10.0
    probe_size: int = 128  # the online policy's probe: the task's op at this size, offloaded
    model: Path | None = None  # the sweep whose predictor the online policy uses

    def as_dict(self) -> dict:
        return {
            k: (str(v) if isinstance(v, Path) else list(v) if isinstance(v, tuple) else v)
            for k, v in self.__dict__.items()
        }


def load_stream(path: Path) -> StreamSpec:
    """A stream file; its paths (trace, model) are relative to the file's directory."""
    doc = load_yaml(path, "stream")
    doc.reject_unknown(
        {"name", "description", "trace", "down_trace", "granularity_ms", "tasks", "methods"}
        | {"policies", "estimator", "model"}
    )
    tasks = doc.section("tasks")
    tasks.reject_unknown({"count", "mean_gap_s", "ops", "sizes", "seed"})
    estimator = doc.section("estimator", default_empty=True)
    estimator.reject_unknown({"window", "stale_s", "probe_size"})
    here = Path(path).parent

    def names(section, key: str, known: tuple[str, ...]) -> tuple[str, ...]:
        value = section.raw(key)
        items = tuple(value) if isinstance(value, list) else (value,)
        for item in items:
            if item not in known:
                raise section.error(key, f"unknown {item!r}", f"use some of: {', '.join(known)}")
        return items

    def path_of(key: str) -> Path | None:
        return here / doc.get(key, str) if doc.has(key) else None

    try:
        sizes = parse_sizes(tasks.raw("sizes"))
    except UserError as exc:
        raise tasks.error("sizes", exc.message.split(": ", 1)[-1], exc.fix) from None
    spec = StreamSpec(
        name=doc.get("name", str, Path(path).stem),
        trace=path_of("trace") or here,
        down_trace=path_of("down_trace"),
        granularity_ms=doc.get("granularity_ms", int, DEFAULT_GRANULARITY_MS),
        count=tasks.get("count", int),
        mean_gap_s=float(tasks.get("mean_gap_s", float)),
        ops=names(tasks, "ops", known_ops()),
        sizes=sizes,
        seed=tasks.get("seed", int, 1),
        methods=names(doc, "methods", known_methods()),
        policies=names(doc, "policies", KINDS) if doc.has("policies") else KINDS,
        window=estimator.get("window", int, 3),
        stale_s=float(estimator.get("stale_s", float, 10.0)),
        probe_size=estimator.get("probe_size", int, 128),
        model=path_of("model"),
    )
    if not 2 <= spec.probe_size <= min(spec.sizes):
        raise estimator.error(
            "probe_size",
            f"{spec.probe_size} is not between 2 and the smallest task size, {min(spec.sizes)}",
            "give a probe smaller than the tasks it measures the link for",
        )
    if not 1 <= spec.count <= 10_000 or spec.mean_gap_s <= 0:
        raise tasks.error(
            "count",
            f"{spec.count} tasks, {spec.mean_gap_s:g} s apart",
            "give 1 to 10000 tasks at a mean gap above 0 s",
        )
    return spec


def task_stream(spec: StreamSpec) -> list[Task]:
    """The tasks: Poisson arrivals (exponential gaps of mean `mean_gap_s`, the first at 0), each op and
    size drawn uniformly, all from the seed: the same stream for every policy and every run."""
    rng = np.random.default_rng(spec.seed)
    gaps = rng.exponential(spec.mean_gap_s, spec.count)
    arrivals = np.concatenate([[0.0], np.cumsum(gaps[1:])])
    ops = rng.choice(len(spec.ops), spec.count)
    sizes = rng.choice(len(spec.sizes), spec.count)
    return [
        Task(i, round(float(a), 6), spec.ops[o], int(spec.sizes[s]))
        for i, (a, o, s) in enumerate(zip(arrivals, ops, sizes, strict=True))
    ]


def stream_experiment(base: Experiment, spec: StreamSpec) -> Experiment:
    """The model run's experiment narrowed to the stream's ops, sizes and methods (what is calibrated
    and warmed up), with the online policy's probe size; its devices, mode, stack, dtype and
    connection are the stream's."""
    sizes = spec.sizes
    if "online" in spec.policies:
        sizes = tuple(sorted({*sizes, spec.probe_size}))
    return replace(base, name=spec.name, ops=spec.ops, sizes=sizes, methods=spec.methods, replicas=1)


class StreamRun:
    """One policy's pass over the stream on a replayed trace; rows go to the writer as tasks end."""

    def __init__(
        self,
        lab: Lab,
        exp: Experiment,
        plan: ReplayPlan,
        writer: TaskWriter,
        run_dir: Path,
        probe_size: int = 128,
        progress: Progress | None = None,
    ) -> None:
        self.lab, self.exp, self.plan, self.writer, self.run_dir = lab, exp, plan, writer, run_dir
        self.probe_size, self.progress = probe_size, progress

    def run(self, policy: Policy, tasks: list[Task], worker, clock=time.time, sleep=time.sleep):
        """Replay the trace from a start instant in a thread and run the tasks on its clock; returns
        the replay (its passes and lateness) and the worker (replaced if it died).

        Its trials are not checked as a sweep's are (`testbed.sweep.trials.TrialCheck`): the replay
        holds the appliance's agent for each whole pass (`shape.replay`, one verb), so nothing could
        ask it about the switch or the classes while a task runs, and the rate it would compare the
        classes with moves with the trace; a task through a dead switch fails as the client sees it."""
        from testbed.sweep.trials import run_trial

        stop = threading.Event()
        start = clock() + LEAD_S
        played: dict = {}

        def play() -> None:
            try:
                played["replay"] = replay(self.lab, self.plan, 0, start=start, stop=stop)
            except BaseException as exc:  # noqa: BLE001 - re-raised in the stream's own thread
                played["error"] = exc

        thread = threading.Thread(target=play, name="stream replay", daemon=True)
        thread.start()
        try:
            free_s = 0.0
            for task in tasks:
                due = max(task.arrival_s, free_s)
                sleep(max(0.0, start + due - clock()))
                if "error" in played:
                    break
                start_s = max(due, clock() - start)
                probe_s = None
                if policy.needs_probe(start_s):  # the link measured first; the device waits for it
                    probe = Trial(
                        PROBE_TRIAL, task.op, self.probe_size, self.exp.dtype, None, policy.method, 0
                    )
                    seen, worker = run_trial(self.lab, self.exp, worker, self.run_dir, probe)
                    probe_s = seen.t_total if seen.ok else clock() - start - start_s
                    policy.observe(seen, Decision(policy.method), start_s + probe_s)
                began = start_s + (probe_s or 0.0)  # the task's own trial, after its probe
                sleep(max(0.0, start + began - clock()))
                decision = policy.decide(task.op, task.size, began)
                trial = Trial(task.task, task.op, task.size, self.exp.dtype, None, decision.method, 0)
                result, worker = run_trial(self.lab, self.exp, worker, self.run_dir, trial)
                end_s = began + result.t_total if result.ok else clock() - start
                free_s = end_s
                policy.observe(result, decision, end_s)
                row = task_row(policy.name, task, start_s, end_s, decision, result, self.plan, probe_s)
                self.writer.write(row)
                if self.progress is not None:  # a stream's "cells" are its policies
                    self.progress.count(policy.name)
                    self.progress.show(
                        f"{policy.name}: task {task.task} {task.op} {task.size} {row.decision}"
                    )
        finally:
            stop.set()
            thread.join()
        if "error" in played:
            raise played["error"]
        return played["replay"], worker


def task_row(
    policy: str,
    task: Task,
    start_s: float,
    end_s: float,
    decision: Decision,
    result: TrialResult,
    plan: ReplayPlan,
    probe_s: float | None = None,
) -> TaskRecord:
    """A finished task's row: the worker's answer, the decision, the probe before it (if any) and the
    trace at the task's start."""
    step = plan.step_at(start_s)
    lag = None
    if result.wall_client_encode is not None and result.t_client_encode is not None:
        lag = result.t_client_encode - result.wall_client_encode
    ok = result.ok
    return TaskRecord(
        policy=policy,
        task=task.task,
        op=task.op,
        size=task.size,
        arrival_s=task.arrival_s,
        start_s=start_s,
        decision="remote" if decision.remote else "local",
        method=decision.method,
        ok=ok,
        end_s=end_s,
        error=None if ok else result.error or "failed",
        **{s: getattr(result, s) if ok else None for s in ("t_total", *STAGES)},
        bytes_up=result.bytes_up,
        bytes_down=result.bytes_down,
        trace_up_mbps=step.up_bps / 1e6,
        trace_down_mbps=step.down_bps / 1e6,
        estimate_mbps=decision.estimate_mbps,
        predicted_local_s=decision.predicted_local_s,
        predicted_remote_s=decision.predicted_remote_s,
        probe=probe_s is not None,
        probe_s=probe_s,
        lag_s=lag,
    )


def write_record(run_dir: Path, spec: StreamSpec, plan: ReplayPlan, tasks: list[Task], replays: dict) -> None:
    """stream.json: the spec, the trace's plan, the stream and each policy's replay (its lateness)."""
    doc = {
        "format_version": 1,
        "spec": spec.as_dict(),
        "plan": plan.as_dict(),
        "tasks": [t.__dict__ for t in tasks],
        "replays": {
            name: {"start": r.start, "lateness_s": r.lateness(), "passes": len(r.passes)}
            for name, r in replays.items()
        },
    }
    (run_dir / STREAM_FILE).write_text(json.dumps(doc, indent=2) + "\n")


def load_trace_of(spec: StreamSpec) -> ReplayPlan:
    if not spec.trace.is_file():
        raise UserError(f"trace {spec.trace} does not exist", "give the stream file's trace relative to it")
    return load_trace(spec.trace, spec.down_trace, spec.granularity_ms)


def run_stream(lab: Lab, spec: StreamSpec, model_run: Path | None, results: Path) -> Path:
    """Bring the testbed up if need be, calibrate its devices for the stream's work, then run the
    stream once per policy on the trace replayed from its start; returns the stream's run directory."""
    from analysis.load import load_run
    from analysis.predict_model import fit
    from contracts.device import DeviceProfile
    from contracts.tasks import TASKS_FILE
    from testbed.online.policies import make_policies
    from testbed.run_files import end_session, new_run_id, start_session
    from testbed.sweep.bookkeeping import start_run
    from testbed.sweep.calibration import calibrate_devices
    from testbed.sweep.trials import warm_up
    from testbed.sweep.worker_link import WorkerLink

    source = model_run or spec.model
    if source is None:
        raise UserError(
            f"stream {spec.name} names no model run",
            "give --model RUN_DIR (a sweep of the devices to emulate)",
        )
    run = load_run(source)
    if run.manifest is None:
        raise UserError(f"{source} has no manifest.json", "give the directory of a run made by testbed sweep")
    plan = load_trace_of(spec)
    model = fit(run.trials, run.manifest) if "online" in spec.policies else None
    policies = make_policies(spec.policies, spec.methods, model, spec.window, spec.stale_s)
    exp = stream_experiment(run.manifest.experiment, spec)
    device = DeviceProfile.from_dict(run.manifest.device.profile) if run.manifest.device else None
    server = run.manifest.server_device
    server_device = DeviceProfile.from_dict(server.profile) if server else None
    tasks = task_stream(spec)
    run_id = new_run_id(spec.name)
    run_dir = results / run_id
    manifest = start_run(run_dir, run_id, exp, lab)
    session = start_session(manifest, 0)
    status = "interrupted"
    lab.server_stack = exp.server_stack
    use = lab.use().open()  # left as found: down again, or its link restored
    writer = TaskWriter(run_dir / TASKS_FILE)
    worker = None
    try:
        lab.apply_cpu_limit()
        progress = Progress(len(tasks) * len(policies), len(policies), {p.name: len(tasks) for p in policies})
        calibration = calibrate_devices(lab, exp, manifest, progress, device, server_device)
        worker = WorkerLink(lab, exp, run_dir / "worker.log", calibration)
        warmups = [
            Trial(-1, op, min(spec.sizes), exp.dtype, None, m, -1)
            for op in spec.ops
            for m in (LOCAL, *spec.methods)
        ]
        worker = warm_up(lab, exp, worker, run_dir, warmups)
        replays = {}
        stream = StreamRun(lab, exp, plan, writer, run_dir, spec.probe_size, progress)
        for policy in policies:
            progress.show(f"{policy.name}: {len(tasks)} tasks on {plan.source}")
            log.info("stream %s: policy %s", run_id, policy.name)
            replays[policy.name], worker = stream.run(policy, tasks, worker)
            write_record(run_dir, spec, plan, tasks, replays)
        progress.show("done", final=True)
        status = "complete"
    finally:
        writer.close()
        if worker is not None:
            worker.close()
        end_session(manifest, session, status)
        use.close(failing=status != "complete")
    return run_dir
