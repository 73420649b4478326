"""`testbed stream`: a task stream against a replayed link trace, once per decision policy, then its
analysis (`testbed.online.task_stream`, `analysis.online`)."""

from __future__ import annotations

import argparse
from pathlib import Path

from testbed.cli.args import RESULTS, always, load, open_lab, require_root


def register(sub) -> None:
    p = sub.add_parser(
        "stream",
        help="decisions over time: a task stream on a replayed trace, per policy (local, remote, online)",
    )
    p.add_argument("stream", type=Path, help="stream file, e.g. experiments/online-on-off.yaml")
    p.add_argument(
        "--model",
        type=Path,
        metavar="RUN_DIR",
        help="the sweep whose devices the stream emulates and whose predictor the online policy uses "
        "(default: the stream file's `model`)",
    )
    p.add_argument("--results", type=Path, default=RESULTS, help="where runs are written (default results/)")
    p.add_argument("--no-analyze", action="store_true", help="do not run the analysis at the end")
    p.set_defaults(handler=cmd_stream, busy=always)


def cmd_stream(args: argparse.Namespace) -> int:
    from testbed.online.task_stream import load_stream, run_stream

    spec = load_stream(args.stream)
    require_root()
    run_dir = run_stream(open_lab(load(args)), spec, args.model, args.results)
    print(f"stream {spec.name}: {run_dir / 'tasks.csv'}")
    if not args.no_analyze:
        from analysis.online import analyze_stream

        out = analyze_stream(run_dir)
        print(f"analysis: {out} (open {out / 'report.html'})")
    return 0
