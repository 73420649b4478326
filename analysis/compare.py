"""Runs of one experiment side by side: did they give the same answers?

A result is a fact only if another run gives it again: the README's smoke run promises identical
decision vectors run after run, and a sweep over several replicas must answer as one testbed does
(issue 25). `testbed compare RUN RUN [RUN ...]` reads each run's trials (as the analysis does, no
root) and says, against the first run:

- **decisions**: each cell's mark (`1`, `0`, `?` undecided, `-` missing; `analysis.decisions`) in
  every run, whether all runs agree, and whether two runs *contradict* each other (one says 1 where
  another says 0, both significant; a `?` beside a 1 is a weaker claim, not a contradiction); a mark
  followed by `~` is of a cell the emulation's error could flip in that run (`emulation_uncertain`),
  and a cell that differs where any run's mark has one (`uncertain`) is said to differ within the
  emulation's error, which alone could explain it;
- **means**: every cell's completion time, its local baseline and each stage's mean, and whether each
  run's mean lies within the first run's 95% CI and the first's within its own (the issue's criterion),
  with the difference in percent. A mean outside both CIs is a difference to explain.

- an RPC study's runs (`analysis.rpc_study`) have no decisions: their cells' mean time per call
  (`call`), compared as the means are; an RPC run and an offload run are not compared;

- **the paper's scorecard** (`analysis.paper_checks`), where the runs measured any of its statements:
  each statement's verdict and measured figure in every run, side by side, each run labelled by its
  operands and text (`float64, compact`; `int32 0..9, era`), with each run's held-out score: the
  paper's hypotheses (issue 45: the float64 run and the int32 one) judged by one scorecard.

It writes `compare_decisions.csv`, `compare_means.csv` (and `compare_paper_checks.csv`) to `--out`
and prints a summary.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from analysis.cells import KEYS, cell_table
from analysis.decisions import OFFLOAD, STAY, UNCERTAIN, vector_marks
from analysis.load import load_run, writable_dir
from analysis.rpc_study import compared_calls, is_rpc_run
from contracts.errors import UserError
from contracts.grid import rate_label
from contracts.stages import LOCAL, label_device, label_without_device, on_device

STAGE_MEAN = re.compile(r"^(t_\w+)_mean$")
SHOWN = 8  # differing cells and means named in the summary; the CSVs have them all


@dataclass(frozen=True)
class Comparison:
    labels: list[str]  # one per run, in the order given (the first is the reference)
    decisions: pd.DataFrame  # KEYS, one mark column per label, agree, contradict, uncertain
    means: pd.DataFrame  # KEYS, quantity, run, mean, ci95, ref_mean, ref_ci95, diff_pct, within
    # n, statement, use, reading, then per label its verdict (`LABEL`) and figure (`LABEL measured`);
    # None where no run measured any of the paper's statements
    paper: pd.DataFrame | None = None
    hypotheses: dict[str, str] | None = None  # label -> operands and text ("int32 0..9, era")
    scores: dict[str, str] | None = None  # label -> held-out score (`held_out_summary`)


def run_label(run_dir: Path, manifest) -> str:
    return (manifest.run_id if manifest else None) or Path(run_dir).name


def compare_runs(run_dirs: list[Path]) -> Comparison:
    """Load each run, build its cells (`analysis.cells.cell_table`) and compare them with the first's."""
    if len(run_dirs) < 2:
        raise UserError("compare needs at least two runs", "pass two or more run directories")
    labels, tables, hypotheses, rpc = [], [], {}, []
    for run_dir in run_dirs:
        run = load_run(run_dir)
        label = run_label(run_dir, run.manifest)
        if label in labels:
            label = f"{label} ({run_dir})"
        labels.append(label)
        rpc.append(is_rpc_run(run.trials))
        tables.append(compared_calls(run.trials) if rpc[-1] else cell_table(run.trials, run.manifest))
        hypotheses[label] = hypothesis(run.manifest)
    if any(rpc) and not all(rpc):
        raise UserError(
            "an RPC study's run has calls, not offload decisions: it compares only with RPC runs",
            "compare RPC study runs with each other, offload runs with each other",
        )
    if all(rpc):  # a call's mean time per cell; no decisions, no paper
        return Comparison(labels, compare_decisions(labels, []), compare_means(labels, tables))
    paper, scores = compare_paper_checks(labels, tables)
    return Comparison(
        labels, compare_decisions(labels, tables), compare_means(labels, tables), paper, hypotheses, scores
    )


