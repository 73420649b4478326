"""An experiment file's parts as `testbed.experiment.load_experiment` reads them: repetitions,
clients, workload, the transfer settings' lists, devices, dtype and validation. Each reader takes
the document's `Section` and reports a bad value in one line naming the key; what holds across
parts is `testbed.experiment.check`'s."""

from __future__ import annotations

import re
from pathlib import Path

from contracts.config import Section
from contracts.errors import UserError
from contracts.run import Validation
from contracts.stages import DTYPES
from testbed.devices import load_device

_REPS = re.compile(r"^\s*(\d+)\s*(?:\.\.\s*(\d+)\s*)?$")


def parse_reps(value, where: str = "reps") -> tuple[int | None, int]:
    """(min, max) repetitions: a number N is a fixed count (None, N); 'N..M' is adaptive (N, M).

    Ranges are checked by `check`, for files and flags alike."""
    if isinstance(value, int) and not isinstance(value, bool):
        return None, value
    m = _REPS.match(str(value)) if isinstance(value, str) else None
    if not m:
        raise UserError(
            f"{where}: {value!r} is not a number of repetitions",
            "give a number (fixed) or MIN..MAX (adaptive), e.g. 40 or 5..40",
        )
    if m.group(2) is None:
        return None, int(m.group(1))
    return int(m.group(1)), int(m.group(2))


def read_clients(doc: Section) -> tuple[int, str | None, tuple[str, ...]]:
    """`clients: [{device: NAME, count: N}, ...]`: how many client hosts, client 1's device, and with
    groups of several devices each client host's device, in the order given (client 1 first)."""
    if not doc.has("clients"):
        return 1, None, ()
    groups = doc.sections("clients")
    each: list[str] = []
    for group in groups:
        group.reject_unknown({"device", "count"})
        device = read_device(group, "device")
        count = group.get("count", int, 1)
        if count < 1:
            raise group.error("count", f"{count} clients", "give at least 1")
        each += [device] * count
    if not each:
        raise doc.error("clients", "no client group", "give e.g. [{device: paper-p4, count: 2}]")
    if doc.has("client_device") or doc.has("client_cpu"):
        raise doc.error(
            "clients", "clients and client_device (or client_cpu) both describe the client", "keep clients"
        )
    names = [load_device(ref).name for ref in each]
    several = len(set(names)) > 1
    if several and len({(n, r) for n, r in zip(names, each, strict=True)}) != len(set(names)):
        raise doc.error("clients", "two different profiles share a device name", "rename one of the profiles")
    return len(each), each[0], tuple(each) if several else ()


def read_workload(doc: Section) -> float | None:
    """`workload: closed` (the default: each client's next trial when its last one ends) or
    `workload: {open: RATE}` (a seeded Poisson process of RATE trials per second per client)."""
    value = doc.raw("workload", "closed")
    if value == "closed":
        return None
    if isinstance(value, dict) and set(value) == {"open"}:
        rate = value["open"]
        if isinstance(rate, int | float) and not isinstance(rate, bool) and rate > 0:
            return float(rate)
    raise doc.error(
        "workload",
        f"{value!r} is not a workload",
        "write closed, or {open: RATE} (trials per second per client)",
    )


def read_contention(doc: Section, clients: int) -> tuple[int, ...]:
    """`contention: [1, 2, 4, 8]`: the numbers of clients that offload each cell at once (default: all)."""
    return read_counts(doc, "contention", [clients] if clients > 1 else [])


def read_counts(doc: Section, key: str, default: list | None = None) -> tuple[int, ...]:
    """A list of positive whole numbers (`contention`, `parallelism`, `io_kb`), each once."""
    value = doc.raw(key, default or [])
    if not isinstance(value, list) or not all(
        isinstance(k, int) and not isinstance(k, bool) and k > 0 for k in value
    ):
        raise doc.error(key, f"{value!r} is not a list of positive numbers", "write e.g. [1, 2, 4]")
    return tuple(value)


def read_reps(doc: Section) -> dict:
    """reps: N (fixed), 'N..M', or {min: N, max: M, precision: F}; ranges are `check`'s."""
    if isinstance(doc.raw("reps"), dict):
        sec = doc.section("reps")
        sec.reject_unknown({"min", "max", "precision"})
        precision = sec.get("precision", float, None)
        return {
            "min_reps": sec.get("min", int),
            "reps": sec.get("max", int),
            "precision": None if precision is None else float(precision),
        }
    try:
        low, high = parse_reps(doc.raw("reps"))
    except UserError as exc:
        raise doc.error("reps", exc.message.split(": ", 1)[-1], exc.fix) from None
    return {"min_reps": low, "reps": high}


def read_device(doc: Section, key: str = "client_device") -> str | None:
    """The device's name or path (`client_device` or `server_device`), checked now so that a bad
    profile is reported before any sweep."""
    if not doc.has(key):
        return None
    if key == "client_device" and doc.has("client_cpu"):
        raise doc.error(
            "client_device", "client_device and client_cpu both describe the client", "keep one of them"
        )
    ref = doc.get(key, str)
    if ref.endswith((".yaml", ".yml")):  # a path: relative to the experiment file
        ref = str((Path(doc.path).parent / ref).resolve())
    try:
        load_device(ref)
    except UserError as exc:
        raise doc.error(key, exc.message, exc.fix) from None
    return ref


def read_dtype(doc: Section) -> str:
    dtype = doc.get("dtype", str, "float64")
    if dtype not in DTYPES:
        raise doc.error("dtype", f"unknown dtype {dtype!r}", f"use one of: {', '.join(DTYPES)}")
    return dtype


def read_validation(sec: Section) -> Validation:
    sec.reject_unknown({"enabled", "tolerance_pct", "duration", "retries"})
    v = Validation(
        enabled=sec.get("enabled", bool, True),
        tolerance_pct=float(sec.get("tolerance_pct", float, 5.0)),
        duration=sec.get("duration", int, 2),
        retries=sec.get("retries", int, 1),
    )
    if v.tolerance_pct <= 0 or v.duration < 1 or v.retries < 0:
        raise sec.error(None, "tolerance_pct must be > 0, duration >= 1 and retries >= 0")
    return v
