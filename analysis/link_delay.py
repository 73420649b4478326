"""The link's delay and loss as dimensions: decisions and completion time against the round trip.

A run whose experiment varies `delays:` or `losses:` has each of its rates at every delay and loss
(`delay_ms`, one way and added in each direction, and `loss_pct`, per direction, in every remote row).
Its cells are those of each point of the link apart: a cell is never pooled across delays or losses.
The main tables and figures (against the rate) are of one point, the run's first (the least delay and
loss: `analysis.load.main_point`, which `analysis.cells.cell_table` keeps to); here every point is,
each with its columns kept apart:

- `delay_cells`: per (op, size, rate, delay, loss, method) the cell's n, mean and CI, its local
  baseline's mean, the decision and its significance (Welch's test, as everywhere: `analysis.cells`),
  and `rtt_ms`, the round trip the delay adds (twice it: the link's own is not in it);
- `delay_decisions`: per (op, size, rate, loss, method) the decisions at each round trip in ascending
  order (1 offloading pays, 0 it does not, ? undecided, - missing), as a decision vector is per rate;
- a figure per op: completion time against the round trip, a line per method and loss, and the local
  time.
"""

from __future__ import annotations

import pandas as pd
from matplotlib.figure import Figure

from analysis.cells import cell_table
from analysis.decisions import decision_marks
from analysis.load import POINT, at_point, link_points, point_value
from analysis.style import method_styles
from contracts.run import Manifest

KEYS = ["op", "size", "rate_mbps", *POINT, "rtt_ms", "method"]
COLUMNS = [*KEYS, "n", "failed", "mean", "ci95", "local_mean", "local_ci95", "offload", "significant"]
COLUMNS += ["penalty", "t_comm_mean"]


def delay_table(trials: pd.DataFrame, manifest: Manifest | None = None) -> pd.DataFrame:
    """Every point's cells (`analysis.cells.cell_table` of its rows and the local ones), their point
    and the round trip the delay adds kept apart in columns of their own."""
    parts = []
    for delay, loss in link_points(trials):
        cells = cell_table(at_point(trials, (delay, loss)), manifest)
        parts.append(cells.assign(delay_ms=delay, loss_pct=loss, rtt_ms=2 * (delay or 0.0)))
    if not parts:
        return pd.DataFrame(columns=COLUMNS)
    table = pd.concat(parts, ignore_index=True)
    return table[COLUMNS].sort_values(KEYS, kind="stable", na_position="first").reset_index(drop=True)


def delay_decisions(table: pd.DataFrame) -> pd.DataFrame:
    """Per (op, size, rate, loss, method): the decision at each round trip, ascending."""
    rows = []
    keys = ["op", "size", "rate_mbps", "loss_pct", "method"]
    marked = table.assign(mark=decision_marks(table).to_numpy())
    for key, group in marked.groupby(keys, sort=False, dropna=False):
        group = group.sort_values("rtt_ms")
        rows.append(
            {**dict(zip(keys, key, strict=True)), "rtts_ms": " ".join(f"{r:g}" for r in group["rtt_ms"]),
             "vector": "".join(group["mark"])}
        )  # fmt: skip
    return pd.DataFrame(rows, columns=[*keys, "rtts_ms", "vector"])


def delay_lines(decisions: pd.DataFrame, cells: pd.DataFrame) -> list[str]:
    """The summary's lines: which point the tables against the rate are of (`cells`: the main ones),
    then each cell's decisions against the round trip the delay adds."""
    delay, loss = (point_value(cells[c].iloc[0]) if len(cells) else None for c in POINT)
    at = ", ".join(
        f"{what} {v:g}{unit}"
        for what, v, unit in (("delay", delay, " ms"), ("loss", loss, "%"))
        if v is not None
    )
    lines = [
        f"the vectors above are at {at or 'the inventory link'}; the delay and loss varied: analysis/delay_*.csv"
    ]
    lines.append("against the round trip the delay adds (1 offload pays, 0 not, ? undecided, - missing):")
    for r in decisions.itertuples(index=False):
        loss = "" if pd.isna(r.loss_pct) else f", loss {r.loss_pct:g}%"
        lines.append(
            f"  {r.op} {r.size} @ {r.rate_mbps:g} Mbit/s{loss} {r.method}: RTT {r.rtts_ms} ms -> {r.vector}"
        )
    return lines


def delay_figure(table: pd.DataFrame, op: str) -> Figure:
    """Per (size, rate) of `op`: completion time (mean and 95% CI) against the round trip the delay
    adds, a line per method (and loss), a filled marker where offloading pays, and the local time."""
    rows = table[table["op"] == op]
    pairs = list(dict.fromkeys(zip(rows["size"], rows["rate_mbps"], strict=True)))
    styles = method_styles(list(dict.fromkeys(rows["method"])))
    fig = Figure(figsize=(3.6 * len(pairs) + 1, 3.6), layout="constrained")
    axes = fig.subplots(1, len(pairs), squeeze=False)[0]
    for ax, (size, rate) in zip(axes, pairs, strict=True):
        here = rows[(rows["size"] == size) & (rows["rate_mbps"] == rate)]
        for (method, loss), m in here.groupby(["method", "loss_pct"], sort=False, dropna=False):
            m = m.sort_values("rtt_ms")
            label = method if pd.isna(loss) else f"{method}, loss {loss:g}%"
            ax.errorbar(m["rtt_ms"], m["mean"], yerr=m["ci95"], capsize=3, label=label,
                        color=styles[method]["color"], linestyle="-" if pd.isna(loss) or not loss else ":")  # fmt: skip
            pays = m[m["offload"].fillna(0).astype(int) == 1]
            ax.plot(pays["rtt_ms"], pays["mean"], "o", color=styles[method]["color"])
        local = here["local_mean"].dropna()
        if not local.empty:
            ax.axhline(local.iloc[0], color="black", linestyle="--", label="local")
        ax.set_title(f"{op} {size} @ {rate:g} Mbit/s")
        ax.set_xlabel("round trip added (ms, twice the one-way delay)")
        ax.set_ylabel("completion time (s)")
    axes[0].legend(fontsize="small")
    return fig
