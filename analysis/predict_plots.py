"""The predicted decision border: per method, the lowest rate from which offloading pays against the
matrix size, with the run's measured decisions drawn over it (undecided cells too) and the border of
the marshalling-blind inequality (Melendez and McGarry: no encode or decode cost), which is the same
for every method. A measured cell the emulation's error could flip (`emulation_uncertain`) is ringed.
"""

from __future__ import annotations

import matplotlib
import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from analysis.cells import method_order
from analysis.decisions import OFFLOAD, STAY, UNDECIDED, decision_marks, uncertain
from analysis.predict_model import BorderModel, border_mbps
from analysis.style import STYLE, UNDECIDED_COLOR, UNDECIDED_LABEL, method_styles

PNG_DPI = 150
PREFIX = "prediction-border-"


def border_figure(model: BorderModel, cells: pd.DataFrame, op: str) -> Figure:
    cells = cells[cells["op"] == op]
    methods = method_order(cells["method"].unique())
    styles = method_styles(methods)
    sizes = np.linspace(cells["size"].min(), cells["size"].max(), 60)
    rates = cells["rate_mbps"]
    top = float(rates.max()) * 3
    fig = Figure(figsize=(4.0 + 2.6 * len(methods), 3.8), layout="constrained")
    axes = np.atleast_1d(fig.subplots(1, len(methods), sharey=True))
    blind = border_mbps(model, op, sizes, None)
    for ax, method in zip(axes, methods, strict=True):
        color = styles[method]["color"]
        ax.plot(
            sizes, border_mbps(model, op, sizes, method), color=color, linewidth=1.8, label="predicted border"
        )
        ax.plot(sizes, blind, color="black", linestyle="--", linewidth=1.0, label="marshalling-blind border")
        m = cells[cells["method"] == method]
        marks = decision_marks(m).to_numpy()
        pays, stays, open_ = marks == OFFLOAD, marks == STAY, marks == UNDECIDED
        ax.scatter(m["size"][pays], m["rate_mbps"][pays], marker="o", color=color, label="measured: offload")
        ax.scatter(
            m["size"][stays], m["rate_mbps"][stays], marker="x", color="#D55E00", label="measured: stay local"
        )
        if open_.any():  # neither: within the noise of the border, which is where the border should pass
            ax.scatter(
                m["size"][open_],
                m["rate_mbps"][open_],
                marker="D",
                facecolor=UNDECIDED_COLOR,
                edgecolor="black",
                linewidth=0.6,
                label=f"measured: {UNDECIDED_LABEL}",
            )
        if (flip := uncertain(m)).any():  # ringed: the emulation's error could flip the measured mark
            ax.scatter(
                m["size"][flip],
                m["rate_mbps"][flip],
                marker="o",
                s=140,
                facecolor="none",
                edgecolor="black",
                linewidth=0.8,
                label="measured: emulation uncertain (~)",
            )
        ax.set_yscale("log")
        ax.set_ylim(float(rates.min()) / 3, top)
        ax.set_title(f"{op}, {method}")
        ax.set_xlabel("matrix size")
        ax.grid(linewidth=0.4, alpha=0.5)
    axes[0].set_ylabel("link rate (Mbit/s)\noffloading pays above the border")
    legend = {}  # every panel's entries once: a method's panel may be the only one with an undecided cell
    for ax in axes:
        for handle, label in zip(*ax.get_legend_handles_labels(), strict=True):
            legend.setdefault(label, handle)
    axes[0].legend(legend.values(), legend.keys(), loc="upper right", frameon=False)
    return fig


def write_border_plots(model: BorderModel, cells: pd.DataFrame, out_dir) -> list:
    """One PNG and SVG per op. Returns the PNG paths."""
    written = []
    for op in sorted(cells["op"].unique()):
        with matplotlib.rc_context(STYLE):
            fig = border_figure(model, cells, op)
            png = out_dir / f"{PREFIX}{op}.png"
            fig.savefig(png, dpi=PNG_DPI, metadata={"Software": None})
            fig.savefig(png.with_suffix(".svg"), metadata={"Date": None})
        written.append(png)
    return written


def remove_border_plots(out_dir) -> None:
    for old in out_dir.glob(f"{PREFIX}*"):
        old.unlink()
