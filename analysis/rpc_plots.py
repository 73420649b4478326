"""An RPC study's figures (`analysis.rpc_study`), in the form of the lightweight-RPC study's Fig. 9:
(a) Average, (b) GetRandNums and (c) SendRcvLargeData, the time of 1000 calls against n or K, a panel
per link and a line per transport and server, with 95% CIs; (d) LargeDataK's bytes per call against
K, on the wire (the appliance's counters, solid) and as framed messages (dashed)."""

from __future__ import annotations

from pathlib import Path

import matplotlib
import pandas as pd
from matplotlib.figure import Figure

from analysis.plots import PNG_DPI, Plot
from analysis.rpc_study import link_name
from analysis.style import METHOD_COLORS, STYLE
from contracts.rpc_study import AVERAGE, GET_RAND_NUMS, LARGE_DATA

PANELS = [
    ("a", AVERAGE, "n (int32 in the request)"),
    ("b", GET_RAND_NUMS, "n (int32 in the reply)"),
    ("c", LARGE_DATA, "K (int32 members, echoed)"),
]


def _ways(cells: pd.DataFrame) -> dict[tuple[str, str], dict]:
    """A fixed colour and line per (method, server) in the run: tagless solid, gRPC dashed."""
    ways = sorted(
        set(zip(cells["method"], cells["server"], strict=True)), key=lambda w: (w[1], w[0] != "tagless")
    )
    servers = list(dict.fromkeys(s for _, s in ways))
    return {
        (m, s): {
            "color": METHOD_COLORS[(2 * servers.index(s) + (m != "tagless")) % len(METHOD_COLORS)],
            "linestyle": "-" if m == "tagless" else "--",
            "label": m if s == "python" else f"{m}@{s}",
        }
        for m, s in ways
    }


def time_figure(cells: pd.DataFrame, op: str, letter: str, xlabel: str) -> Figure:
    """Fig. 9 (a)-(c): the time of 1000 calls of `op` against its size, a panel per link."""
    rows = cells[cells["op"] == op]
    rates = sorted(rows["rate_mbps"].unique())
    fig = Figure(figsize=(3.3 * len(rates) + 0.6, 3.2), layout="constrained")
    axes = fig.subplots(1, len(rates), squeeze=False)[0]
    styles = _ways(cells)
    for ax, rate in zip(axes, rates, strict=True):
        for (method, server), g in rows[rows["rate_mbps"] == rate].groupby(["method", "server"]):
            g = g.sort_values("size")
            ax.errorbar(
                g["size"], g["per_1000_s"] * 1000, yerr=g["per_1000_ci95"] * 1000, marker="o", capsize=3,
                **styles[(method, server)],
            )  # fmt: skip
        ax.set_xscale("log", base=2 if op == LARGE_DATA else 10)
        sizes = sorted(rows["size"].unique())
        ax.set_xticks(sizes, [str(s) for s in sizes], rotation=45 if len(sizes) > 4 else 0)
        ax.set_title(f"({letter}) {op}, {link_name(rate)}")
        ax.set_xlabel(xlabel)
        ax.set_ylabel("time of 1000 calls (ms)")
        ax.set_ylim(bottom=0)
    axes[0].legend(fontsize="small")
    return fig


def bytes_figure(cells: pd.DataFrame) -> Figure:
    """Fig. 9 (d): LargeDataK's bytes per call (both ways) against K: on the wire, solid, on the
    unshaped link when the run has it (else its fastest); as its transport frames the messages, dashed."""
    rows = cells[cells["op"] == LARGE_DATA]
    rate = max(rows["rate_mbps"])
    rows = rows[rows["rate_mbps"] == rate]
    fig = Figure(figsize=(4.6, 3.4), layout="constrained")
    ax = fig.subplots()
    styles = _ways(cells)
    for (method, server), g in rows.groupby(["method", "server"]):
        g = g.sort_values("size")
        style = {**styles[(method, server)], "linestyle": "-"}
        ax.plot(g["size"], g["wire_per_call"], marker="o", **{**style, "label": f"{style['label']} wire"})
        ax.plot(
            g["size"], g["bytes_up"] + g["bytes_down"], marker="x", color=style["color"], linestyle=":",
            label=f"{style['label']} messages",
        )  # fmt: skip
    sizes = sorted(rows["size"].unique())
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xticks(sizes, [str(s) for s in sizes], rotation=45)
    ax.set_title(f"(d) LargeDataK bytes per call, {link_name(rate)}")
    ax.set_xlabel("K (int32 members)")
    ax.set_ylabel("bytes per call, both ways")
    ax.legend(fontsize="small")
    return fig


def rpc_figures(cells: pd.DataFrame, out_dir: Path) -> list[Plot]:
    """The run's Fig. 9 panels it has the operations for, as PNG and SVG in `out_dir`."""
    plots = []
    figures = [
        (f"rpc-fig9{letter}", f"({letter}) {op}: time of 1000 calls against {xlabel.split(' ')[0]}", op,
         lambda op=op, letter=letter, xlabel=xlabel: time_figure(cells, op, letter, xlabel))
        for letter, op, xlabel in PANELS
    ]  # fmt: skip
    figures.append(
        ("rpc-fig9d", "(d) LargeDataK: bytes per call against K", LARGE_DATA, lambda: bytes_figure(cells))
    )
    for stem, title, op, draw in figures:
        if cells.empty or not (cells["op"] == op).any():
            continue
        with matplotlib.rc_context(STYLE):
            fig = draw()
            png, svg = out_dir / f"{stem}.png", out_dir / f"{stem}.svg"
            fig.draw_without_rendering()
            fig.set_layout_engine(None)
            fig.savefig(png, dpi=PNG_DPI, metadata={"Software": None})
            fig.savefig(svg, metadata={"Date": None})
        plots.append(Plot("rpc", title, png, svg, (op,)))
    return plots