def hypothesis(manifest) -> str:
    """A run's operands and JSON text, as issue 45's hypotheses differ: `float64, compact`,
    `int32 0..9, era` (a run without a manifest: `?`)."""
    if manifest is None:
        return "?"
    exp = manifest.experiment
    drawn = f" {exp.int_range[0]}..{exp.int_range[1] - 1}" if exp.int_range else ""
    return f"{exp.dtype}{drawn}, {exp.codec_text}"


def compare_paper_checks(
    labels: list[str], tables: list[pd.DataFrame]
) -> tuple[pd.DataFrame | None, dict[str, str] | None]:
    """Every statement of the paper judged on each run (`analysis.paper_checks`), side by side, and
    each run's held-out score; (None, None) where no run measured any."""
    from analysis.paper_checks import held_out_summary, judged, paper_checks

    checks = [paper_checks(t) for t in tables]
    if not any(judged(c) for c in checks):
        return None, None
    table = checks[0][["n", "statement", "use", "reading"]].copy()
    for label, c in zip(labels, checks, strict=True):
        table[label] = c["holds"].to_numpy()
        table[f"{label} measured"] = c["measured"].to_numpy()
    return table, {label: held_out_summary(c) for label, c in zip(labels, checks, strict=True)}


def compare_decisions(labels: list[str], tables: list[pd.DataFrame]) -> pd.DataFrame:
    """One row per cell of any run: its mark in each run (`-` where a run lacks the cell; `1~`: the
    emulation's error could flip it), whether the marks agree and contradict (`~` aside), and whether
    any run's mark is uncertain."""
    if not tables:  # runs without decisions (an RPC study's)
        return pd.DataFrame(columns=[*KEYS, *labels, "agree", "contradict", "uncertain"])
    marks = [t[KEYS].assign(mark=vector_marks(t).to_numpy()).set_index(KEYS)["mark"] for t in tables]
    table = pd.concat(marks, axis=1, keys=labels).fillna("-").sort_index()
    shown = table.to_numpy(dtype=str)
    values = np.char.rstrip(shown, UNCERTAIN)
    table["agree"] = (values == values[:, :1]).all(axis=1)
    table["contradict"] = (values == OFFLOAD).any(axis=1) & (values == STAY).any(axis=1)
    table["uncertain"] = np.char.endswith(shown, UNCERTAIN).any(axis=1)
    return table.reset_index()


def _quantities(cells: pd.DataFrame) -> list[tuple[str, str, str]]:
    """(name, mean column, CI column): completion, the local baseline and each stage measured; an RPC
    study's cells, a call's time."""
    if "per_call_s" in cells:
        return [("call", "per_call_s", "per_call_ci95")]
    out = [("completion", "mean", "ci95"), ("local", "local_mean", "local_ci95")]
    for column in cells.columns:
        if (m := STAGE_MEAN.match(column)) and f"{m[1]}_ci95" in cells and cells[column].notna().any():
            out.append((m[1], column, f"{m[1]}_ci95"))
    return out


def compare_means(labels: list[str], tables: list[pd.DataFrame]) -> pd.DataFrame:
    """Every run's means against the first run's, quantity by quantity, where both have a value."""
    ref = tables[0].set_index(KEYS)
    rows = []
    for label, cells in zip(labels[1:], tables[1:], strict=True):
        other = cells.set_index(KEYS)
        common = ref.index.intersection(other.index)
        for name, mean, ci in _quantities(ref):
            if mean not in other:
                continue
            a, b = ref.loc[common], other.loc[common]
            part = pd.DataFrame(
                {
                    "quantity": name,
                    "run": label,
                    "mean": b[mean],
                    "ci95": b[ci],
                    "ref_mean": a[mean],
                    "ref_ci95": a[ci],
                },
                index=common,
            )
            rows.append(part[part["mean"].notna() & part["ref_mean"].notna()])
    if not rows:
        return pd.DataFrame(columns=[*KEYS, "quantity", "run", "mean", "ci95", "ref_mean", "ref_ci95"])
    table = pd.concat(rows).reset_index()
    # the local baseline is one per (op, size) and client device, repeated on each of its cells: compared
    # once (`local on paper-p4` with clients of several devices)
    local = table["quantity"] == "local"
    table.loc[local, "rate_mbps"] = np.nan
    table.loc[local, "method"] = [on_device(LOCAL, label_device(m)) for m in table.loc[local, "method"]]
    table = table[~(local & table.duplicated([*KEYS, "quantity", "run"]))].reset_index(drop=True)
    gap = (table["mean"] - table["ref_mean"]).abs()
    with np.errstate(invalid="ignore", divide="ignore"):
        table["diff_pct"] = 100 * (table["mean"] - table["ref_mean"]) / table["ref_mean"]
    # each mean within the other's CI (a CI not known, fewer than two samples, holds nothing)
    table["within"] = (gap <= table["ref_ci95"]) & (gap <= table["ci95"])
    # outside both: neither CI covers the other's mean, a difference to explain
    table["outside_both"] = (gap > table["ref_ci95"].fillna(0)) & (gap > table["ci95"].fillna(0))
    return table


