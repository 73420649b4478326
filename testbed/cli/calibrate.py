"""`testbed calibrate` (how closely a host emulates a device profile) and `speed-table` (local matrix
multiplication times on client and server): their parsers and handlers."""

from __future__ import annotations

import argparse

from contracts.calibration import DECODE, ENCODE, KERNEL, Calibration, CalibrationRow
from contracts.device import Mode
from contracts.errors import UserError
from contracts.grid import parse_sizes
from contracts.hosts import Role
from contracts.profiles import MIN_CPU_QUOTA
from contracts.stages import SERVER_START
from testbed.cli.args import (
    always,
    load,
    open_lab,
    print_json,
    require_root,
)
from testbed.devices import load_device


def register(sub) -> None:
    p = sub.add_parser(
        "speed-table", help="local matrix multiplication times and GFLOP/s on client and server"
    )
    p.add_argument("--sizes", default="200,400,800", help="matrix sizes (default 200,400,800)")
    p.add_argument("--reps", type=int, default=3)
    p.set_defaults(handler=cmd_speed_table, busy=always)

    p = sub.add_parser("calibrate", help="how closely the client (or server) host emulates a device profile")
    p.add_argument(
        "--device", required=True, help="a device profile (name in experiments/devices, or a file)"
    )
    p.add_argument(
        "--host",
        choices=("client", "server"),
        default="client",
        help="whose work: the client's (default) or the server's (decode the request, compute, encode the "
        "response; scaled mode only)",
    )
    p.add_argument("--sizes", default="200,400,800", help="matrix sizes (default 200,400,800)")
    p.add_argument("--mode", default="scaled", help="scaled (default) or throttle")
    p.add_argument("--ops", default="mul", help="operations (default mul)")
    p.add_argument("--codecs", default="json,ujson,raw", help="codecs (default json,ujson,raw)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument(
        "--slow-host",
        type=float,
        metavar="FRACTION",
        help="with --mode scaled: hold the calibration under an extra CPU quota of this fraction of a "
        "core, to show the device's times do not depend on the host's speed",
    )
    p.set_defaults(handler=cmd_calibrate, busy=always)


def cmd_calibrate(args: argparse.Namespace) -> int:
    return calibrate_device(args, list(parse_sizes(args.sizes, "--sizes")))


def calibrate_device(args: argparse.Namespace, sizes: list[int]) -> int:
    """`calibrate --device`: how closely the client host reaches the device's targets."""
    from contracts.device import Grid
    from testbed.sweep import device_emulation

    device = load_device(args.device)
    slow_host = args.slow_host
    if slow_host is not None and not MIN_CPU_QUOTA <= slow_host <= 1:
        raise UserError(
            f"--slow-host {slow_host:g} is not a fraction of one core between {MIN_CPU_QUOTA} and 1",
            "e.g. --slow-host 0.5 for a host half as fast",
        )
    ops = [o for o in args.ops.split(",") if o.strip()]
    codecs = [c for c in args.codecs.split(",") if c.strip()]
    if args.host == Role.SERVER and (args.mode != Mode.SCALED or slow_host is not None):
        raise UserError("the server is emulated in scaled mode only", "use --mode scaled and no --slow-host")
    require_root()
    inv = load(args)
    if args.host == Role.CLIENT:
        inv = inv.with_client_cpu(device_emulation.client_cpu(device, args.mode))
    else:  # the calibration computes with the device's BLAS threads, as the server does in a sweep
        inv = inv.with_server_blas(device.blas_threads)
    lab = open_lab(inv)
    lab.require_up()
    grid = (
        device_emulation.server_grid(lab, device, ops, sizes, codecs)
        if args.host == Role.SERVER
        else Grid.of(ops, sizes, codecs)
    )
    result = device_emulation.emulate(lab, device, args.mode, grid, slow_host)
    if args.json:
        print_json({"device": device.name, "host": args.host, "mode": args.mode, **json_tables(result)})
    else:
        print(device_emulation.format_calibration(result))
    return 0


def json_tables(result: Calibration) -> dict:
    """`calibrate --json`'s tables: the kernels (one for every method, or on the cgi stack each
    method's own, its key says which), each codec's stages, and the cgi stack's start-up."""
    keys = ("op", "size", "target_s", "achieved_s", "error_pct", "flagged")
    # throttle: the quota each work ran under, its period, why it is flagged, the first check's error;
    # scaled: how many samples it took to know the work's mean
    extra = ("key", "quota", "period_s", "reason", "first_error_pct", "samples")

    def row(r: CalibrationRow) -> dict:
        fields = r.as_dict()
        return {**{k: fields[k] for k in keys}, **{k: fields[k] for k in extra if k in fields}}

    stack = [{"cost": r.work, **row(r)} for r in result.rows if r.kind == SERVER_START]
    return {
        **({"slow_host": result.slow_host} if result.slow_host is not None else {}),
        **({"quotas": result.quotas} if result.quotas is not None else {}),
        "rows": [row(r) for r in result.rows if r.kind == KERNEL],
        "codecs": [
            {"codec": r.codec, "stage": r.kind, **row(r)} for r in result.rows if r.kind in (ENCODE, DECODE)
        ],
        **({"stack": stack} if stack else {}),
    }


def cmd_speed_table(args: argparse.Namespace) -> int:
    from testbed.sweep.speed_table import format_speed_table, speed_table

    sizes = list(parse_sizes(args.sizes, "--sizes"))
    require_root()
    lab = open_lab(load(args))
    lab.require_up()
    rows = speed_table(lab, sizes, args.reps)
    print(format_speed_table(rows, lab.inv.client_cpu.describe()))
    return 0
