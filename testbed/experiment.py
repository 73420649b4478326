"""Sweep definitions: what to measure, read from YAML and flags, validated before anything runs."""

from __future__ import annotations

import math
import re
from dataclasses import replace
from pathlib import Path

from contracts.config import load_yaml
from contracts.datasets import DATASETS, FETCH, FETCH_METHOD
from contracts.device import MODES, Mode
from contracts.errors import UserError
from contracts.grid import (
    image_grid_problem,
    parse_delays,
    parse_losses,
    parse_rates,
    parse_sizes,
    rate_label,
    with_image,
)
from contracts.operands import FIX as OPERANDS_FIX
from contracts.operands import check_int_range, parse_int_range
from contracts.rpc_study import RPC_TRANSPORTS, STUDY_OPS
from contracts.run import Experiment, Validation  # noqa: F401 (Validation: the experiment's, as importers take it)
from contracts.stages import (
    CODEC_TEXTS,
    COMPACT,
    CONNECTIONS,
    GRPC,
    GRPC_SERVERS,
    PER_TRIAL,
    PYTHON,
    SERVER_STACKS,
    TAGLESS,
    TAGLESS_SERVERS,
    Stack,
    offloads,
)
from contracts.tolerance import DEFAULT_MS, DEFAULT_PCT
from contracts.transfer import MAX_PARALLELISM
from testbed.experiment_fields import (
    read_clients,
    read_contention,
    read_counts,
    read_device,
    read_dtype,
    read_reps,
    read_validation,
    read_workload,
)
from testbed.inventory import MAX_CLIENTS, parse_cpu_profile
from testbed.rpc_doc import rpc_doc
from testbed.transfer_doc import transfer_doc


def known_ops() -> tuple[str, ...]:
    from contracts.images import IMAGE_OPS
    from contracts.ops import OPS

    return (*OPS, *IMAGE_OPS, FETCH, *STUDY_OPS)


def known_methods() -> tuple[str, ...]:
    """The codecs over HTTP, then the transports of their own (grpc; tagless, an RPC study's)."""
    from contracts.codecs import CODECS
    from contracts.stages import TRANSPORTS

    return (*CODECS, *TRANSPORTS, FETCH_METHOD, TAGLESS)


def parse_names(value, where: str, known: tuple[str, ...], what: str) -> tuple[str, ...]:
    parts = value if isinstance(value, list) else [p.strip() for p in str(value).split(",") if p.strip()]
    if not parts:
        raise UserError(f"{where}: no {what}s given")
    for p in parts:
        if p not in known:
            raise UserError(f"{where}: unknown {what} {p!r}", f"use one of: {', '.join(known)}")
    return tuple(dict.fromkeys(parts))


# what `testbed sweep` flags may override (each is a `--flag` of the same name, '_' as '-')
FLAGS = (
    "ops",
    "sizes",
    "rates",
    "delays",
    "losses",
    "methods",
    "reps",
    "precision",
    "warmup",
    "dtype",
    "int_range",
    "codec_text",
    "seed",
    "cpu_quota",
    "device",
    "mode",
    "connection",
    "server_device",
    "replicas",
    "server_stack",
    "servers",
    "image",
    "name",
)


