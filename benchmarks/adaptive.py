"""Adaptive against fixed repetitions: the fraction of trials saved, and whether every significant
decision of a fixed run at the maximum is reproduced.

Two comparisons, both printed:
- **runs**: a fixed run at `max` repetitions and an adaptive run of the same grid, each measured for
  real (`python -m benchmarks.adaptive --run EXPERIMENT` makes both on the embedded testbed; or give
  two existing run directories). Different trials, so this is also a test against the noise;
- **replay**: the stopping rule and the sweep's rounds (`testbed.sweep.rounds`) replayed over the fixed run's
  own trials, taking each trial's measured time when the rounds ask for it: the same data, fewer trials.

A decision is reproduced when the adaptive cell says the same offload/stay-local as the fixed cell.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pandas as pd

from analysis.cells import KEYS, cell_table
from analysis.load import load_run
from analysis.stopping import PRECISE, SIGNIFICANT
from contracts.errors import UserError
from contracts.run import Manifest
from contracts.stages import offload_label
from contracts.worker_api import TrialResult
from testbed.experiment import Experiment, load_experiment
from testbed.sweep.bookkeeping import trial_row
from testbed.sweep.plan import plan_trials
from testbed.sweep.rounds import Rounds

REPO = Path(__file__).resolve().parent.parent


def compare(
    fixed_trials: pd.DataFrame, fixed_cells: pd.DataFrame, trials: pd.DataFrame, cells: pd.DataFrame
) -> dict:
    """Trials saved and decisions reproduced by the adaptive `cells` (from `trials`) against the fixed ones."""
    f = fixed_cells.set_index(KEYS)
    a = cells.set_index(KEYS).reindex(f.index)
    decided = f[f["significant"].fillna(False).astype(bool)].index
    lost = [k for k in decided if pd.isna(a.at[k, "offload"]) or a.at[k, "offload"] != f.at[k, "offload"]]
    early = a[a["stop_reason"].isin([SIGNIFICANT, PRECISE])]
    unsure = [k for k in early.index if not _true(early.at[k, "significant"])]
    return {
        "fixed_trials": len(fixed_trials),
        "adaptive_trials": len(trials),
        "fraction_of_trials": len(trials) / len(fixed_trials),
        "fraction_saved": 1 - len(trials) / len(fixed_trials),
        "significant_fixed": len(decided),
        "reproduced": len(decided) - len(lost),
        "not_reproduced": [list(k) for k in lost],
        "stopped_early": len(early),
        "stopped_early_not_significant": [list(k) for k in unsure],
        "stop_reasons": {str(r): int(n) for r, n in cells["stop_reason"].value_counts().items()},
        "borderline": [  # cells the fixed run could not decide: where the adaptive run spent its trials
            {"cell": list(k), "fixed_n": int(f.at[k, "n_trials"]), "adaptive_n": int(a.at[k, "n_trials"])}
            for k in f.index
            if not _true(f.at[k, "significant"])
        ],
    }


def _true(flag) -> bool:
    return bool(pd.notna(flag) and flag)


def replay(fixed_dir: Path, min_reps: int, precision: float | None = None) -> tuple[pd.DataFrame, Manifest]:
    """The fixed run's trials an adaptive sweep with `min_reps` would have run, and its manifest."""
    run = load_run(fixed_dir)
    if run.manifest is None:
        raise UserError(f"{fixed_dir} has no manifest.json", "replay a run made by testbed sweep")
    exp = replace(run.manifest.experiment, min_reps=min_reps, precision=precision)
    t = run.trials
    rates = [None if pd.isna(r) else float(r) for r in t["rate_mbps"]]
    keys = list(zip(t["op"], t["size"], rates, t["method"], t["rep"].astype(int), strict=True))
    measured = {k: (v if ok else None) for k, ok, v in zip(keys, t["ok"], t["t_total"], strict=True)}
    rounds = Rounds(exp, plan_trials(exp), {})
    chosen = set()
    for _, block in rounds.blocks():
        for trial in block:
            key = (
                trial.op,
                trial.size,
                trial.rate_mbps,
                offload_label(trial.method, trial.server),
                trial.rep,
            )
            if key not in measured:
                raise UserError(f"{fixed_dir} lacks {key}", "replay a complete fixed run")
            rounds.record(
                trial_row("replay", trial, TrialResult(ok=measured[key] is not None, t_total=measured[key]))
            )
            chosen.add(key)
    taken = t[[k in chosen for k in keys]]
    return taken, replace(run.manifest, experiment=exp)


