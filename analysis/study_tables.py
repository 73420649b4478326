"""The multi-language and embedded gRPC studies' own figures beside a run of their grids.

`python -m analysis.study_tables RUN_DIR` prints, as Markdown, a run of `experiments/multilang-study.yaml`
or `experiments/embedded-study.yaml` (which the manifest's experiment name says) beside what its study
published (../shared/papers/): per case, the testbed's local and remote times, the network's share of
the remote time, and the study's figure for the same case. The studies' numbers are written here once,
each with the table or section it comes from; what the testbed measured comes from the run's
`analysis/cells.csv` alone, so the tables are redone from a shipped run without root.

What each study gives: the multi-language study times its cases only in charts (Figures 2 and 3, no
values), and states the speed-ups at 1000x1000 (Go "around 39 times", Python "around 15 times") and
the phone's energy per case (Tables 3 and 4, as uAh and as the gain against local); the embedded study
gives the mean total time of each case (Tables 2 and 3), locally on its phone and offloaded to its
BeagleBone Black under Debian.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd

from contracts.errors import UserError
from contracts.grid import size_label
from contracts.run import read_manifest
from contracts.stages import label_server

# The multi-language study (de Matos, Rego and Trinta, CLOSER 2021): the phone's energy per case,
# uAh over its 33 runs, Table 3 (MatrixGRPC) and Table 4 (BenchImageGRPC); and section 5.1's speed-ups.
ML_ENERGY_UAH = {
    ("mul", "400"): {"local": 23908.68, "go": 6578.56, "cpp": 6938.14, "java": 7435.55, "python": 8347.34},
    ("mul", "700"): {"local": 383591.64, "go": 19273.02, "cpp": 19980.85, "java": 23848.72, "python": 28277.73},
    ("mul", "1000"): {"local": 1173827.79, "go": 41568.77, "cpp": 42606.12, "java": 55925.93, "python": 67494.83},
    ("gray", "0.3MP"): {"local": 3796.35, "go": 4177.95, "cpp": 4331.52, "java": 4599.55, "python": 4506.77},
    ("gray", "4MP"): {"local": 40786.24, "go": 9401.84, "cpp": 10156.79, "java": 10382.93, "python": 9794.64},
    ("gray", "8MP"): {"local": 84483.09, "go": 18813.86, "cpp": 19847.76, "java": 21269.56, "python": 18810.57},
}  # fmt: skip
ML_SPEEDUP_1000 = {"go": 39.0, "python": 15.0}  # section 5.1: local over remote time at 1000x1000
# The embedded study (Araujo, Maia, Rego and de Souza, ADVANCE 2020): mean total seconds, Table 2
# (mul 1000) and Table 3 (the image's three filters), locally on the phone (the row's language's
# client) and offloaded to the BeagleBone Black under Debian.
EMB_SECONDS = {
    "mul": {
        "cpp": (16.07, 10.36), "python": (18.21, 12.94), "java": (20.07, 17.41), "go": (19.97, 17.39),
        "ruby": (19.11, 18.19),
    },
    "filters3": {"python": (6.89, 7.24), "cpp": (6.81, 5.66)},
}  # fmt: skip
ML_ORDER = ("go", "cpp", "java", "python")  # each study's servers in the order its tables give them
EMB_ORDER = ("cpp", "python", "java", "go", "ruby")


def load_cells(run: Path) -> pd.DataFrame:
    """The run's remote cells with their server and size label (the first rate: the grids have one)."""
    cells = pd.read_csv(run / "analysis" / "cells.csv")
    cells = cells[cells["rate_mbps"] == cells["rate_mbps"].min()].copy()
    cells["server"] = [label_server(m) for m in cells["method"]]
    cells["label"] = [size_label(int(s)) for s in cells["size"]]
    return cells


def _f(value: float, digits: int = 2) -> str:
    return "" if pd.isna(value) else f"{value:.{digits}f}"


def _gain(remote: float, local: float) -> str:
    """Energy saved by offloading, as the studies' '% Gain' columns: 1 - remote / local."""
    return "" if pd.isna(remote) or pd.isna(local) else f"{100 * (1 - remote / local):.1f}%"


def _cases(cells: pd.DataFrame, order: tuple[str, ...]):
    """Each case of the run as (op, size label, server, its cell): ops and sizes in the run's order, the
    servers in the study's."""
    for (op, label), group in cells.groupby(["op", "label"], sort=False):
        for server in [s for s in order if s in set(group["server"])]:
            yield op, label, server, group[group["server"] == server].iloc[0]


def multilang_tables(cells: pd.DataFrame) -> str:
    lines = [
        "| op | size | server | local s | remote s | network s | local / remote | network share | energy gain | "
        "study: energy gain (Tables 3, 4) | study: local / remote |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for op, label, server, c in _cases(cells, ML_ORDER):
        study = ML_ENERGY_UAH.get((op, label), {})
        speedup = ML_SPEEDUP_1000.get(server) if (op, label) == ("mul", "1000") else None
        lines.append(
            f"| {op} | {label} | {server} | {_f(c['local_mean'])} | {_f(c['mean'])} | {_f(c['t_comm_mean'])} | "
            f"{_f(c['local_mean'] / c['mean'], 1)} | {_f(100 * c['t_comm_mean'] / c['mean'], 0)}% | "
            f"{_gain(c['energy_remote_j'], c['energy_local_j'])} | "
            f"{_gain(study.get(server), study.get('local'))} | {'' if speedup is None else f'{speedup:g}'} |"
        )
    return "\n".join(lines)


def embedded_tables(cells: pd.DataFrame) -> str:
    lines = [
        "| op | size | server | local s | remote s | network s | network share | study: local s | "
        "study: remote s (Debian) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for op, label, server, c in _cases(cells, EMB_ORDER):
        local, remote = EMB_SECONDS.get(op, {}).get(server, (None, None))
        lines.append(
            f"| {op} | {label} | {server} | {_f(c['local_mean'])} | {_f(c['mean'])} | {_f(c['t_comm_mean'])} | "
            f"{_f(100 * c['t_comm_mean'] / c['mean'], 0)}% | {'' if local is None else f'{local:.2f}'} | "
            f"{'' if remote is None else f'{remote:.2f}'} |"
        )
    return "\n".join(lines)


TABLES = {"multilang-study": multilang_tables, "embedded-study": embedded_tables}


def study_tables(run: Path) -> str:
    """The run beside its study, as Markdown; which study from the run's experiment name."""
    if not (run / "manifest.json").exists() or not (run / "analysis" / "cells.csv").exists():
        raise UserError(
            f"{run} holds no analysed run", "give a run directory after `testbed analyze RUN_DIR`"
        )
    name = read_manifest(run / "manifest.json").experiment.name
    if name not in TABLES:
        raise UserError(
            f"{run} is a run of {name!r}, not of a study's grid", f"give a run of {', '.join(TABLES)}"
        )
    return TABLES[name](load_cells(run))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m analysis.study_tables", description=__doc__.splitlines()[0]
    )
    parser.add_argument(
        "run", type=Path, help="a run of experiments/multilang-study.yaml or embedded-study.yaml"
    )
    try:
        print(study_tables(parser.parse_args(argv).run))
    except UserError as exc:
        print(f"study_tables: error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
