"""Offloading decision vectors and cumulative penalty vectors (paper, section II-E and Fig. 5).

A missing cell (no successful trial, or no local baseline to compare with) is unknown, not "stay
local": its entry in a decision vector is `-`, and `offload_count` counts only the known 1s, so it is a
lower bound whenever `missing_rates` > 0. A cumulative penalty over a vector with a missing cell would
favour the method that failed (its worst rates would simply drop out), so `cumulative_penalty` is left
empty then; `partial_penalty` gives the sum over the known rates for whoever wants it anyway.
"""

from __future__ import annotations

import pandas as pd

from analysis.cells import method_order

MISSING = "-"


def format_mbps(rate: float) -> str:
    return f"{rate:g}"


def _groups(cells: pd.DataFrame):
    """(op, size, method, cells sorted by rate) in the report's order: op, size, then method order."""
    order = {m: i for i, m in enumerate(method_order(cells["method"].unique()))}
    keyed = cells.assign(_m=cells["method"].map(order)).sort_values(["op", "size", "_m", "rate_mbps"])
    for (op, size, _), group in keyed.groupby(["op", "size", "_m"], sort=False):
        yield op, size, group["method"].iloc[0], group


def decision_vectors(cells: pd.DataFrame) -> pd.DataFrame:
    rows = []
    for op, size, method, g in _groups(cells):
        vector = [MISSING if pd.isna(d) else str(int(d)) for d in g["offload"]]
        significant = [MISSING if pd.isna(s) else str(int(s)) for s in g["significant"]]
        rows.append(
            {
                "op": op,
                "size": size,
                "method": method,
                "rates": " ".join(format_mbps(r) for r in g["rate_mbps"]),
                "vector": " ".join(vector),
                "offload_count": vector.count("1"),
                "missing_rates": vector.count(MISSING),
                "significant": " ".join(significant),
            }
        )
    return pd.DataFrame(
        rows,
        columns=["op", "size", "method", "rates", "vector", "offload_count", "missing_rates", "significant"],
    )


def cumulative_penalties(cells: pd.DataFrame) -> pd.DataFrame:
    rows = []
    for op, size, method, g in _groups(cells):
        known = g["penalty"].dropna()
        complete = len(known) == len(g)
        rows.append(
            {
                "op": op,
                "size": size,
                "method": method,
                "cumulative_penalty": known.sum() if complete else float("nan"),
                "partial_penalty": known.sum() if len(known) else float("nan"),
                "missing_rates": len(g) - len(known),
            }
        )
    return pd.DataFrame(
        rows, columns=["op", "size", "method", "cumulative_penalty", "partial_penalty", "missing_rates"]
    )
