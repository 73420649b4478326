"""Offloading decision vectors and cumulative penalty vectors (paper, section II-E and Fig. 5).

Each cell of a vector is one of four marks (`decision_marks`):

- `1` / `0`: offloading pays / does not, and the analysis's Welch test (95%, remote against local)
  says the difference is real;
- `?`: undecided. The means differ, but not significantly (or a side has fewer than two successful
  trials, so the test cannot be made): printing a `0` or `1` there would state a coin toss as a fact,
  and repeated runs of a cell near its border do flip. Its penalty is still given, and still counts
  in the cumulative penalty: following either decision there costs about that much;
- `-`: missing, unknown rather than "stay local" (no successful trial, or no local baseline).

A mark followed by `~` (`1~`, `0~`, `?~`) is of a cell marked `emulation_uncertain` in cells.csv
(`analysis.emulation_error`): the emulation's error on its remote - local difference (its stages'
deviations from the device's targets) could flip its decision, or its undecided state, so the mark is
the emulation's as much as the device's. `decision_marks` gives the mark alone (what the paper's checks
and the figures compare); `vector_marks` the vectors' marks with the `~`.

`offload_count` counts the significant 1s only (uncertain ones included), `undecided_rates` the ?s,
`missing_rates` the -s and `uncertain_rates` the marks with a `~`, so a method that "offloads in 5 of
12 cells, 2 undecided, 1 uncertain" reads straight off the table. A cumulative
penalty over a vector with a missing cell would favour the method that failed (its worst rates would
simply drop out), so `cumulative_penalty` is left empty then; `partial_penalty` gives the sum over
the known rates for whoever wants it anyway.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from analysis.cells import method_order

OFFLOAD = "1"
STAY = "0"
UNDECIDED = "?"
MISSING = "-"
UNCERTAIN = "~"  # after a mark: the emulation's error could flip it (`emulation_uncertain`)
VECTOR_COLUMNS = [
    "op",
    "size",
    "method",
    "rates",
    "vector",
    "offload_count",
    "undecided_rates",
    "missing_rates",
    "uncertain_rates",
    "significant",
]


def format_mbps(rate: float) -> str:
    return f"{rate:g}"


def decision_marks(cells: pd.DataFrame) -> pd.Series:
    """Per cell, its mark in a decision vector: 1, 0, ? (not significant) or - (missing).

    Reads `offload` (the means' comparison) and `significant` (the Welch test; NA where a side has
    fewer than two samples, which counts as undecided: the test could not be made).
    """
    known = cells["offload"].notna().to_numpy()
    significant = cells["significant"].fillna(False).astype(bool).to_numpy()
    pays = cells["offload"].fillna(0).astype(int).to_numpy() == 1
    marks = np.select([~known, ~significant, pays], [MISSING, UNDECIDED, OFFLOAD], default=STAY)
    return pd.Series(marks, index=cells.index, dtype=object)


def uncertain(cells: pd.DataFrame) -> np.ndarray:
    """Per cell, whether it is `emulation_uncertain` (False where the table has no such column: the
    energy view, a table made by hand)."""
    if "emulation_uncertain" not in cells:
        return np.zeros(len(cells), dtype=bool)
    return cells["emulation_uncertain"].fillna(False).astype(bool).to_numpy()


def vector_marks(cells: pd.DataFrame) -> pd.Series:
    """Per cell, its mark in a decision vector: `decision_marks`, followed by `~` where the cell is
    `emulation_uncertain`."""
    marks = decision_marks(cells)
    return marks.where(~uncertain(cells), marks + UNCERTAIN)


def undecided_cells(cells: pd.DataFrame) -> pd.DataFrame:
    """The undecided cells in the report's order, with what shows why: both means, their numbers of
    trials, the penalty and the half-width of its Welch 95% CI (empty where the test could not be made)."""
    columns = [
        "op",
        "size",
        "rate_mbps",
        "method",
        "n",
        "mean",
        "local_n",
        "local_mean",
        "penalty",
        "diff_ci95",
    ]
    order = {m: i for i, m in enumerate(method_order(cells["method"].unique()))}
    chosen = cells[(decision_marks(cells) == UNDECIDED).to_numpy()]
    chosen = chosen.assign(_m=chosen["method"].map(order)).sort_values(["op", "size", "_m", "rate_mbps"])
    return chosen[columns].reset_index(drop=True)


def _groups(cells: pd.DataFrame):
    """(op, size, method, cells sorted by rate) in the report's order: op, size, then method order."""
    order = {m: i for i, m in enumerate(method_order(cells["method"].unique()))}
    keyed = cells.assign(_m=cells["method"].map(order)).sort_values(["op", "size", "_m", "rate_mbps"])
    for (op, size, _), group in keyed.groupby(["op", "size", "_m"], sort=False):
        yield op, size, group["method"].iloc[0], group


def decision_vectors(cells: pd.DataFrame) -> pd.DataFrame:
    rows = []
    for op, size, method, g in _groups(cells):
        vector = list(decision_marks(g))
        shown = list(vector_marks(g))
        significant = [MISSING if pd.isna(s) else str(int(s)) for s in g["significant"]]
        rows.append(
            {
                "op": op,
                "size": size,
                "method": method,
                "rates": " ".join(format_mbps(r) for r in g["rate_mbps"]),
                "vector": " ".join(shown),
                "offload_count": vector.count(OFFLOAD),
                "undecided_rates": vector.count(UNDECIDED),
                "missing_rates": vector.count(MISSING),
                "uncertain_rates": int(uncertain(g).sum()),
                "significant": " ".join(significant),
            }
        )
    return pd.DataFrame(rows, columns=VECTOR_COLUMNS)


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
