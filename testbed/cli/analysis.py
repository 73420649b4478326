"""`testbed analyze`, `compare` and `predict`: a run's analysis, runs side by side, and the decision
border predicted; argument parsing and the calls into `analysis/` (no root needed)."""

from __future__ import annotations

import argparse
from pathlib import Path

from analysis.__main__ import add_arguments as add_analysis_arguments
from analysis.predict import add_arguments as add_predict_arguments


def register(sub) -> None:
    p = sub.add_parser("analyze", help="decision vectors, penalties, energy, plots and report of a run")
    add_analysis_arguments(p)
    p.set_defaults(handler=cmd_analyze)

    p = sub.add_parser("compare", help="runs side by side: the same decisions? means within each other's CI?")
    p.add_argument(
        "run_dirs", type=Path, nargs="+", metavar="RUN_DIR", help="runs; the first is the reference"
    )
    p.add_argument("--out", type=Path, help="where the CSVs go (default: FIRST_RUN/analysis/compare)")
    p.set_defaults(handler=cmd_compare)

    p = sub.add_parser("predict", help="fit per-stage models on a run and predict the decision border")
    add_predict_arguments(p)
    p.set_defaults(handler=cmd_predict)


def cmd_analyze(args: argparse.Namespace) -> int:
    from analysis import analyze

    out = analyze(args.run_dir, plots=not args.no_plots, power=args.power)
    print(f"analysis written to {out}" + ("" if args.no_plots else f" (open {out / 'report.html'})"))
    return 0


def cmd_compare(args: argparse.Namespace) -> int:
    from analysis.compare import compare_runs, summary_lines, write_comparison

    result = compare_runs(args.run_dirs)
    paths = write_comparison(result, args.out or args.run_dirs[0] / "analysis" / "compare")
    print("\n".join(summary_lines(result)))
    print(f"comparison written to {paths[0].parent}")
    return 0


def cmd_predict(args: argparse.Namespace) -> int:
    from analysis.predict import FILES, run_from_args

    out = run_from_args(args)
    print(f"prediction written to {out / FILES['prediction']} (validation: {out / FILES['validation']})")
    return 0
