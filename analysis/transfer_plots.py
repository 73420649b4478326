"""A transfer run's figures (`analysis.transfers`), in the energy study's form (its Figure 2): per
link, throughput (top) and energy per 100 MB (bottom) against concurrency, parallelism and I/O size,
a line per dataset, each setting varied with the others at the baseline (`transfers.baseline`)."""

from __future__ import annotations

from pathlib import Path

import matplotlib
import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from analysis.plots import PNG_DPI, Plot, safe_name
from analysis.style import METHOD_COLORS, STYLE
from analysis.transfers import LINK, baseline, effect

LABELS = {"concurrency": "concurrency (files at once)", "parallelism": "parallelism (streams per file)",
          "io_kb": "I/O size (KiB per read)"}  # fmt: skip


def transfer_figure(table: pd.DataFrame) -> Figure:
    """One link's figure: a column per setting the run varies, throughput over energy per 100 MB."""
    settings = [s for s in LABELS if table[s].nunique() > 1] or ["concurrency"]
    energy = "energy_per_100mb_j" in table and table["energy_per_100mb_j"].notna().any()
    rows = 2 if energy else 1
    fig = Figure(figsize=(3.4 * len(settings) + 0.6, 2.9 * rows + 0.4), layout="constrained")
    axes = fig.subplots(rows, len(settings), squeeze=False, sharex="col")
    colors = {d: METHOD_COLORS[i % len(METHOD_COLORS)] for i, d in enumerate(dict.fromkeys(table["dataset"]))}
    held = baseline(table)
    for j, setting in enumerate(settings):
        curves = effect(table, setting)
        for dataset, g in curves.groupby("dataset", sort=False):
            style = {"marker": "o", "capsize": 3, "color": colors[dataset], "label": dataset}
            axes[0][j].errorbar(g[setting], g["throughput_mbps"], yerr=g["throughput_ci95"], **style)
            if energy:
                axes[1][j].errorbar(g[setting], g["energy_per_100mb_j"], yerr=g["energy_ci95"], **style)
        others = ", ".join(f"{k} {v}" for k, v in held.items() if k != setting)
        axes[0][j].set_title(f"{LABELS[setting].split(' (')[0]} ({others})", fontsize=9)
        axes[0][j].set_ylabel("throughput (Mbit/s)")
        axes[0][j].set_ylim(bottom=0)
        axes[-1][j].set_xlabel(LABELS[setting])
        values = sorted(curves[setting].unique())
        if len(values) > 1 and values[-1] / max(values[0], 1) >= 8:
            axes[-1][j].set_xscale("log", base=2)
        axes[-1][j].set_xticks(values, [str(v) for v in values])
        if energy:
            axes[1][j].set_ylabel("energy per 100 MB (J)")
            axes[1][j].set_ylim(bottom=0)
    axes[0][0].legend(fontsize="small")
    return fig


def links(table: pd.DataFrame) -> list[tuple[str, pd.DataFrame]]:
    """Each link of the run (rate, and delay and loss where the rows have them): its title and rows."""
    keys = [k for k in LINK if k in table]
    out = []
    for key, g in table.groupby(keys, sort=True, dropna=False):
        key = key if isinstance(key, tuple) else (key,)
        parts = [f"{key[0]:g} Mbit/s"] + [
            f"{k} {v:g}" for k, v in zip(keys[1:], key[1:], strict=True) if not np.isnan(v)
        ]
        out.append((", ".join(parts), g))
    return out


def transfer_figures(table: pd.DataFrame, out_dir: Path) -> list[Plot]:
    """Every link's figure as PNG and SVG in `out_dir`."""
    plots = []
    for title, g in links(table):
        with matplotlib.rc_context(STYLE):
            fig = transfer_figure(g)
            stem = safe_name(f"transfers-{title.replace(' Mbit/s', 'mbit')}")
            png, svg = out_dir / f"{stem}.png", out_dir / f"{stem}.svg"
            fig.draw_without_rendering()
            fig.set_layout_engine(None)
            fig.savefig(png, dpi=PNG_DPI, metadata={"Software": None})
            fig.savefig(svg, metadata={"Date": None})
        what = "throughput and energy per 100 MB against concurrency, parallelism and I/O size"
        plots.append(Plot("transfers", f"{title}: {what}", png, svg, (title,)))
    return plots
