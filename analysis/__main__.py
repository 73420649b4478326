"""`python -m analysis RUN_DIR [--no-plots] [--power FILE]`: the analysis without the testbed CLI (e.g. on a laptop)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from analysis import analyze
from contracts.errors import UserError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The analysis' arguments, the same for `python -m analysis` and `testbed analyze`."""
    parser.add_argument(
        "run_dir", type=Path, help="directory of a run, holding trials.csv (and manifest.json)"
    )
    parser.add_argument(
        "--no-plots", action="store_true", help="only the CSVs, summary and a report without plots"
    )
    parser.add_argument(
        "--power",
        type=Path,
        help="power figures for the energy view (a file with a power: section; default: the run's device's)",
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m analysis", description=__doc__.split(":", 1)[1].strip())
    add_arguments(parser)
    args = parser.parse_args(argv)
    try:
        out = analyze(args.run_dir, plots=not args.no_plots, power=args.power)
    except UserError as exc:
        print(f"analysis: error: {exc}", file=sys.stderr)
        return 2
    print(f"analysis written to {out} (open {out / 'report.html'})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
