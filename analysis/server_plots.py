"""The gRPC servers side by side: each language's decode, compute and encode per size.

A run over several gRPC servers (`servers: [python, cpp, go]`) offloads the same requests to servers
that differ only in their language and matrix library, so the server's own stages are where they
differ. Each bar stacks one server's mean stage times for an op and size, averaged over the rates (the
server's work does not depend on the link); the stage figures (Fig. 4 form) show each server's whole
completion time per rate beside the other methods.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from analysis.style import STAGE_COLORS, STAGE_LABELS, method_styles
from contracts.stages import GRPC, SERVER_STAGES, label_server, label_without_device

GROUP_WIDTH = 0.8


def server_labels(methods: list[str]) -> list[str]:
    """The analysis's methods that are gRPC servers (`grpc`, `grpc@cpp`, ...), in the run's order."""
    return [m for m in methods if label_without_device(m).partition("@")[0] == GRPC]


def servers_figure(cells: pd.DataFrame, op: str, labels: list[str]) -> Figure:
    sizes = sorted(cells["size"].unique())
    styles = method_styles(labels)
    width = GROUP_WIDTH / len(labels)
    stages = list(SERVER_STAGES.values())
    fig = Figure(figsize=(max(6.0, 1.5 + 0.35 * len(sizes) * len(labels)), 4.4), layout="constrained")
    ax = fig.add_subplot()
    means = cells.groupby(["method", "size"])[[f"{s}_mean" for s in stages]].mean()
    for j, label in enumerate(labels):
        x = np.arange(len(sizes)) - GROUP_WIDTH / 2 + width * (j + 0.5)
        rows = (
            means.xs(label, level="method").reindex(sizes)
            if label in means.index.get_level_values(0)
            else None
        )
        bottom = np.zeros(len(sizes))
        for stage in stages:
            value = (
                np.zeros(len(sizes)) if rows is None else np.nan_to_num(rows[f"{stage}_mean"].to_numpy(float))
            )
            ax.bar(
                x, value, width, bottom=bottom, color=STAGE_COLORS[stage], hatch=styles[label]["hatch"],
                edgecolor="black", linewidth=0.4,
            )  # fmt: skip
            bottom += value
        for xi, total in zip(x, bottom, strict=True):
            if total > 0:
                ax.annotate(label_server(label), (xi, total), ha="center", va="bottom",
                            fontsize=7, rotation=90, xytext=(0, 2), textcoords="offset points")  # fmt: skip
    ax.set_xticks(np.arange(len(sizes)), [str(s) for s in sizes])
    ax.set_xlabel("matrix size (n x n)")
    ax.set_ylabel("server time per request, s (mean over rates)")
    ax.set_title(f"{op}: the gRPC servers' stages")
    ax.margins(y=0.15)
    handles = [
        ax.bar([0], [0], color=STAGE_COLORS[s], edgecolor="black", linewidth=0.4, label=STAGE_LABELS[s])
        for s in stages
    ]
    ax.legend(handles=handles, loc="upper left")
    return fig
