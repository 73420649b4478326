"""Decision figures: rates where offloading pays and cumulative penalties (the paper's Fig. 5), and a
size x rate decision map per method. Both show what the paper's vectors hide: which cells are
undecided (`?` in the decision vectors: remote and local not significantly different) and which are
missing. An undecided cell has the same colour in both, and its penalty is still drawn. In a map, a
cell the emulation's error could flip (`emulation_uncertain`) has a `~` after its penalty.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.colors import ListedColormap
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from analysis.decisions import MISSING, OFFLOAD, STAY, UNCERTAIN, UNDECIDED, decision_marks, uncertain
from analysis.style import UNDECIDED_COLOR, UNDECIDED_LABEL, method_styles, rate_label
from contracts.grid import size_label

# decision map categories, in colour order, and the decision vector mark of each
CATEGORIES = [
    ("offload (significant)", "#1A9850"),
    ("stay local (significant)", "#D73027"),
    (UNDECIDED_LABEL, UNDECIDED_COLOR),
    ("missing", "#FFFFFF"),
]
MARKS = [OFFLOAD, STAY, UNDECIDED, MISSING]


def decisions_figure(
    vectors: pd.DataFrame, penalties: pd.DataFrame, op: str, methods: list[str], n_rates: int
) -> Figure:
    """One op's decision vectors summed (how many rates offloading pays at, per size and method) over
    its cumulative penalties."""
    sizes = sorted(vectors["size"].unique())
    methods = [m for m in methods if m in set(vectors["method"])]
    styles = method_styles(methods)
    width = 0.8 / max(len(methods), 1)
    fig = Figure(figsize=(max(8.0, 2.0 + 0.35 * len(sizes) * len(methods)), 6.4), layout="constrained")
    ax_count, ax_pen = fig.subplots(2, 1, sharex=True)
    incomplete = False
    for j, method in enumerate(methods):
        x = np.arange(len(sizes)) - 0.4 + width * (j + 0.5)
        v = vectors[vectors["method"] == method].set_index("size").reindex(sizes)
        p = penalties[penalties["method"] == method].set_index("size").reindex(sizes)
        style = dict(
            color=styles[method]["color"], hatch=styles[method]["hatch"], edgecolor="black", linewidth=0.4
        )
        _count_bars(ax_count, x, width, v, method, style)
        incomplete = _penalty_bars(ax_pen, x, width, p, method, style) or incomplete
    _count_axes(ax_count, vectors, op, n_rates)
    _penalty_axes(ax_pen, sizes, incomplete)
    for ax in (ax_count, ax_pen):
        ax.grid(axis="y", linewidth=0.4, alpha=0.5)
        ax.set_axisbelow(True)
    return fig


def _count_bars(ax, x: np.ndarray, width: float, v: pd.DataFrame, method: str, style: dict) -> None:
    """A method's rates where offloading pays, a bar per size (`v`: its vectors by size), its undecided
    rates stacked on top in the undecided colour, and the count over each (`>=` where rates are missing)."""
    counts = v["offload_count"].fillna(0).to_numpy(dtype=float)
    open_ = v["undecided_rates"].fillna(0).to_numpy(dtype=float)
    ax.bar(x, counts, width, label=method, **style)
    # undecided rates on top, in the undecided colour edged in the method's: offloading may pay there
    some = open_ > 0
    ax.bar(
        x[some],
        open_[some],
        width,
        bottom=counts[some],
        color=UNDECIDED_COLOR,
        edgecolor=style["color"],
        linewidth=1.0,
    )
    for xi, count, more, gaps in zip(x, counts, open_, v["missing_rates"].fillna(0), strict=True):
        ax.text(
            xi,
            count + more,
            ("\u2265" if gaps else "") + f"{count:.0f}" + (f"+{more:.0f}?" if more else ""),
            ha="center",
            va="bottom",
            fontsize=7,
            in_layout=False,
        )


def _penalty_bars(ax, x: np.ndarray, width: float, p: pd.DataFrame, method: str, style: dict) -> bool:
    """A method's cumulative penalty, a bar per size (`p`: its penalties by size); where rates are
    missing, a dashed outline of the sum over the known ones. Returns whether it drew such an outline."""
    full = p["cumulative_penalty"].to_numpy(dtype=float)
    ax.bar(x, np.nan_to_num(full), width, label=method, **style)
    partial = np.where(np.isnan(full), p["partial_penalty"].to_numpy(dtype=float), np.nan)
    if np.isnan(partial).all():
        return False
    ax.bar(
        x,
        np.nan_to_num(partial),
        width,
        fill=False,
        edgecolor=style["color"],
        linestyle="--",
        linewidth=1.0,
    )
    return True


def _count_axes(ax, vectors: pd.DataFrame, op: str, n_rates: int) -> None:
    """The counts' scale (0 to every rate), the figure's title and the methods' legend."""
    ax.set_ylim(0, n_rates + 0.6)
    ax.set_yticks(range(n_rates + 1))
    ax.set_ylabel(f"rates where offloading pays\n(of {n_rates})")
    title = f"{op}: offloading decision vectors (sum) and cumulative penalty per size"
    if (vectors["missing_rates"] > 0).any():
        title += "\n\u2265 = some rates missing (the count is a lower bound)"
    ax.set_title(title)
    handles, _ = ax.get_legend_handles_labels()
    if (vectors["undecided_rates"] > 0).any():  # +N? over a bar: N more rates undecided, in their colour
        handles.append(
            Patch(facecolor=UNDECIDED_COLOR, edgecolor="black", linewidth=0.4, label=f"+N? {UNDECIDED_LABEL}")
        )
    # beside the axes, not over the bars (a bar may reach every rate)
    ax.legend(handles=handles, title="method", loc="upper left", bbox_to_anchor=(1.01, 1), frameon=False)


