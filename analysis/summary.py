"""The terminal summary: per (op, size) the decision vectors and the cumulative penalty vector."""

from __future__ import annotations

import math

import pandas as pd

from analysis.decisions import format_mbps
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
        f"decision vectors over rates {rates} Mbit/s (1 = offloading pays, - = missing); "
        "cumulative penalty = sum over rates of remote - local (s)",
    ]
    lines += _adaptive(cells, manifest)
    no_base = cells[(cells["local_n"] == 0)][["op", "size"]].drop_duplicates()
    for op, size in no_base.itertuples(index=False):
        lines.append(f"warning: {op} {size} has no successful local trial, so no decisions")
    bad = _failed_validation(manifest)
    if bad:
        lines.append(f"warning: link validation failed {bad} time(s); see the report")
    for (op, size), v in vectors.groupby(["op", "size"], sort=False):
        p = penalties[(penalties["op"] == op) & (penalties["size"] == size)].set_index("method")
        n_rates = len(v["rates"].iloc[0].split())
        parts = []
        for row in v.itertuples(index=False):
            gaps = f", {row.missing_rates} missing" if row.missing_rates else ""
            parts.append(f"{row.method} {row.vector} ({row.offload_count}/{n_rates}{gaps})")
        penalty = ", ".join(f"{m} {_penalty(p.loc[m])}" for m in v["method"])
        lines.append(f"{op} {size}: {'  '.join(parts)} | cumulative penalty [{penalty}]")
    return "\n".join(lines)


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
