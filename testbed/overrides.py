"""An experiment with the command line's flags over it (`testbed sweep --reps 10 ...`): each flag given
replaces the file's setting, checked by the same rules as the file (`testbed.experiment.check`)."""

from __future__ import annotations

from dataclasses import replace

from contracts.errors import UserError
from contracts.grid import parse_delays, parse_losses, parse_rates, parse_sizes
from contracts.operands import parse_int_range
from contracts.profiles import CpuProfile, check_cpu_quota
from contracts.run import Experiment
from contracts.stages import (
    DTYPES,
    GRPC_SERVERS,
)
from testbed.devices import load_device
from testbed.experiment import check, known_methods, known_ops, parse_mode, parse_names
from testbed.experiment_fields import parse_reps


def override(exp: Experiment | None, flags: dict) -> Experiment:
    """Flags over file over defaults, in this one place. `flags` holds only what the user gave."""
    if exp is None:
        missing = [k for k in ("ops", "sizes", "rates", "methods", "reps") if flags.get(k) is None]
        if missing:
            raise UserError(
                f"no experiment file and no --{', --'.join(missing)}",
                "give an experiment file (e.g. experiments/smoke.yaml) or all of those flags",
            )
        exp = Experiment(name="adhoc", ops=(), sizes=(), rates_mbps=(), methods=(), reps=1)
    changes: dict = {}
    if exp.client_devices and (flags.get("device") is not None or flags.get("cpu_quota") is not None):
        flag = "--device" if flags.get("device") is not None else "--cpu-quota"
        raise UserError(
            f"{flag} gives the client one device, and the experiment's clients are of several",
            f"drop {flag}, or edit the experiment's clients",
        )
    if flags.get("ops") is not None:
        changes["ops"] = parse_names(flags["ops"], "--ops", known_ops(), "op")
    if flags.get("sizes") is not None:
        changes["sizes"] = parse_sizes(flags["sizes"], "--sizes")
    if flags.get("rates") is not None:
        changes["rates_mbps"] = parse_rates(flags["rates"], "--rates")
    if flags.get("delays") is not None:
        changes["delays_ms"] = parse_delays(flags["delays"], "--delays")
    if flags.get("losses") is not None:
        changes["losses_pct"] = parse_losses(flags["losses"], "--losses")
    if flags.get("methods") is not None:
        changes["methods"] = parse_names(flags["methods"], "--methods", known_methods(), "method")
    if flags.get("reps") is not None:
        changes["min_reps"], changes["reps"] = parse_reps(flags["reps"], "--reps")
        if changes["min_reps"] is None:
            changes["precision"] = None  # a fixed count replaces the file's adaptive settings
    if flags.get("precision") is not None:
        changes["precision"] = flags["precision"]
    for key in ("warmup", "seed", "replicas"):
        if flags.get(key) is not None:
            changes[key] = flags[key]  # ranges: `check`, below, as for a file
    if flags.get("dtype") is not None:
        if flags["dtype"] not in DTYPES:
            raise UserError(f"--dtype: unknown dtype {flags['dtype']!r}", f"use one of: {', '.join(DTYPES)}")
        changes["dtype"] = flags["dtype"]
    if flags.get("int_range") is not None:
        changes["int_range"] = parse_int_range(flags["int_range"], "--int-range")  # fit: `check`
    if flags.get("image") is not None:
        changes["image"] = flags["image"]  # read, and its size added, in `check`
    if flags.get("codec_text") is not None:
        changes["codec_text"] = flags["codec_text"]  # checked in `check`, as a file's
    if flags.get("cpu_quota") is not None:
        quota = flags["cpu_quota"]
        try:
            check_cpu_quota(quota)
        except UserError as exc:
            raise UserError(f"--cpu-quota: {exc.message}", exc.fix) from None
        base = exp.client_cpu or CpuProfile()
        changes["client_cpu"] = replace(base, cpu_quota=quota)
        changes["client_device"] = None  # the old host-relative profile replaces a device
    if flags.get("device") is not None:
        load_device(flags["device"])
        changes["client_device"] = flags["device"]
        changes["client_cpu"] = None
    if flags.get("mode") is not None:
        changes["mode"] = parse_mode(flags["mode"], lambda problem, fix: UserError(f"--mode: {problem}", fix))
    if flags.get("server_device") is not None:
        load_device(flags["server_device"])
        changes["server_device"] = flags["server_device"]
    if flags.get("connection") is not None:
        changes["connection"] = flags["connection"]  # checked in `check`, as a file's
    if flags.get("no_validate"):
        changes["validation"] = replace(exp.validation, enabled=False)
    if flags.get("name") is not None:
        changes["name"] = flags["name"]
    if flags.get("server_stack") is not None:
        changes["server_stack"] = flags["server_stack"]  # checked in `check`, as a file's
    if flags.get("servers") is not None:
        changes["servers"] = parse_names(flags["servers"], "--servers", GRPC_SERVERS, "server")
    return check(replace(exp, **changes))
