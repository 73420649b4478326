"""The device emulation's fidelity: for each kind of work of one device (the client's or the
server's), the device's target time against what the emulation achieved, across sizes, with the
calibration's flagged points marked."""

from __future__ import annotations

import pandas as pd
from matplotlib.figure import Figure

from analysis.style import METHOD_COLORS
from contracts.tolerance import DeviceTolerance

# what a codec's work is on each role: the server decodes the request and encodes the response
WORK_OF_ROLE = {
    "client": "encode: the request, decode: the response",
    "server": "decode: the request, encode: the response",
}


def across_sizes(rows: pd.DataFrame) -> pd.DataFrame:
    """The rows, those of no size repeated at every size of the others (one point each)."""
    sized = rows[rows["size"].notna()]
    unsized = rows[rows["size"].isna()]
    if unsized.empty or sized.empty:
        return sized if not sized.empty else rows
    sizes = sorted(sized["size"].unique())
    spread = [unsized.assign(size=s) for s in sizes]
    return pd.concat([sized, *spread], ignore_index=True).astype({"size": int})


def fidelity_figure(
    rows: pd.DataFrame, device: str, mode: str, tolerance: DeviceTolerance, role: str = "client"
) -> Figure:
    """`rows`: one calibration's rows (work, op, size, target_s, achieved_s, error_pct, flagged) of the
    device emulated on `role`'s host; the title names the role, so two such figures are told apart.
    Work of no size (the cgi stack's start-up) is drawn flat across the sizes. The shaded band is the
    tolerance's percent; short work may lie outside it unflagged, within the tolerance's ms."""
    rows = across_sizes(rows)
    works = list(dict.fromkeys(rows["work"]))
    fig = Figure(figsize=(7.5, 4.2), layout="constrained")
    ax_time, ax_err = fig.subplots(1, 2, width_ratios=(3, 2))
    for i, work in enumerate(works):
        g = rows[rows["work"] == work].sort_values("size")
        color = METHOD_COLORS[i % len(METHOD_COLORS)]
        label = f"{g['op'].iloc[0]} {work}"
        ax_time.plot(g["size"], g["target_s"], color=color, linestyle="--", linewidth=1)
        ax_time.plot(
            g["size"], g["achieved_s"], color=color, marker="o", markersize=4, linewidth=1, label=label
        )
        ax_err.plot(g["size"], g["error_pct"], color=color, marker="o", markersize=4, linewidth=1)
        bad = g[g["flagged"]]
        for ax, column in ((ax_time, "achieved_s"), (ax_err, "error_pct")):
            ax.scatter(bad["size"], bad[column], marker="x", s=60, color="black", zorder=3)
    ax_time.set_yscale("log")
    ax_time.set_xlabel("matrix size")
    ax_time.set_ylabel("seconds (dashed: the device's target)")
    ax_time.set_title("target vs achieved")
    fig.legend(loc="outside lower center", ncols=4, fontsize=7)
    ax_err.axhspan(-tolerance.pct, tolerance.pct, color="#DDDDDD", zorder=0)
    ax_err.axhline(0, color="black", linewidth=0.6)
    ax_err.set_xlabel("matrix size")
    ax_err.set_ylabel("error %  (x: flagged)")
    ax_err.set_title(f"within {tolerance.describe()} (shaded: ±{tolerance.pct:g}%)")
    fig.suptitle(f"{role} device {device}, {mode} mode ({WORK_OF_ROLE[role]})")
    return fig