def _cell(row: pd.Series) -> str:
    if label_without_device(row["method"]) == LOCAL:
        return f"{row['op']} {row['size']} {row['method']}"
    return f"{row['op']} {row['size']} {row['method']} @ {rate_label(row['rate_mbps'])}"


def summary_lines(result: Comparison) -> list[str]:
    d, m = result.decisions, result.means
    lines = [f"compared {len(result.labels)} runs against {result.labels[0]}: {', '.join(result.labels[1:])}"]
    if d.empty and not m.empty and (m["quantity"] == "call").all():
        lines.append("decisions: none (RPC study runs: calls, not offloading); their calls' mean times below")
    differing = d[~d["agree"].astype(bool)]
    told = f"; {int(d['contradict'].sum())} contradict (1 in one run, 0 in another)" if len(differing) else ""
    if within := int(differing["uncertain"].sum()):
        told += f"; {within} of the {len(differing)} differing uncertain (~) in a run, within the emulation's error"
    if len(lines) == 1:
        lines.append(f"decisions: {int(d['agree'].sum())} of {len(d)} cells alike in every run{told}")
    for _, row in differing.head(SHOWN).iterrows():
        why = " (uncertain: the emulation's error could flip it)" if row["uncertain"] else ""
        lines.append(f"  {_cell(row)}: {' '.join(row[label] for label in result.labels)}{why}")
    if len(differing) > SHOWN:
        lines.append(f"  ... {len(differing) - SHOWN} more in compare_decisions.csv")
    if not m.empty:
        outside = (
            m[m["outside_both"]]
            .assign(_abs=lambda t: t["diff_pct"].abs())
            .sort_values("_abs", ascending=False)
        )
        lines.append(
            f"means: {int(m['within'].sum())} of {len(m)} within each other's 95% CI; "
            f"{len(outside)} outside both"
        )
        for _, row in outside.head(SHOWN).iterrows():
            lines.append(
                f"  {_cell(row)} {row['quantity']} ({row['run']}): {row['mean']:.4g} s against "
                f"{row['ref_mean']:.4g} s ({row['diff_pct']:+.1f}%)"
            )
        if len(outside) > SHOWN:
            lines.append(f"  ... {len(outside) - SHOWN} more in compare_means.csv")
    return lines + paper_lines(result)


def paper_lines(result: Comparison) -> list[str]:
    """Each run's score against the paper, labelled by its hypothesis, and the statements whose
    verdicts differ between the runs (all of them in compare_paper_checks.csv)."""
    if result.paper is None:
        return []
    lines = [
        "against the paper (analysis/paper_checks.py; held out scored, fit and the paper's anomaly not):"
    ]
    for label in result.labels:
        lines.append(
            f"  {label} ({(result.hypotheses or {}).get(label, '?')}): {(result.scores or {})[label]}"
        )
    verdicts = result.paper[result.labels].to_numpy(dtype=str)
    differ = result.paper[(verdicts != verdicts[:, :1]).any(axis=1)]
    for _, row in differ.iterrows():
        lines.append(f"  {row['n']} ({row['use']}): {' / '.join(row[label] for label in result.labels)}")
    return lines


def write_comparison(result: Comparison, out_dir: Path) -> list[Path]:
    writable_dir(out_dir, "pass a writable --out")
    paths = [out_dir / "compare_decisions.csv", out_dir / "compare_means.csv"]
    result.decisions.to_csv(paths[0], index=False)
    result.means.to_csv(paths[1], index=False, float_format="%.6g")
    if result.paper is not None:
        paths.append(out_dir / "compare_paper_checks.csv")
        result.paper.to_csv(paths[-1], index=False)
    return paths