def load_experiment(path: Path) -> Experiment:
    doc = load_yaml(path, "experiment")
    # a file says what the flags say (the client by its file keys), and more
    allowed = set(FLAGS) - {"cpu_quota", "device", "precision"}  # a file's precision is under reps
    allowed |= {"client_cpu", "client_device", "server_device", "validation", "local", "trial_timeout"}
    allowed |= {"description", "clients", "contention", "server_workers", "workload", "parallelism", "io_kb"}
    allowed |= {"concurrency", "device_tolerance_pct", "device_tolerance_ms", "datasets", "rpc"}
    doc.reject_unknown(allowed)
    if doc.has("datasets"):  # a transfer sweep: the op, its sizes and method follow from the datasets
        doc = transfer_doc(doc)
    if doc.has("rpc"):  # an RPC study: the ops and each one's sizes are its operations'
        doc = rpc_doc(doc)

    def wrap(key, fn, *a):
        try:
            return fn(doc.raw(key), *a)
        except UserError as exc:
            raise doc.error(key, exc.message.split(": ", 1)[-1], exc.fix) from None

    clients, device, client_devices = read_clients(doc)
    exp = Experiment(
        name=doc.get("name", str, Path(path).stem),
        ops=wrap("ops", parse_names, "ops", known_ops(), "op"),
        sizes=wrap("sizes", parse_sizes),
        rates_mbps=wrap("rates", parse_rates),
        delays_ms=wrap("delays", parse_delays) if doc.has("delays") else (),
        losses_pct=wrap("losses", parse_losses) if doc.has("losses") else (),
        methods=wrap("methods", parse_names, "methods", known_methods(), "method"),
        **read_reps(doc),
        warmup=doc.get("warmup", int, 1),
        dtype=read_dtype(doc),
        int_range=wrap("int_range", parse_int_range) if doc.has("int_range") else None,
        codec_text=doc.get("codec_text", str, COMPACT),
        image=doc.get("image", str, None),
        seed=doc.get("seed", int, 1),
        client_cpu=parse_cpu_profile(doc.section("client_cpu")) if doc.has("client_cpu") else None,
        client_device=device or read_device(doc),
        server_device=read_device(doc, "server_device"),
        mode=parse_mode(doc.get("mode", str, "scaled"), lambda problem, fix: doc.error("mode", problem, fix)),
        validation=read_validation(doc.section("validation", default_empty=True)),
        local=doc.get("local", bool, True),
        trial_timeout=float(doc.get("trial_timeout", float, 600.0)),
        connection=doc.get("connection", str, PER_TRIAL),
        replicas=doc.get("replicas", int, 1),
        server_stack=doc.get("server_stack", str, "wsgi"),
        servers=wrap("servers", parse_names, "servers", GRPC_SERVERS, "server")
        if doc.has("servers")
        else (PYTHON,),
        clients=clients,
        contention=read_contention(doc, clients),
        server_workers=doc.get("server_workers", int, 1),
        arrivals_hz=read_workload(doc),
        parallelism=read_counts(doc, "parallelism"),
        io_kb=read_counts(doc, "io_kb"),
        concurrency=read_counts(doc, "concurrency"),
        client_devices=client_devices,
        device_tolerance_pct=float(doc.get("device_tolerance_pct", float, DEFAULT_PCT)),
        device_tolerance_ms=float(doc.get("device_tolerance_ms", float, DEFAULT_MS)),
        datasets=tuple(doc.raw("datasets", [])),
        calls=doc.data.get("calls"),
        calls_at=tuple(doc.data.get("calls_at", ())),
        op_sizes=tuple((op, tuple(n)) for op, n in doc.data.get("op_sizes", {}).items()),
    )
    try:
        return check(exp)
    except InvalidValue as exc:
        raise doc.error(exc.key, exc.problem, exc.fix) from None


class InvalidValue(UserError):
    """A value out of range, found by `check`; `key` is its name in a file (its flag is --key)."""

    def __init__(self, key: str, problem: str, fix: str | None = None) -> None:
        super().__init__(f"--{key.replace('_', '-')}: {problem}", fix)
        self.key, self.problem = key, problem


MIN_ADAPTIVE = 2  # Welch's test needs two samples on each side
LIMITS = {"reps": (1, 10_000), "warmup": (0, 100), "seed": (0, 2**32 - 1), "trial_timeout": (1, 86_400)}
LIMITS["replicas"] = (1, 9)  # testbed.backends.replicas.MAX_REPLICAS
MAX_TRIALS = 1_000_000
MAX_CONCURRENCY = 32  # the energy-performance study's largest concurrency
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,79}$")


