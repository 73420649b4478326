"""`testbed`: parse arguments, turn them into typed configuration, call the library, print.

Each command family has its module here (`lab`: up, down, status, exec; `link`: shape and traces,
validate; `calibrate`: calibrate, speed-table; `sweep`; `analysis`: analyze, compare, predict;
`stream`; `bench`; `guest`: a stock kernel under QEMU), which registers its subcommands with their
handlers (`set_defaults(handler=...)`); a handler imports what is heavy (the lab, the sweep, the
analysis, the benchmarks) only when it runs.

Errors a user can fix (UserError) are printed as one line with the fix and exit status 2; anything
else is a bug and keeps its traceback.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from contracts.errors import UserError
from testbed.cli import analysis, bench, calibrate, guest, lab, link, stream, sweep

# in the order `testbed --help` lists them
GROUPS = (lab, link, calibrate, sweep, analysis, stream, bench, guest)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="testbed", description="Network-emulation testbed for offloading experiments"
    )
    parser.add_argument(
        "--inventory",
        "-i",
        type=Path,
        action="append",
        default=None,
        help="inventory file (default: inventory.yaml at the repository root); `sweep` takes several, "
        "one testbed (or --replicas) each, other commands the first",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for group in GROUPS:
        group.register(sub)
    return parser


def run_locked(args: argparse.Namespace, argv: list[str] | None) -> int:
    """A command that needs the testbed to itself (its parser sets `busy`): run it under the lock."""
    from testbed.cli.args import load, require_root
    from testbed.lock import held

    inv = load(args)
    require_root()  # every such command changes the machine; the lock lives in /run
    what = "testbed " + " ".join(sys.argv[1:] if argv is None else argv)
    with held(inv.prefix, what):
        return args.handler(args)


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        busy = getattr(args, "busy", None)
        if busy is not None and busy(args):
            return run_locked(args, argv)
        return args.handler(args)
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
