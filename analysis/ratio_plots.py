"""Marshalling-to-completion and method-to-JSON ratios of one op as size x rate heat maps.

Heat maps rather than lines: with every size, rate and method there would be dozens of overlapping
lines, while a grid per method keeps each number readable (it is printed in its cell).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.colors import LogNorm, Normalize
from matplotlib.figure import Figure

from analysis.cells import REFERENCE_METHOD
from analysis.style import rate_label
from contracts.stages import DEVICE_MARK, label_device, label_without_device

MISSING_COLOR = "#DDDDDD"
# colour bar ticks for ratios, coarse to fine: the first set with three ticks in range is used
RATIO_TICKS = [
    (0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0),
    (0.25, 0.33, 0.5, 0.67, 1.0, 1.5, 2.0, 3.0, 4.0),
    (0.8, 0.9, 1.0, 1.1, 1.25),
]


def ratios_figure(cells: pd.DataFrame, op: str, methods: list[str]) -> Figure:
    sizes = sorted(cells["size"].unique())
    rates = sorted(cells["rate_mbps"].unique())
    methods = [m for m in methods if m in set(cells["method"])]
    reference = [m for m in methods if label_without_device(m).lower() == REFERENCE_METHOD]
    rows = [("marshalling_ratio", "marshalling / total time")]
    if reference and len(reference) < len(methods):
        rows.append(("json_ratio", f"total / {reference[0]} total time"))
    ncols = len(methods)
    fig = Figure(
        figsize=(
            max(6.5, 1.0 + (0.55 * len(rates) + 0.7) * ncols),
            0.9 + (0.8 + 0.3 * len(sizes)) * len(rows),
        ),
        layout="constrained",
    )
    axes = fig.subplots(len(rows), ncols, squeeze=False)
    for r, (column, label) in enumerate(rows):
        values = {m: _grid(cells, m, column, sizes, rates) for m in methods}
        if column == "marshalling_ratio":
            norm, cmap, fmt = Normalize(0.0, 1.0), "viridis", "{:.0%}"
        else:
            norm, cmap, fmt = _ratio_norm(values.values()), "RdBu_r", "{:.2f}"
        image = None
        for k, method in enumerate(methods):
            ax = axes[r, k]
            if column == "json_ratio" and method in reference:
                ax.set_axis_off()
                ax.text(
                    0.5,
                    0.5,
                    f"{label}\n\n{method} is the reference (1.00)",
                    ha="center",
                    va="center",
                    transform=ax.transAxes,
                )
                continue
            grid = values[method]
            image = ax.imshow(np.ma.masked_invalid(grid), cmap=cmap, norm=norm, aspect="auto", origin="lower")
            ax.set_facecolor(MISSING_COLOR)
            for (i, j), v in np.ndenumerate(grid):
                ax.text(
                    j,
                    i,
                    "-" if np.isnan(v) else fmt.format(v),
                    ha="center",
                    va="center",
                    fontsize=6.5,
                    in_layout=False,
                    color="black" if np.isnan(v) or _light(image, v) else "white",
                )
            ax.set_title(method)
            ax.set_xticks(np.arange(len(rates)), [rate_label(x) for x in rates], fontsize=7)
            ax.set_yticks(np.arange(len(sizes)), [str(s) for s in sizes], fontsize=7)
            ax.set_xlabel("link rate (Mbit/s)", fontsize=7)
            if k == 0:
                ax.set_ylabel(f"{label}\nmatrix size", fontsize=8)
            elif k == 1 and column == "json_ratio" and methods[0] in reference:
                ax.set_ylabel("matrix size", fontsize=8)
        if image is not None:
            bar = fig.colorbar(image, ax=list(axes[r, :]), shrink=0.9, label=label)
            if isinstance(norm, LogNorm):
                ticks = _ratio_ticks(norm)
                bar.set_ticks(ticks, labels=[f"{t:g}" for t in ticks])
                bar.ax.minorticks_off()
    fig.suptitle(
        f"{op}{_on(methods)}: marshalling-to-completion ratio (top) and method-to-JSON ratio (bottom); - = missing"
        if len(rows) > 1
        else f"{op}{_on(methods)}: marshalling-to-completion ratio; - = missing"
    )
    return fig


def _on(methods: list[str]) -> str:
    """` on paper-p4` for the ratios of one device's cells, with clients of several devices; else ""."""
    devices = {label_device(m) for m in methods} - {None}
    return f"{DEVICE_MARK}{devices.pop()}" if len(devices) == 1 else ""


def _grid(cells: pd.DataFrame, method: str, column: str, sizes: list, rates: list) -> np.ndarray:
    g = cells[cells["method"] == method].set_index(["size", "rate_mbps"])[column]
    return (
        g.reindex(pd.MultiIndex.from_product([sizes, rates]))
        .to_numpy(dtype=float)
        .reshape(len(sizes), len(rates))
    )


def _ratio_norm(grids) -> LogNorm:
    """Log scale symmetric about 1, so twice as slow as JSON is as red as half the time is blue."""
    finite = np.concatenate([g[np.isfinite(g) & (g > 0)] for g in grids] + [np.array([1.0])])
    spread = max(float(np.abs(np.log(finite)).max()), np.log(1.1))
    return LogNorm(np.exp(-spread), np.exp(spread))


def _ratio_ticks(norm: LogNorm) -> list[float]:
    for candidates in RATIO_TICKS:
        ticks = [t for t in candidates if norm.vmin <= t <= norm.vmax]
        if len(ticks) >= 3:
            return ticks
    return [1.0]


def _light(image, value: float) -> bool:
    r, g, b, _ = image.cmap(image.norm(value))
    return 0.299 * r + 0.587 * g + 0.114 * b > 0.5