def planned_trials(exp: Experiment) -> int:
    """How many trials the grid holds (computed, not listed: a huge grid is refused before it is built).
    Each point of the link (a rate, with each delay and loss varied) is a group of cells. With several clients, a cell offloaded by k clients at once is k trials per repetition, and with
    c requests outstanding per client k x c; with clients of several devices, a local baseline each."""
    per_op = [(len(exp.sizes_of(op)), len(offloads(exp.methods, exp.servers, op))) for op in exp.ops]
    cells = sum(sizes for sizes, _ in per_op)
    ways = sum(sizes * n for sizes, n in per_op)  # each op's cells x its ways to offload
    each = (sum(exp.contention) or 1) * (sum(exp.concurrency) or 1)
    each *= max(1, len(exp.parallelism)) * max(1, len(exp.io_kb))
    if exp.datasets:  # a fetch's concurrency is a setting of one trial, not streams of trials
        each = each // (sum(exp.concurrency) or 1) * max(1, len(exp.concurrency))
    baselines = len(set(exp.client_devices)) or 1  # clients of several devices: one baseline each
    return exp.reps * (cells * (baselines if exp.local else 0) + len(exp.link_points()) * ways * each)


def trial_range(exp: Experiment) -> tuple[int, int]:
    """The fewest and the most trials the grid can take (equal for fixed repetitions)."""
    if not exp.adaptive:
        n = planned_trials(exp)
        return n, n
    return planned_trials(replace(exp, reps=exp.min_reps)), planned_trials(exp)


def check(exp: Experiment) -> Experiment:
    """The one check of a resolved experiment, whether its values came from a file or from flags."""
    for key, (lo, hi) in LIMITS.items():
        value = getattr(exp, key)
        if not lo <= value <= hi:
            raise InvalidValue(key, f"{value:g} is out of range", f"give {key} between {lo} and {hi:g}")
    _check_adaptive(exp)
    if exp.connection not in CONNECTIONS:
        raise InvalidValue(
            "connection",
            f"unknown connection policy {exp.connection!r}",
            f"use one of: {', '.join(CONNECTIONS)}",
        )
    if exp.server_stack not in SERVER_STACKS:
        raise InvalidValue(
            "server_stack",
            f"unknown server stack {exp.server_stack!r}",
            f"use one of: {', '.join(SERVER_STACKS)} (wsgi: gunicorn; cgi: lighttpd, a process per request)",
        )
    _check_rpc_study(exp)
    if set(exp.servers) != {PYTHON} and not {GRPC, TAGLESS} & set(exp.methods):
        raise InvalidValue(
            "servers",
            f"servers {', '.join(exp.servers)} serve only the method {GRPC}, which is not in methods",
            f"add {GRPC} to methods, or drop servers (the HTTP methods always run on the Python server)",
        )
    if exp.image:  # the image ops run on this file, at its pixel count
        exp = replace(exp, image=str(Path(exp.image).resolve()), sizes=with_image(exp.sizes, exp.image))
    if problem := image_grid_problem(exp.ops, exp.sizes, exp.methods, exp.servers):
        raise InvalidValue("ops", problem, "what image ops need: docs/server.md, 'Image filters as ops'")
    _check_operands(exp)
    _check_datasets(exp)
    _check_clients(exp)
    _check_settings(exp)
    _check_tolerance(exp)
    if not _NAME.match(exp.name):
        raise InvalidValue(
            "name",
            f"{exp.name!r} is not a run name (it names a directory under results/)",
            "use letters, digits, '.', '_' and '-' (at most 80), starting with a letter or digit",
        )
    total = planned_trials(exp)
    if total > MAX_TRIALS:
        raise InvalidValue(
            "reps",
            f"the grid has {total:,} trials, more than {MAX_TRIALS:,}",
            "use fewer sizes, rates or reps",
        )
    return exp


def _check_operands(exp: Experiment) -> None:
    """The operands as the paper's software made them (issue 45): a known text for the JSON codecs,
    and an integer range that fits the dtype, the ops and the largest size (`contracts.operands`)."""
    if exp.codec_text not in CODEC_TEXTS:
        raise InvalidValue(
            "codec_text",
            f"unknown codec text {exp.codec_text!r}",
            f"use one of: {', '.join(CODEC_TEXTS)} (era: Python 3.5's json and ujson 1.35's text)",
        )
    problem = check_int_range(exp.int_range, exp.dtype, exp.ops, exp.sizes)
    if problem:
        fix = "set dtype: int32 (or int64), or drop int_range" if "dtype is" in problem else OPERANDS_FIX
        raise InvalidValue("int_range", problem, fix)