def report(fixed_dir: Path, adaptive_dir: Path | None, min_reps: int | None = None) -> dict:
    fixed = load_run(fixed_dir)
    fixed_cells = cell_table(fixed.trials, fixed.manifest)
    out: dict = {"fixed_run": str(fixed_dir)}
    if adaptive_dir is not None:
        adaptive = load_run(adaptive_dir)
        out["adaptive_run"] = str(adaptive_dir)
        out["runs"] = compare(
            fixed.trials, fixed_cells, adaptive.trials, cell_table(adaptive.trials, adaptive.manifest)
        )
        min_reps = min_reps or adaptive.manifest.experiment.min_reps
    taken, manifest = replay(fixed_dir, min_reps)
    out["replay"] = compare(fixed.trials, fixed_cells, taken, cell_table(taken, manifest))
    return out


def sweep(inventory: Path, experiment: Path, results: Path, name: str, *extra: str) -> Path:
    before = set(results.glob(f"{name}-*"))
    argv = [sys.executable, "-m", "testbed", "--inventory", str(inventory), "sweep", str(experiment)]
    subprocess.run(
        [*argv, "--name", name, "--results", str(results), "--no-analyze", *extra], check=True, cwd=REPO
    )
    (run_dir,) = set(results.glob(f"{name}-*")) - before
    return run_dir


def print_summary(out: dict) -> None:
    for what, title in (
        ("runs", "adaptive run vs fixed run"),
        ("replay", "the rule replayed on the fixed run"),
    ):
        if what not in out:
            continue
        r = out[what]
        print(
            f"{title}: {r['adaptive_trials']} of {r['fixed_trials']} trials ({r['fraction_of_trials']:.0%}, "
            f"{r['fraction_saved']:.0%} saved); significant decisions of the fixed run reproduced: "
            f"{r['reproduced']}/{r['significant_fixed']}; stopped early without a significant decision: "
            f"{len(r['stopped_early_not_significant'])}; stop reasons {r['stop_reasons']}"
        )
        for b in r["borderline"]:
            print(f"  borderline {b['cell']}: fixed {b['fixed_n']} trials, adaptive {b['adaptive_n']}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.adaptive", description=__doc__.splitlines()[0])
    p.add_argument("--run", type=Path, metavar="EXPERIMENT", help="make both runs of an adaptive experiment")
    p.add_argument("--inventory", type=Path, default=REPO / "inventory.yaml")
    p.add_argument("--results", type=Path, default=REPO / "results")
    p.add_argument("--fixed", type=Path, help="a fixed run at the maximum repetitions")
    p.add_argument("--adaptive", type=Path, help="an adaptive run of the same grid")
    p.add_argument("--min-reps", type=int, help="for the replay when no adaptive run is given")
    p.add_argument("--json", type=Path, help="also write the figures here")
    args = p.parse_args(argv)
    try:
        if args.run:
            exp = _experiment(args.run)
            args.fixed = sweep(
                args.inventory, args.run, args.results, f"{exp.name}-fixed", "--reps", str(exp.reps)
            )
            args.adaptive = sweep(args.inventory, args.run, args.results, f"{exp.name}-adaptive")
        if not args.fixed or not (args.adaptive or args.min_reps):
            raise UserError("nothing to compare", "give --run EXPERIMENT, or --fixed RUN and --adaptive RUN")
        out = report(args.fixed, args.adaptive, args.min_reps)
    except UserError as exc:
        print(f"error: {exc.message}" + (f" ({exc.fix})" if exc.fix else ""), file=sys.stderr)
        return 2
    print_summary(out)
    if args.json:
        args.json.write_text(json.dumps(out, indent=2, default=str))
    return 0


def _experiment(path: Path) -> Experiment:
    exp = load_experiment(path)
    if not exp.adaptive:
        raise UserError(f"{path}: reps is a fixed count", "give reps as {min: N, max: M}")
    return exp


if __name__ == "__main__":
    sys.exit(main())
