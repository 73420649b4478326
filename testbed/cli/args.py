"""What the command groups share: the inventory, link flags and their resolution, rate lists, JSON
output, and the lab (opened through lazy imports, so building the parser loads no pyroute2 or fabric).

It imports none of the command modules; they import it.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from pathlib import Path

from contracts.errors import UserError
from contracts.grid import parse_delays, parse_losses
from contracts.profiles import LinkSpec, check_burst
from contracts.units import format_rate, parse_rate
from testbed.inventory import Inventory, load_inventory

RESULTS = Path("results")  # where runs, validations and benchmarks are written unless told


def always(args: argparse.Namespace) -> bool:
    """`busy=` of a command that always needs the testbed to itself (see testbed.lock)."""
    return True


def load(args: argparse.Namespace) -> Inventory:
    return load_inventory(inventories(args)[0])


def inventories(args: argparse.Namespace) -> list[Path | None]:
    """The inventory files given (`--inventory` may be repeated; a command's own is one path), or
    [None]: the default."""
    given = args.inventory
    if isinstance(given, list):
        return given or [None]
    return [given]


def open_lab(inv: Inventory):
    """The lab of the inventory's backend (`testbed.backends.open_lab`)."""
    from testbed.backends import open_lab

    return open_lab(inv)


def require_root() -> None:
    from testbed.backends.lab import require_root

    require_root()


def add_link_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--rate", help="both directions, e.g. 20mbit (a bare number is Mbit/s)")
    p.add_argument("--up-rate", help="client->server rate")
    p.add_argument("--down-rate", help="server->client rate")
    p.add_argument("--ceil", help="HTB ceil (default: the rate)")
    p.add_argument("--burst", type=int, help="HTB burst in bytes (default: rate/HZ + one frame)")
    p.add_argument("--delay", help="one-way delay per direction, e.g. 50 or 50ms (needs sch_netem)")
    p.add_argument("--loss", help="loss in %% per direction, e.g. 5 (needs sch_netem)")
    p.add_argument(
        "--serialize",
        action="store_true",
        default=None,
        help="hold each packet for its bytes at the rate, as a line does (netem's rate; needs sch_netem)",
    )


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
        link = replace(link, delay_ms=_one(parse_delays(args.delay, "--delay"), "--delay", "--delays"))
    if args.loss is not None:
        link = replace(link, loss_pct=_one(parse_losses(args.loss, "--loss"), "--loss", "--losses"))
    if getattr(args, "serialize", None):
        link = replace(link, serialize=True)
    if link.ceil is not None and link.ceil < max(link.up_rate, link.down_rate):
        raise UserError(f"ceil {format_rate(link.ceil)} is below the rate", "give a ceil at least the rate")
    return link


def _one(values: tuple[float, ...], flag: str, lists: str) -> float:
    """The one value a shaping takes (a sweep or a validation takes lists: `lists`)."""
    if len(values) != 1:
        raise UserError(f"{flag} takes one value", f"give one; `sweep` and `validate` take {lists} LIST")
    return values[0]


def print_json(data) -> None:
    json.dump(data, sys.stdout, indent=2, default=str)
    print()