def _check_rpc_study(exp: Experiment) -> None:
    """An RPC study (`rpc:`, docs/rpc-study.md) runs its operations over the transports on one client,
    at host speed; its operations, the tagless transport and the unshaped link are its alone."""
    study = [op for op in exp.ops if op in STUDY_OPS]
    unshaped = [r for r in exp.rates_mbps if math.isinf(r)]
    if not exp.rpc_study:
        if study or TAGLESS in exp.methods or unshaped:
            key = "ops" if study else "methods" if TAGLESS in exp.methods else "rates"
            raise InvalidValue(
                key,
                f"{', '.join(study) or TAGLESS if key != 'rates' else 'none (unshaped)'} is an RPC study's",
                "give them under rpc: (docs/rpc-study.md)",
            )
        return
    if len(study) != len(exp.ops):
        raise InvalidValue("ops", "an RPC study runs its operations only", "drop ops")
    if other := [m for m in exp.methods if m not in RPC_TRANSPORTS]:
        raise InvalidValue(
            "methods",
            f"{', '.join(other)} is not an RPC study's transport",
            f"use {', '.join(RPC_TRANSPORTS)}",
        )
    if other := [s for s in exp.servers if s not in TAGLESS_SERVERS]:
        raise InvalidValue(
            "servers", f"no study server in {', '.join(other)}", f"use {', '.join(TAGLESS_SERVERS)}"
        )
    if exp.calls_at and (missing := [r for r in exp.rates_mbps if r not in dict(exp.calls_at)]):
        raise InvalidValue(
            "rates",
            f"rpc.calls gives no count of calls for {', '.join(map(rate_label, missing))}",
            "give rpc.calls one count per rate, or one count for all",
        )
    refused = {
        "clients": exp.clients > 1 or exp.concurrency,
        "parallelism": exp.parallelism or exp.io_kb,
        "replicas": exp.replicas > 1,
        "client_device": exp.client_device or exp.server_device or exp.client_cpu,
        "delays": exp.delays_ms or exp.losses_pct,
    }
    for key, bad in refused.items():
        if bad:
            raise InvalidValue(
                key, "an RPC study's calls run at host speed, one client on one testbed", f"drop {key}"
            )


def _check_datasets(exp: Experiment) -> None:
    """The op fetch and the datasets go together (`contracts.datasets`), with its sizes as planned."""
    fetch = FETCH in exp.ops or FETCH_METHOD in exp.methods
    if not (fetch or exp.datasets):
        return
    if not exp.datasets or exp.ops != (FETCH,) or exp.methods != (FETCH_METHOD,):
        raise InvalidValue(
            "ops", f"op {FETCH} (method {FETCH_METHOD}) is a transfer sweep's", "give datasets"
        )
    files = tuple(DATASETS[n].files for n in exp.datasets if n in DATASETS)
    if len(set(exp.datasets)) != len(exp.datasets) or sorted(exp.sizes) != sorted(files) or exp.local:
        raise InvalidValue(
            "sizes", "a transfer sweep's sizes are its datasets' files", "drop sizes and local"
        )


def _check_settings(exp: Experiment) -> None:
    """The transfer settings: HTTP's (gRPC's channel has its own), each value once, within what the
    server takes."""
    for key in ("parallelism", "io_kb", "concurrency"):
        values = getattr(exp, key)
        if len(set(values)) != len(values):
            raise InvalidValue(key, f"{list(values)} repeats a value", "give each once")
    if (exp.parallelism or exp.io_kb) and GRPC in exp.methods:
        raise InvalidValue("parallelism", "the transfer settings are for the HTTP methods", f"drop {GRPC}")
    if any(p > MAX_PARALLELISM for p in exp.parallelism):
        raise InvalidValue("parallelism", f"at most {MAX_PARALLELISM} connections", "give fewer")
    if any(c > MAX_CONCURRENCY for c in exp.concurrency):
        raise InvalidValue("concurrency", f"at most {MAX_CONCURRENCY} requests outstanding", "give fewer")
    if any(k > 1 << 20 for k in exp.io_kb):
        raise InvalidValue("io_kb", "a write of more than 1 GiB", "give a smaller write size")


