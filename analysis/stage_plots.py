"""Stage breakdown of one (op, size): the paper's Fig. 4.

Bars stack the mean of each stage per rate and method; the whisker is the 95% CI of the mean total;
the dashed line is the local completion time, so offloading pays where a bar ends below it. When the
stages do not add up to the measured total (a stage not measured, or time outside the probes) the
remainder is drawn as "other" instead of letting the bar silently fall short of its whisker.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
from matplotlib.collections import PolyCollection
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

from analysis.style import OTHER_COLOR, STAGE_COLORS, STAGE_LABELS, method_styles, rate_label
from contracts.stages import DEVICE_MARK, STAGES, label_device

GROUP_WIDTH = 0.8
OTHER_MIN = 0.005  # fraction of the total below which a remainder is rounding, not a missing stage


def stage_figure(cells: pd.DataFrame, op: str, size, methods: list[str]) -> Figure:
    """The stages of one (op, size)'s cells, against their local baseline: of one client device (with
    clients of several, `analysis.plots` draws one figure per device)."""
    devices = {label_device(m) for m in cells["method"]}
    if len(devices) > 1:
        raise ValueError(f"stage_figure got the cells of {len(devices)} client devices, one baseline each")
    device = devices.pop() if devices else None
    rates = sorted(cells["rate_mbps"].unique())
    methods = [m for m in methods if m in set(cells["method"])]
    styles = method_styles(methods)
    width = GROUP_WIDTH / max(len(methods), 1)
    fig = Figure(figsize=(max(7.0, 1.4 + 0.42 * len(rates) * len(methods)), 4.6), layout="constrained")
    ax = fig.add_subplot()
    by_key = cells.set_index(["rate_mbps", "method"])
    other_used = False
    top = 0.0
    for j, method in enumerate(methods):
        c = by_key.xs(method, level="method").reindex(rates)
        x = np.arange(len(rates)) - GROUP_WIDTH / 2 + width * (j + 0.5)
        used, reach = _method_bars(ax, c, x, width, styles[method]["hatch"])
        other_used = other_used or used
        top = max(top, reach)
    handles, top = _local_baseline(ax, cells, top)
    handles += [Patch(facecolor=STAGE_COLORS[s], label=STAGE_LABELS[s]) for s in STAGES]
    if other_used:
        handles.append(Patch(facecolor=OTHER_COLOR, label="other (total - stages)"))
    handles += [
        Patch(facecolor="white", edgecolor="black", hatch=styles[m]["hatch"] * 2, label=m) for m in methods
    ]
    fig.legend(
        handles=handles,
        loc="outside right upper",
        frameon=False,
        title="whiskers: 95% CI of the mean",
        title_fontsize=7,
    )
    _rate_axis(ax, rates, methods, width)
    ax.set_ylim(0, top * 1.08 if top > 0 else 1)
    ax.set_ylabel("completion time (s)")
    on = f"{DEVICE_MARK}{device}" if device else ""
    ax.set_title(f"{op}, size {size}{on}: remote completion time by stage vs. local execution")
    ax.grid(axis="y", linewidth=0.4, alpha=0.5)
    ax.set_axisbelow(True)
    return fig


def _method_bars(ax, c: pd.DataFrame, x: np.ndarray, width: float, hatch: str) -> tuple[bool, float]:
    """One method's bars, a bar per rate (`c`: its cells by rate): its stages stacked, the remainder
    as "other" where they fall short of the mean, the mean's 95% CI as a whisker, and "missing" where
    a cell has no trial. Returns whether it drew an "other" and the height its bars and whiskers reach."""
    bottom = np.zeros(len(x))
    for stage in STAGES:
        value = np.nan_to_num(c[f"{stage}_mean"].to_numpy(dtype=float)).clip(min=0)
        _bars(ax, x, bottom, value, width, STAGE_COLORS[stage], hatch)
        bottom += value
    mean = c["mean"].to_numpy(dtype=float)
    other = np.where(mean - bottom > OTHER_MIN * mean, mean - bottom, 0.0)
    other_used = bool(other.any())
    if other_used:
        _bars(ax, x, bottom, other, width, OTHER_COLOR, hatch)
    ci = c["ci95"].to_numpy(dtype=float)
    has_ci = ~np.isnan(ci)  # n < 2: no whisker rather than a misleading zero-width one
    ax.errorbar(
        x[has_ci],
        mean[has_ci],
        yerr=ci[has_ci],
        fmt="none",
        ecolor="black",
        capsize=2,
        elinewidth=0.8,
        capthick=0.8,
    )
    ci = np.nan_to_num(ci)
    for xi in x[c["missing"].to_numpy(dtype=bool)]:
        ax.text(
            xi,
            0,
            " missing",
            rotation=90,
            ha="center",
            va="bottom",
            fontsize=7,
            color="#AA0000",
            in_layout=False,
        )
    return other_used, np.nanmax(np.append(mean + ci, bottom + other))


def _local_baseline(ax, cells: pd.DataFrame, top: float) -> tuple[list, float]:
    """The local completion time as a dashed line across the figure, its 95% CI as a band: its legend
    entry, and `top` raised to what it reaches (neither, for cells without a local baseline)."""
    local_mean, local_ci = cells["local_mean"].iloc[0], cells["local_ci95"].iloc[0]
    if math.isnan(local_mean):
        return [], top
    ax.axhline(local_mean, color="black", linestyle="--", linewidth=1.0, zorder=3)
    if not math.isnan(local_ci) and local_ci > 0:
        ax.axhspan(
            local_mean - local_ci,
            local_mean + local_ci,
            color="black",
            alpha=0.08,
            linewidth=0,
            zorder=0.5,
        )
    line = Line2D(
        [],
        [],
        color="black",
        linestyle="--",
        linewidth=1.0,
        label=f"local: {local_mean:.3g} s" + (" (band: 95% CI)" if local_ci > 0 else ""),
    )
    return [line], max(top, local_mean + (0 if math.isnan(local_ci) else local_ci))


def _rate_axis(ax, rates: list, methods: list[str], width: float) -> None:
    """A group of bars per rate, labelled with the rate under the group and each method under its bar."""
    bar_x = [i - GROUP_WIDTH / 2 + width * (j + 0.5) for i in range(len(rates)) for j in range(len(methods))]
    ax.xaxis.remove_overlapping_locs = False  # a middle bar sits on its group's major tick; keep its label
    ax.set_xticks(bar_x, methods * len(rates), minor=True, rotation=90, fontsize=7)
    ax.set_xticks(np.arange(len(rates)), [rate_label(r) for r in rates])
    ax.tick_params(axis="x", which="major", length=0, pad=6 + 4.2 * max(len(m) for m in methods or ["x"]))
    ax.set_xlim(-0.5, len(rates) - 0.5)
    ax.set_xlabel("link rate (Mbit/s)")


def _bars(ax, x, bottom, height, width: float, color: str, hatch: str) -> None:
    """Bars as one collection rather than one patch each: drawing ~10x fewer artists keeps a
    paper-sized grid of figures fast."""
    verts = [
        [(xi - width / 2, b), (xi - width / 2, b + h), (xi + width / 2, b + h), (xi + width / 2, b)]
        for xi, b, h in zip(x, bottom, height, strict=True)
        if h > 0
    ]
    if verts:
        ax.add_collection(
            PolyCollection(verts, facecolors=color, edgecolors="white", linewidths=0.3, hatch=hatch),
            autolim=False,
        )
