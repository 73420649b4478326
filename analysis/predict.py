"""`python -m analysis.predict RUN_DIR [--ops ...] [--sizes ...] [--rates ...] [--methods ...]`: predict
the offloading decision from per-stage models fitted on a run, and validate them on held-out cells.

Writes to RUN_DIR/analysis/: prediction.csv (every requested cell: predicted remote time with its 95%
prediction interval, local time, decision, penalty), prediction_model.json (the fitted parameters and
their fit quality, see `analysis.predict_model`), prediction_validation.csv (leave-one-size-out and
leave-one-rate-out over the run's measured cells) and the border figure (`analysis.predict_plots`).
Without grid options the cells are the run's own grid plus a finer one spanning it.
"""

from __future__ import annotations

import argparse
import io
import itertools
import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from analysis.cells import cell_table, method_order
from analysis.decisions import uncertain
from analysis.load import load_run, output_dir
from analysis.predict_model import fit, model_parameters, predict_cells
from contracts.device import work
from contracts.errors import UserError
from contracts.grid import parse_rates, parse_sizes
from contracts.run import Manifest
from contracts.stages import LOCAL

COLUMNS = [
    "op",
    "size",
    "rate_mbps",
    "method",
    "predicted_remote_s",
    "predicted_remote_lo",
    "predicted_remote_hi",
    "predicted_local_s",
    "offload",
    "penalty_s",
    # the other predictions' 95% intervals, and whether the decision is sure at that level
    "predicted_local_lo",
    "predicted_local_hi",
    "penalty_lo",
    "penalty_hi",
    "offload_sure",
]
VALIDATION_COLUMNS = [
    "held_out",
    "value",
    "cells",
    "decision_accuracy",
    "mape_remote_pct",
    "lost_s",
    "uncertain_cells",
]
FILES = {
    "prediction": "prediction.csv",
    "model": "prediction_model.json",
    "validation": "prediction_validation.csv",
}
FINE = 10  # sizes and rates of the finer grid


def predict(
    run_dir: Path,
    *,
    ops: list[str] | None = None,
    sizes: list[int] | None = None,
    rates: list[float] | None = None,
    methods: list[str] | None = None,
    plots: bool = True,
) -> Path:
    """Fit, predict, validate and write the outputs; returns the analysis directory."""
    run = load_run(Path(run_dir))
    trials = run.trials
    model = fit(trials, run.manifest)
    cells = measured_cells(trials, run.manifest)
    grid = request_grid(trials, ops, sizes, rates, methods)
    prediction = predict_cells(model, grid).sort_values(["op", "size", "rate_mbps", "method"])
    validation = validate(trials, run.manifest, cells)
    out_dir = output_dir(run)
    prediction[COLUMNS].to_csv(out_dir / FILES["prediction"], index=False, float_format="%.6g")
    validation.to_csv(out_dir / FILES["validation"], index=False, float_format="%.6g")
    (out_dir / FILES["model"]).write_text(json.dumps(model_parameters(model), indent=2) + "\n")
    from analysis.predict_plots import remove_border_plots, write_border_plots

    remove_border_plots(out_dir)
    if plots:
        write_border_plots(model, cells, out_dir)
    from analysis import analyze  # the report, with its prediction section, from every output at once

    analyze(run.run_dir, plots=plots, out=io.StringIO())
    return out_dir


def measured_cells(trials: pd.DataFrame, manifest: Manifest | None) -> pd.DataFrame:
    """The run's cells with a measured remote mean and a local baseline, each with its
    `emulation_uncertain` (`analysis.emulation_error`), which the validation reads."""
    cells = cell_table(trials, manifest)
    return cells[(cells["n"] > 0) & (cells["local_n"] > 0)].reset_index(drop=True)


def request_grid(trials: pd.DataFrame, ops, sizes, rates, methods) -> pd.DataFrame:
    """The cells to predict: the options' values, the run's own for any option not given; without any
    size or rate option, the run's sizes and rates plus FINE of each spanning them."""
    remote = trials[(trials["method"] != LOCAL) & trials["ok"]]
    run_ops, run_methods = sorted(remote["op"].unique()), method_order(remote["method"].unique())
    for given, known, what in ((ops, run_ops, "op"), (methods, run_methods, "method")):
        unknown = [x for x in given or [] if x not in known]
        if unknown:
            raise UserError(
                f"{what} {unknown[0]} has no successful trials in the run, so nothing to fit it on",
                f"choose among {', '.join(known)}",
            )
    run_sizes = sorted(int(s) for s in remote["size"].unique())
    run_rates = sorted(float(r) for r in remote["rate_mbps"].unique())
    if sizes is None:
        fine = np.linspace(run_sizes[0], run_sizes[-1], FINE).round().astype(int)
        sizes = sorted(set(run_sizes) | {int(s) for s in fine})
    if rates is None:
        fine = np.linspace(run_rates[0], run_rates[-1], FINE)
        rates = sorted(set(run_rates) | {round(float(r), 3) for r in fine})
    rows = itertools.product(ops or run_ops, sizes, rates, methods or run_methods)
    return pd.DataFrame(list(rows), columns=["op", "size", "rate_mbps", "method"])