def _check_tolerance(exp: Experiment) -> None:
    """The device tolerance's two parts are positive numbers: a stage within max(pct, ms) of its
    target holds (`contracts.tolerance`); zero or less would flag every stage, whatever it took."""
    for key, example in (("device_tolerance_pct", "10 (percent)"), ("device_tolerance_ms", "0.1 (ms)")):
        value = getattr(exp, key)
        if not (math.isfinite(value) and value > 0):
            raise InvalidValue(key, f"{value:g} is not a positive number", f"give {key} > 0, e.g. {example}")


def _check_clients(exp: Experiment) -> None:
    """Several clients: each count of clients offloading at once is one of the testbed's, and what a
    sweep with several clients does not do yet is refused in one line."""
    if not 1 <= exp.clients <= MAX_CLIENTS:
        raise InvalidValue("clients", f"{exp.clients} clients", f"give 1 to {MAX_CLIENTS}")
    bad = [k for k in exp.contention if not 1 <= k <= exp.clients]
    if bad or len(set(exp.contention)) != len(exp.contention):
        raise InvalidValue(
            "contention",
            f"{list(exp.contention)} must be distinct counts of the {exp.clients} client(s)",
            f"give numbers between 1 and {exp.clients}",
        )
    most = exp.clients * max(exp.concurrency, default=1)  # requests in flight at once
    if not 1 <= exp.server_workers <= most:
        raise InvalidValue("server_workers", f"{exp.server_workers} is out of range", f"give 1 to {most}")
    if exp.clients == 1 and exp.arrivals_hz is not None:
        raise InvalidValue("workload", "an open-loop workload is for several clients", "drop workload")
    if not exp.together:
        return
    many = "several clients" if exp.clients > 1 else "a client's concurrent requests"
    refusals = {
        "workload": (exp.arrivals_hz is not None and max(exp.concurrency, default=1) > 1, "concurrent "
                     "requests run closed loop (each stream's next when its last ends)", "drop workload"),
        "reps": (exp.adaptive, f"{many} run fixed repetitions (their closed-loop trials overlap, "
                 "so they are not the independent samples adaptive stopping needs)", "give reps as one number"),
        "replicas": (exp.replicas != 1, f"{many} share one testbed", "drop replicas"),
        "mode": (exp.mode != Mode.SCALED, f"{many} are emulated scaled (their CPU quotas would be "
                 "one per host, the throttle's are per kind of work)", "use mode: scaled"),
        "methods": (GRPC in exp.methods, f"{many} offload over HTTP (the work slots are the HTTP "
                    "server's)", f"drop {GRPC}"),
        "server_stack": (exp.server_stack != Stack.WSGI, f"{many} need the wsgi stack (its work slots "
                         "and pacing)", "use server_stack: wsgi"),
    }  # fmt: skip
    for key, (refused, problem, fix) in refusals.items():
        if refused:
            raise InvalidValue(key, problem, fix)


def _check_adaptive(exp: Experiment) -> None:
    if exp.adaptive:
        if not MIN_ADAPTIVE <= exp.min_reps <= exp.reps:
            raise InvalidValue(
                "reps",
                f"minimum {exp.min_reps:g} is out of range",
                f"give MIN..MAX with {MIN_ADAPTIVE} <= MIN <= MAX (Welch's test needs two samples a side)",
            )
        if not exp.local:
            raise InvalidValue(
                "reps",
                "adaptive repetitions compare each cell with the local baseline, which is off (local: false)",
                "set local: true, or give a fixed number of repetitions",
            )
    if exp.precision is not None:
        if not exp.adaptive:
            raise InvalidValue(
                "precision",
                "applies only to adaptive repetitions",
                "give reps as MIN..MAX, or drop precision",
            )
        if not 0 < exp.precision < 1:
            raise InvalidValue(
                "precision",
                f"{exp.precision:g} is out of range",
                "give the CI half-width as a fraction of the mean, between 0 and 1 (e.g. 0.05)",
            )


def parse_mode(mode: str, error) -> str:
    if mode not in MODES:
        raise error(f"unknown mode {mode!r}", f"use one of: {', '.join(MODES)}")
    return mode
