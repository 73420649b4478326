"""`testbed`: parse arguments, turn them into typed configuration, call the library, print.

Errors a user can fix (UserError) are printed as one line with the fix and exit status 2; anything
else is a bug and keeps its traceback.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
from dataclasses import replace
from pathlib import Path

from contracts.errors import UserError
from contracts.profiles import LinkSpec, check_burst
from contracts.units import format_rate, parse_rate
from testbed.inventory import Inventory, load_inventory


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="testbed", description="Network-emulation testbed for offloading experiments"
    )
    parser.add_argument(
        "--inventory",
        "-i",
        type=Path,
        default=None,
        help="inventory file (default: inventory.yaml at the repository root)",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("up", help="bring up client, appliance and server")
    p.add_argument("--no-server", action="store_true", help="do not start the offload server")

    sub.add_parser("down", help="remove everything the tool created (idempotent, also after a crash)")

    p = sub.add_parser("shape", help="set the link's rate (HTB on both appliance egress ports)")
    add_link_flags(p)
    p.add_argument("--dry-run", action="store_true", help="print the tc commands instead of applying them")

    p = sub.add_parser("validate", help="measure the shaped link with iperf3 in both directions")
    p.add_argument(
        "--rates", default=None, help="comma-separated rates (Mbit/s or with units); default: the link's"
    )
    p.add_argument(
        "--duration", type=int, default=3, help="seconds per direction (default 3, after 1 omitted)"
    )
    p.add_argument("--tolerance", type=float, default=5.0, help="allowed deviation in %% (default 5)")
    p.add_argument(
        "--json", type=Path, default=None, help="write the results here (default results/validate-*.json)"
    )

    p = sub.add_parser("status", help="hosts, addresses, bridge, shaping, client CPU limit")
    p.add_argument("--json", action="store_true")

    p = sub.add_parser("exec", help="run a command on a host: testbed exec client -- CMD ...")
    p.add_argument("host")
    p.add_argument("cmd", nargs=argparse.REMAINDER)
    p.add_argument("--unlimited", action="store_true", help="on the client: run outside the CPU limit")

    p = sub.add_parser("calibrate", help="local matrix multiplication times on client and server")
    p.add_argument("--sizes", default="200,400,800", help="matrix sizes (default 200,400,800)")
    p.add_argument("--reps", type=int, default=3)

    from testbed.commands import register_more  # sweep, analyze, bench

    register_more(sub)
    return parser


def add_link_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--rate", help="both directions, e.g. 20mbit (a bare number is Mbit/s)")
    p.add_argument("--up-rate", help="client->server rate")
    p.add_argument("--down-rate", help="server->client rate")
    p.add_argument("--ceil", help="HTB ceil (default: the rate)")
    p.add_argument("--burst", type=int, help="HTB burst in bytes (default: rate/HZ + one frame)")
    p.add_argument("--delay", type=float, help="one-way delay in ms per direction (needs sch_netem)")
    p.add_argument("--loss", type=float, help="loss in %% per direction (needs sch_netem)")


def resolve_link(base: LinkSpec, args: argparse.Namespace) -> LinkSpec:
    """Defaults < inventory < flags, in this one place."""
    link = base
    if args.rate is not None:
        rate = parse_rate(args.rate, "--rate")
        link = replace(link, up_rate=rate, down_rate=rate)
    if args.up_rate is not None:
        link = replace(link, up_rate=parse_rate(args.up_rate, "--up-rate"))
    if args.down_rate is not None:
        link = replace(link, down_rate=parse_rate(args.down_rate, "--down-rate"))
    if args.ceil is not None:
        link = replace(link, ceil=parse_rate(args.ceil, "--ceil"))
    if args.burst is not None:
        try:
            link = replace(link, burst=check_burst(args.burst))
        except UserError as exc:
            raise UserError(f"--burst: {exc.message}", exc.fix) from None
    if args.delay is not None:
        if args.delay < 0:
            raise UserError(f"--delay {args.delay} is negative")
        link = replace(link, delay_ms=args.delay)
    if args.loss is not None:
        if not 0 <= args.loss <= 100:
            raise UserError(f"--loss {args.loss} is not a percentage")
        link = replace(link, loss_pct=args.loss)
    if link.ceil is not None and link.ceil < max(link.up_rate, link.down_rate):
        raise UserError(f"ceil {format_rate(link.ceil)} is below the rate", "give a ceil at least the rate")
    return link


def parse_rate_list(text: str) -> list[int]:
    items = [t for t in text.split(",") if t.strip()]
    if not items:
        raise UserError(f"no rates in {text!r}", "give e.g. --rates 10,20,40")
    return [parse_rate(t, "rate") for t in items]


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return dispatch(args)
    except UserError as exc:
        print(f"testbed: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("testbed: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # the reader went away (`testbed status | head`): not an error worth a traceback
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141


def dispatch(args: argparse.Namespace) -> int:
    from testbed import commands, sweep_cli

    handler = getattr(args, "handler", None)  # set by subcommands registered from their own modules
    if handler is None:
        name = f"cmd_{args.command}"
        handler = getattr(commands, name, None) or getattr(sweep_cli, name)
    return handler(args)


def load(args: argparse.Namespace) -> Inventory:
    return load_inventory(args.inventory)


def print_json(data) -> None:
    json.dump(data, sys.stdout, indent=2, default=str)
    print()


def quote(argv: list[str]) -> str:
    return shlex.join(argv)