def validate(trials: pd.DataFrame, manifest: Manifest | None, cells: pd.DataFrame) -> pd.DataFrame:
    """Leave-one-size-out and leave-one-rate-out: refit without the held-out value, predict its cells
    and compare with their measured means; one row per fold, per scheme (value `all`) and overall.

    A cell marked `emulation_uncertain` is left out of the decision's scores (`decision_accuracy`,
    `lost_s`) and counted (`uncertain_cells`): its measured decision is not the device's for sure (the
    emulation's error alone could flip it), so a prediction is neither right nor wrong against it. Its
    remote time still counts in `mape_remote_pct`, and its trials still count in the fit: the error
    is in the stages' work (an encode, a kernel), the same at every rate of its (op, size, method),
    so leaving out the uncertain rates' trials would not take it out of the fit, only thin the data
    near the border, where the prediction matters most."""
    folds = []
    for column, held_out in (("size", "size"), ("rate_mbps", "rate")):
        for value in sorted(cells[column].unique()):
            keep = trials[column] != value
            if column == "rate_mbps":
                keep |= trials["method"] == LOCAL  # the baseline has no rate
            test = cells[cells[column] == value]
            try:
                predicted = predict_cells(fit(trials[keep], manifest), test)
            except UserError:
                continue  # e.g. the only size of an op: nothing left to fit it on
            folds.append((held_out, f"{value:g}", predicted))
    rows = [_scores(h, v, p) for h, v, p in folds]
    for scheme in ("size", "rate"):
        chosen = [p for h, _, p in folds if h == scheme]
        if chosen:
            rows.append(_scores(scheme, "all", pd.concat(chosen)))
    if folds:
        rows.append(_scores("any", "all", pd.concat(p for _, _, p in folds)))
    return pd.DataFrame(rows, columns=VALIDATION_COLUMNS)


def _scores(held_out: str, value: str, p: pd.DataFrame) -> dict:
    measured = p["mean"].to_numpy(dtype=float)
    local = p["local_mean"].to_numpy(dtype=float)
    firm = ~uncertain(p)  # the decisions the emulation could not have flipped (`validate`)
    right = p["offload"].to_numpy() == (measured < local)
    followed = np.where(p["offload"].to_numpy() == 1, measured, local)
    return {
        "held_out": held_out,
        "value": value,
        "cells": len(p),
        "decision_accuracy": float(right[firm].mean()) if firm.any() else float("nan"),
        "mape_remote_pct": float(np.mean(np.abs(p["predicted_remote_s"] - measured) / measured) * 100),
        "lost_s": float(np.sum((followed - np.minimum(measured, local))[firm])),
        "uncertain_cells": int((~firm).sum()),
    }


# ------------------------------------------------------------------------------------------------ CLI
def _list(text: str) -> list[str]:
    return [p.strip() for p in text.split(",") if p.strip()]


def parse_ops(text: str) -> list[str]:
    ops = _list(text)
    for op in ops:
        try:
            work(op, 2)
        except KeyError:
            raise UserError(f"--ops: unknown op {op!r}", "give mul, inv or log") from None
    return ops


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The prediction's arguments, the same for `python -m analysis.predict` and `testbed predict`."""
    parser.add_argument(
        "run_dir", type=Path, help="directory of a run, holding trials.csv (and manifest.json)"
    )
    parser.add_argument("--ops", type=str, help="comma-separated ops to predict (default: the run's)")
    parser.add_argument(
        "--sizes", type=str, help="e.g. 2000 or 400-2000:200 (default: the run's and a finer grid)"
    )
    parser.add_argument(
        "--rates", type=str, help="Mbit/s, e.g. 5,10,20 (default: the run's and a finer grid)"
    )
    parser.add_argument("--methods", type=str, help="comma-separated methods (default: the run's)")
    parser.add_argument("--no-plots", action="store_true", help="only the CSVs and the model")


def run_from_args(args: argparse.Namespace) -> Path:
    return predict(
        args.run_dir,
        ops=parse_ops(args.ops) if args.ops else None,
        sizes=list(parse_sizes(args.sizes, "--sizes")) if args.sizes else None,
        rates=list(parse_rates(args.rates, "--rates")) if args.rates else None,
        methods=_list(args.methods) if args.methods else None,
        plots=not args.no_plots,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m analysis.predict", description=__doc__.split(":", 1)[1].strip()
    )
    add_arguments(parser)
    args = parser.parse_args(argv)
    try:
        out = run_from_args(args)
    except UserError as exc:
        print(f"predict: error: {exc}", file=sys.stderr)
        return 2
    print(f"prediction written to {out / FILES['prediction']} (validation: {out / FILES['validation']})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
