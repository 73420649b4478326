"""Several clients offloading at once: the decision border against their number, each client's share,
where the time went, and energy per client.

A run with several clients (`clients:` and `contention:` in its experiment) has each cell offloaded by
k clients at once; the analysis names such a way to offload `raw-x4` (`contracts.stages.offload_label`),
so its decisions, penalties and stage figures treat k as it treats a method. Here, per (op, size,
rate, method) and k:

- the decision: does offloading still pay with k clients offloading at once (the mean completion time
  of all their trials against the local baseline, Welch's test as everywhere), and the border, the
  largest k up to which it pays at every count measured;
- where the time went: communication (the shared link: each client's transfer gets about 1/k of it)
  and the server's queueing (`t_server_queue`: the wait for a work slot), beside the server's stages;
- fairness: Jain's index of the clients' mean completion times, (sum x)^2 / (k sum x^2), 1 when every
  client fared alike and 1/k when one took everything;
- energy per client and task, from the device's power figures (`analysis.energy`), when the run has them.

With clients of several devices the way to offload carries the device (`raw-x4 on paper-p4`): each
row is the trials of that device's clients among the k at once, against that device's own baseline
and with its own power figures (both from `cells`), and the fairness is among those clients.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from analysis.decisions import OFFLOAD, decision_marks
from analysis.style import method_styles
from contracts.stages import LOCAL, label_clients, label_device, label_without_clients, on_device

KEYS = ["op", "size", "rate_mbps", "method"]  # method: the base label, without its number of clients
SERVER = ["t_server_decode", "t_server_compute", "t_server_encode"]


def has_contention(trials: pd.DataFrame) -> bool:
    return "clients" in trials and trials["clients"].notna().any()


def jain(values) -> float:
    """Jain's fairness index of `values` (NaN without any): 1 when all are equal, 1/n at worst."""
    x = np.asarray([v for v in values if not pd.isna(v)], dtype=float)
    if not len(x) or not (x**2).sum():
        return float("nan")
    return float(x.sum() ** 2 / (len(x) * (x**2).sum()))


def contention_table(trials: pd.DataFrame, cells: pd.DataFrame) -> pd.DataFrame:
    """One row per (op, size, rate, method, clients at once): the cell's decision and stage means
    (from `cells`, `analysis.cells.cell_table`), the clients' fairness, and energy per client and task
    (the cell's mean remote energy, when `analysis.energy.energy_cells` gave `cells` one)."""
    remote = cells[cells["method"].map(label_clients).notna()].copy()
    remote["clients"] = remote["method"].map(label_clients).astype(int)
    remote["method"] = remote["method"].map(label_without_clients)
    ok = trials[trials["ok"] & (trials["method"] != LOCAL) & trials["clients"].notna()]
    ok = ok.assign(base=ok["method"].map(label_without_clients))
    per_client = ok.groupby(["op", "size", "rate_mbps", "base", "clients", "client"])["t_total"].mean()
    fairness = per_client.groupby(level=[0, 1, 2, 3, 4]).agg(jain)
    index = pd.MultiIndex.from_frame(remote[["op", "size", "rate_mbps", "method", "clients"]])
    remote["jain"] = fairness.reindex(index).to_numpy()
    server = remote[[f"{s}_mean" for s in SERVER]].sum(axis=1, min_count=1)
    queue = ok.groupby(["op", "size", "rate_mbps", "base", "clients"])["t_server_queue"].mean()
    remote["t_server_queue_mean"] = queue.reindex(index).to_numpy()
    remote["t_server_mean"] = server
    energy = "energy_remote_j" in remote
    if energy:
        remote["energy_j_per_client_task"] = remote["energy_remote_j"]
    columns = [*KEYS, "clients", "n", "mean", "ci95", "local_mean", "offload", "significant", "penalty"]
    columns += ["t_comm_mean", "t_server_queue_mean", "t_server_mean", "jain"]
    columns += ["energy_j_per_client_task"] if energy else []
    return remote[columns].sort_values([*KEYS, "clients"]).reset_index(drop=True)


