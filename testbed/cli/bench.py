"""`testbed bench`: the tool's own costs against the physical limits (see `benchmarks`).

`benchmarks` sits on top of every layer (it measures the roles and the orchestrator in process), so
nothing imports it but `cmd_bench`, when the command runs: the one dispatch edge the architecture
test allows (`tests/unit/test_architecture.py`, `DISPATCH`).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from testbed.cli.args import RESULTS, load

BENCH_MISSED = 3  # exit status when a target is missed (2 is a user's error)


def register(sub) -> None:
    p = sub.add_parser(
        "bench",
        help="benchmark the tool itself: marshalling, offloading efficiency, memory, orchestration "
        "(exit status 3 when a target is missed)",
    )
    p.add_argument("--quick", action="store_true", help="smaller sizes and fewer repetitions (a minute)")
    p.add_argument(
        "--out", type=Path, help="directory for bench.json, bench.csv, table.txt (default results/bench-*)"
    )
    p.add_argument(
        "--skip-testbed",
        action="store_true",
        help="only the parts that need no root (codecs, memory); the testbed rows say skipped",
    )
    p.add_argument(
        "--inventory",
        "-i",
        type=Path,
        default=argparse.SUPPRESS,  # the top-level --inventory unless given here
        help="inventory of the testbed to use (default: inventory.yaml); a testbed that is down is "
        "brought up and taken down again",
    )
    p.set_defaults(handler=cmd_bench, busy=lambda a: not a.skip_testbed)


def cmd_bench(args: argparse.Namespace) -> int:
    from benchmarks import runner
    from testbed.run_files import new_run_id

    inv = None if args.skip_testbed else load(args)
    out = args.out or RESULTS / new_run_id("bench")
    rows, doc = runner.run_bench(inv, out, quick=args.quick, skip_testbed=args.skip_testbed)
    print(runner.format_table(rows, doc["environment"], args.quick))
    print(f"written: {out / 'bench.json'}, {out / 'bench.csv'}, {out / 'table.txt'}")
    missed = runner.summary(rows)["miss"]
    if missed:  # a verdict, not a figure: a script or CI step that runs the bench sees the regression
        print(f"bench: {len(missed)} target(s) missed: {', '.join(missed)}", file=sys.stderr)
        return BENCH_MISSED
    return 0
