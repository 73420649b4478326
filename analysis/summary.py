"""The terminal summary: both devices (or what each role ran as) and how their calibrations held, per
(op, size) the decision vectors and the cumulative penalty vector, each undecided cell with its
penalty, and per method how many cells offload and how many are undecided; how many cells the
emulation's error could flip (`~`, `analysis.emulation_error`) and the worst of them."""

from __future__ import annotations

import math

import pandas as pd

from analysis.decisions import format_mbps, undecided_cells
from analysis.devices import device_lines
from analysis.emulation_error import uncertain_line
from contracts.grid import size_label
from contracts.run import Manifest


def summary_text(
    run_id: str,
    trials: pd.DataFrame,
    cells: pd.DataFrame,
    vectors: pd.DataFrame,
    penalties: pd.DataFrame,
    manifest: Manifest | None = None,
) -> str:
    failed = int((~trials["ok"]).sum())
    missing = int(cells["missing"].sum())
    rates = " ".join(format_mbps(r) for r in sorted(cells["rate_mbps"].unique()))
    lines = [
        f"run {run_id}: {len(trials)} trials ({len(trials) - failed} ok, {failed} failed); "
        f"{len(cells)} cells, {missing} missing",
        f"decision vectors over rates {rates} Mbit/s (1 = offloading pays, 0 = it does not, "
        "? = undecided: remote and local not significantly different (Welch, 95%), - = missing; "
        "~ after a mark = emulation uncertain: the emulation's error could flip it); "
        "cumulative penalty = sum over rates of remote - local (s)",
    ]
    lines += _adaptive(cells, manifest)
    lines += device_lines(manifest)
    no_base = cells[(cells["local_n"] == 0)].reindex(columns=["op", "size", "device"]).fillna("")
    for op, size, device in no_base.drop_duplicates().itertuples(index=False):
        on = f" on {device}" if device else ""
        lines.append(f"warning: {op} {size}{on} has no successful local trial, so no decisions")
    bad = _failed_validation(manifest)
    if bad:
        lines.append(f"warning: link validation failed {bad} time(s); see the report")
    undecided = undecided_cells(cells)
    for (op, size), v in vectors.groupby(["op", "size"], sort=False):
        p = penalties[(penalties["op"] == op) & (penalties["size"] == size)].set_index("method")
        n_rates = len(v["rates"].iloc[0].split())
        parts = [
            f"{r.method} {r.vector} ({r.offload_count}/{n_rates}"
            f"{_open(r.undecided_rates, r.missing_rates, r.uncertain_rates)})"
            for r in v.itertuples(index=False)
        ]
        penalty = ", ".join(f"{m} {_penalty(p.loc[m])}" for m in v["method"])
        lines.append(f"{op} {size_label(size)}: {'  '.join(parts)} | cumulative penalty [{penalty}]")
        here = undecided[(undecided["op"] == op) & (undecided["size"] == size)]
        if len(here):
            told = "; ".join(_undecided(c) for c in here.itertuples())
            lines.append(f"  undecided, penalty (Welch 95% CI): {told}")
    lines += _counts(vectors)
    if (told := uncertain_line(cells)) is not None:
        lines.append(told)
    return "\n".join(lines)


def _open(undecided: int, missing: int, uncertain: int = 0) -> str:
    """What an offload count leaves out: the undecided and the missing cells; and how many of its
    cells the emulation's error could flip."""
    told = [f"{undecided} undecided"] if undecided else []
    told += [f"{missing} missing"] if missing else []
    told += [f"{uncertain} uncertain"] if uncertain else []
    return "".join(f", {t}" for t in told)


def _undecided(cell) -> str:
    """`json 100 Mbit/s +0.31 s (+-0.52)`: the penalty of a cell whose decision is not significant and
    the Welch half-width it falls within; where a side has under two trials, the numbers of trials."""
    if math.isnan(cell.diff_ci95):
        ci = f"untested: n {cell.n}, local n {cell.local_n}"
    else:
        ci = f"+-{cell.diff_ci95:.3g}"
    return f"{cell.method} {format_mbps(cell.rate_mbps)} Mbit/s {cell.penalty:+.3g} s ({ci})"


def _counts(vectors: pd.DataFrame) -> list[str]:
    """Per method over the whole run: `raw offloads in 5 of 12 cells, 2 undecided`."""
    if vectors.empty:
        return []
    parts = []
    for method, v in vectors.groupby("method", sort=False):
        cells = sum(len(r.split()) for r in v["rates"])
        gaps = _open(*(int(v[c].sum()) for c in ("undecided_rates", "missing_rates", "uncertain_rates")))
        parts.append(f"{method} offloads in {int(v['offload_count'].sum())} of {cells} cells{gaps}")
    return ["offloading (significant only): " + "; ".join(parts)]


def _adaptive(cells: pd.DataFrame, manifest: Manifest | None) -> list[str]:
    """For an adaptive run: how many repetitions its cells took and why they stopped."""
    if manifest is None or not manifest.experiment.adaptive:
        return []
    exp = manifest.experiment
    reasons = cells["stop_reason"].replace("", "open").value_counts()
    told = ", ".join(f"{reason} {n}" for reason, n in reasons.items())
    return [
        f"adaptive repetitions {exp.min_reps}..{exp.reps}: remote cells ran "
        f"{int(cells['n_trials'].sum())} trials of {len(cells) * exp.reps} at most; stopped: {told}"
    ]


def _penalty(row: pd.Series) -> str:
    if not math.isnan(row["cumulative_penalty"]):
        return f"{row['cumulative_penalty']:.3g} s"
    if math.isnan(row["partial_penalty"]):
        return "-"
    return f"- (known rates: {row['partial_penalty']:.3g} s)"


def _failed_validation(manifest: Manifest | None) -> int:
    return sum(1 for c in manifest.validation if c.ok is False) if manifest else 0