def borders(table: pd.DataFrame) -> pd.DataFrame:
    """Per (op, size, rate, method): the decision at each number of clients, in ascending order (the
    decision vectors' marks: 1, 0, ? undecided, - missing) and the border: the largest number of
    clients up to which offloading pays, significantly, at every count measured (0: not even alone)."""
    table = table.assign(mark=decision_marks(table))
    rows = []
    for key, group in table.groupby(KEYS, sort=False):
        group = group.sort_values("clients")
        border = 0
        for k, mark in zip(group["clients"], group["mark"], strict=True):
            if mark != OFFLOAD:
                break
            border = int(k)
        rows.append({**dict(zip(KEYS, key, strict=True)), "clients": ",".join(map(str, group["clients"])),
                     "decisions": "".join(group["mark"]), "border": border})  # fmt: skip
    return pd.DataFrame(rows, columns=[*KEYS, "clients", "decisions", "border"])


def contention_lines(table: pd.DataFrame) -> list[str]:
    """The summary's lines: per cell the border and what changed from the fewest clients to the most."""
    lines = ["several clients (decisions by clients at once; border: offloading pays up to that many):"]
    for row in borders(table).itertuples(index=False):
        group = table[(table[KEYS] == [row.op, row.size, row.rate_mbps, row.method]).all(axis=1)]
        first, last = group.iloc[0], group.iloc[-1]
        lines.append(
            f"  {row.op} {row.size} @ {row.rate_mbps:g} Mbit/s {row.method}: clients {row.clients} -> "
            f"{row.decisions}, border {row.border}; from {int(first.clients)} to {int(last.clients)} at once "
            f"communication {first.t_comm_mean:.3g} -> {last.t_comm_mean:.3g} s, server queue "
            f"{_s(first.t_server_queue_mean)} -> {_s(last.t_server_queue_mean)} s, Jain's index "
            f"{_f(first.jain)} -> {_f(last.jain)}"
        )
    return lines


def _s(value) -> str:
    return "n/a" if pd.isna(value) else f"{value:.3g}"


def _f(value) -> str:
    return "n/a" if pd.isna(value) else f"{value:.3f}"


def contention_figure(table: pd.DataFrame, op: str) -> Figure:
    """Per (size, rate) of `op`: completion time against the number of clients offloading at once, per
    method, with the local time (top), and its communication and server queueing (bottom)."""
    rows = table[table["op"] == op]
    pairs = list(dict.fromkeys(zip(rows["size"], rows["rate_mbps"], strict=True)))
    methods = list(dict.fromkeys(rows["method"]))
    styles = method_styles(methods)
    fig = Figure(figsize=(3.6 * len(pairs) + 1, 6.2), layout="constrained")
    axes = fig.subplots(2, len(pairs), squeeze=False, sharex="col")
    for j, (size, rate) in enumerate(pairs):
        top, bottom = axes[0][j], axes[1][j]
        here = rows[(rows["size"] == size) & (rows["rate_mbps"] == rate)]
        for method in methods:
            m = here[here["method"] == method].sort_values("clients")
            color = styles[method]["color"]
            top.errorbar(
                m["clients"], m["mean"], yerr=m["ci95"], marker="o", capsize=3, label=method, color=color
            )
            bottom.plot(
                m["clients"], m["t_comm_mean"], marker="o", color=color, label=f"{method} communication"
            )
            bottom.plot(m["clients"], m["t_server_queue_mean"], marker="s", linestyle=":", color=color,
                        label=f"{method} server queue")  # fmt: skip
        _local_lines(top, here)
        top.set_title(f"{op} {size} @ {rate:g} Mbit/s")
        top.set_ylabel("completion time (s)")
        bottom.set_ylabel("time (s)")
        bottom.set_xlabel("clients offloading at once")
        bottom.set_xticks(sorted(here["clients"].unique()))
    axes[0][0].legend(fontsize="small")
    axes[1][0].legend(fontsize="small")
    return fig


def _local_lines(ax, rows: pd.DataFrame) -> None:
    """The local time of each client device in `rows` (one, unless the clients were of several)."""
    devices = [label_device(m) for m in rows["method"]]
    for i, device in enumerate(dict.fromkeys(devices)):
        style = ("--", ":", "-.")[i % 3]
        mine = rows[[d == device for d in devices]]
        if mine["local_mean"].notna().any():
            label = on_device(LOCAL, device)
            ax.axhline(mine["local_mean"].dropna().iloc[0], color="black", linestyle=style, label=label)