def _penalty_axes(ax, sizes: list, incomplete: bool) -> None:
    """The penalties' zero line, the sizes under the bars, and what a dashed outline means if any."""
    ax.axhline(0, color="black", linewidth=0.8)
    ax.set_ylabel("cumulative penalty (s)\n< 0: offloading saves time")
    ax.set_xlabel("matrix size")
    ax.set_xticks(np.arange(len(sizes)), [size_label(s) for s in sizes])
    if incomplete:
        ax.legend(
            handles=[
                Patch(
                    fill=False,
                    linestyle="--",
                    edgecolor="black",
                    label="incomplete: sum over known rates only",
                )
            ],
            loc="best",
            frameon=False,
        )


def category(cells: pd.DataFrame) -> np.ndarray:
    """Index into CATEGORIES per cell, from its decision vector mark (`analysis.decisions`)."""
    return decision_marks(cells).map(MARKS.index).to_numpy(dtype=int)


def decision_map(cells: pd.DataFrame, op: str, method: str) -> Figure:
    sizes = sorted(cells["size"].unique())
    rates = sorted(cells["rate_mbps"].unique())
    grid = cells.set_index(["size", "rate_mbps"]).reindex(pd.MultiIndex.from_product([sizes, rates]))
    codes = category(grid).reshape(len(sizes), len(rates))
    penalty = grid["penalty"].to_numpy(dtype=float).reshape(len(sizes), len(rates))
    no_base = (grid["local_n"].fillna(0).to_numpy() == 0) & (grid["n"].fillna(0).to_numpy() > 0)
    no_base = no_base.reshape(len(sizes), len(rates))
    flip = uncertain(grid).reshape(len(sizes), len(rates))
    fig = Figure(figsize=(max(6.5, 2.4 + 0.85 * len(rates)), 2.0 + 0.38 * len(sizes)), layout="constrained")
    ax = fig.add_subplot()
    cmap = ListedColormap([color for _, color in CATEGORIES])
    ax.imshow(codes, cmap=cmap, vmin=-0.5, vmax=len(CATEGORIES) - 0.5, aspect="auto", origin="lower")
    for (i, k), code in np.ndenumerate(codes):
        unknown = "no local" if no_base[i, k] else "missing"
        text = unknown if code == 3 else f"{penalty[i, k]:+.3g} s" + (" ?" if code == 2 else "")
        text += f" {UNCERTAIN}" if flip[i, k] else ""
        ax.text(k, i, text, ha="center", va="center", fontsize=7, in_layout=False)
    ax.set_xticks(np.arange(len(rates)) + 0.5, minor=True)
    ax.set_yticks(np.arange(len(sizes)) + 0.5, minor=True)
    ax.grid(which="minor", color="#888888", linewidth=0.5)
    ax.tick_params(which="minor", length=0)
    ax.set_xticks(np.arange(len(rates)), [rate_label(r) for r in rates])
    ax.set_yticks(np.arange(len(sizes)), [size_label(s) for s in sizes])
    ax.set_xlabel("link rate (Mbit/s)")
    ax.set_ylabel("matrix size")
    told = f"; {UNCERTAIN} = the emulation's error could flip it" if flip.any() else ""
    ax.set_title(
        f"{op}, {method}: offloading decision\n(cell text: penalty = mean remote - mean local{told})"
    )
    fig.legend(
        handles=[Patch(facecolor=color, edgecolor="#888888", label=label) for label, color in CATEGORIES],
        loc="outside lower center",
        ncol=len(CATEGORIES) if len(rates) >= 4 else 2,
        frameon=False,
    )
    return fig
