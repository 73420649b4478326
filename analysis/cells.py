"""Per-cell statistics: one row per (op, size, rate, method), compared with the local baseline.

These are the measures of section II-E of the paper. A cell is every combination the run planned or
touched: the (op, size) pairs seen (and those in the manifest's experiment) crossed with every rate
and method. A cell without a successful trial stays in the table as `missing` (n = 0, numbers empty)
so a failure can never pass for a result; its failed trials are still counted.

With clients of several devices each way to offload is named with its device (`raw on paper-p4`,
`contracts.stages.offload_label`) and each device has its own local baseline: a cell is compared with
the local trials of its own device (column `device`; empty when the run's clients were of one device),
never with another device's, nor with all of them pooled.

With a manifest whose devices give the stages targets, each cell also has the emulation's error on its
remote - local difference and whether that could flip its decision (`emulation_error`,
`emulation_error_ci95`, `emulation_uncertain`: `analysis.emulation_error`).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from analysis.emulation_error import emulation_error
from analysis.load import at_point, main_point, row_devices
from analysis.stats import ci95, significant, welch
from analysis.stopping import Rule, stop_reason
from contracts.grid import sizes_for
from contracts.run import Manifest
from contracts.stages import (
    LOCAL,
    STAGES,
    label_clients,
    label_device,
    label_server,
    label_without_device,
    on_device,
    serves,
)

KEYS = ["op", "size", "rate_mbps", "method"]
PREFERRED_METHODS = ("json", "ujson", "raw")
REFERENCE_METHOD = "json"
BASELINE = ["op", "size", "device"]  # what a local baseline is of (device "": the run's clients had one)


def method_order(methods) -> list[str]:
    """json, ujson, raw first (the paper's order), then any others alphabetically; with clients of
    several devices each way to offload on every device in turn (`json on a`, `json on b`, `raw on a`)."""
    methods = set(methods)
    heads = {label_without_device(m) for m in methods}
    first = [m for p in PREFERRED_METHODS for m in sorted(heads) if m.lower() == p]
    rank = {m: i for i, m in enumerate(first + sorted(heads - set(first), key=lambda m: (m.lower(), m)))}
    return sorted(methods, key=lambda m: (rank[label_without_device(m)], label_device(m) or ""))


def cell_devices(methods) -> list[str]:
    """Each cell's client device, from its way to offload ("" where the run's clients were of one)."""
    return [label_device(m) or "" for m in methods]


def cell_table(trials: pd.DataFrame, manifest: Manifest | None = None) -> pd.DataFrame:
    """All cells of the grid with n, failed, means, CIs, decision, significance, penalty and ratios.
    A run that varies delay or loss: the cells of its first point of the link (`analysis.load.main_point`;
    `analysis.link_delay` has every point's), so that no cell pools two points."""
    trials = at_point(trials, main_point(trials))
    trials = trials.assign(device=row_devices(trials))
    local = trials[trials["method"] == LOCAL]
    remote = trials[trials["method"] != LOCAL]
    index = _grid(trials, manifest)
    cells = pd.DataFrame(index=index)
    cells["device"] = cell_devices(index.get_level_values("method"))

    good = remote[remote["ok"]].groupby(KEYS)
    total = good["t_total"].agg(["count", "mean", "std"]).reindex(index)
    cells["n"] = total["count"].fillna(0).astype(int)
    cells["failed"] = remote[~remote["ok"]].groupby(KEYS).size().reindex(index).fillna(0).astype(int)
    cells["missing"] = cells["n"] == 0
    cells["n_trials"] = cells["n"] + cells["failed"]
    cells["stop_reason"] = _stop_reasons(trials, index, manifest)
    cells["mean"] = total["mean"]
    cells["std"] = total["std"]
    cells["ci95"] = ci95(total["std"], cells["n"])

    # each cell's own device's baseline
    base = local[local["ok"]].groupby(BASELINE)["t_total"].agg(["count", "mean", "std"])
    pairs = pd.MultiIndex.from_arrays(
        [index.get_level_values("op"), index.get_level_values("size"), cells["device"]], names=BASELINE
    )
    base = base.reindex(pairs)
    cells["local_n"] = base["count"].fillna(0).astype(int).to_numpy()
    cells["local_mean"] = base["mean"].to_numpy()
    cells["local_std"] = base["std"].to_numpy()
    cells["local_ci95"] = ci95(cells["local_std"], cells["local_n"])

    known = (cells["n"] > 0) & (cells["local_n"] > 0)
    cells["offload"] = pd.array(np.where(known, cells["mean"] < cells["local_mean"], pd.NA), dtype="Int64")
    diff, half, dof = welch(
        cells["mean"], cells["std"], cells["n"], cells["local_mean"], cells["local_std"], cells["local_n"]
    )
    cells["significant"] = pd.array(np.where(np.isnan(half), pd.NA, significant(diff, half)), dtype="boolean")
    cells["penalty"] = cells["mean"] - cells["local_mean"]
    cells["diff_ci95"] = half
    cells["welch_dof"] = dof

    for stage in STAGES:
        s = good[stage].agg(["count", "mean", "std"]).reindex(index)
        cells[f"{stage}_mean"] = s["mean"]
        cells[f"{stage}_ci95"] = ci95(s["std"], s["count"].fillna(0))
    if (
        "t_server_start" in trials and trials["t_server_start"].notna().any()
    ):  # a cgi run: its start-up, and communication without it
        for column in ("t_server_start", "t_comm_net"):
            s = good[column].agg(["count", "mean", "std"]).reindex(index)
            cells[f"{column}_mean"] = s["mean"]
            cells[f"{column}_ci95"] = ci95(s["std"], s["count"].fillna(0))
    cells["marshalling_ratio"] = (cells["mean"] - cells["t_server_compute_mean"]) / cells["mean"]
    cells["json_ratio"] = cells["mean"] / _reference_means(cells)
    # a cell whose remote trials or local baseline came from a device emulation that missed its target
    flags = trials[trials["emulation_flagged"]] if "emulation_flagged" in trials.columns else trials.iloc[:0]
    remote_flag = flags[flags["method"] != LOCAL].groupby(KEYS).size().reindex(index).fillna(0) > 0
    local_flag = flags[flags["method"] == LOCAL].groupby(BASELINE).size().reindex(pairs).fillna(0) > 0
    cells["emulation_flagged"] = remote_flag.to_numpy() | local_flag.to_numpy()
    # how far the emulation's misses move each cell's difference, and whether that could flip it
    cells = cells.join(emulation_error(trials, cells, manifest))
    return cells.reset_index()


def _stop_reasons(trials: pd.DataFrame, index: pd.MultiIndex, manifest: Manifest | None) -> list[str]:
    """Why each cell stopped (`analysis.stopping`, as the sweep decided it); empty while it is open, or
    when there is no manifest to say how many repetitions the run had."""
    if manifest is None:
        return [""] * len(index)
    rule = Rule.of(manifest.experiment)
    times = trials["t_total"].where(trials["ok"].astype(bool))
    order = trials["rep"].fillna(trials["line"]) if "rep" in trials else trials["line"]  # older runs: rows
    series: dict[tuple, list[tuple[float, float | None]]] = {}
    for op, size, rate, method, device, rep, value in zip(
        trials["op"], trials["size"], trials["rate_mbps"], trials["method"], row_devices(trials), order, times,
        strict=True,
    ):  # fmt: skip
        key = (op, size, device) if method == LOCAL else (op, size, rate, method)
        series.setdefault(key, []).append((rep, None if pd.isna(value) else float(value)))
    out = []
    for op, size, rate, method in index:
        remote = [v for _, v in sorted(series.get((op, size, rate, method), []), key=lambda x: x[0])]
        base = (op, size, label_device(method) or "")  # its own device's baseline
        local = [v for _, v in sorted(series.get(base, []), key=lambda x: x[0])]
        out.append(stop_reason(remote, local, rule) or "")
    return out


def _reference_means(cells: pd.DataFrame) -> np.ndarray:
    """The json cell's mean at each cell's (op, size, rate), on the cell's own device; NaN where there
    is none."""
    methods = cells.index.get_level_values("method")
    heads = [label_without_device(m) for m in dict.fromkeys(methods)]
    ref = [m for m in dict.fromkeys(heads) if m.lower() == REFERENCE_METHOD][:1]
    if not ref:
        return np.full(len(cells), np.nan)
    means = cells["mean"].copy()
    means.index = pd.MultiIndex.from_arrays(
        [cells.index.get_level_values(k) for k in ("op", "size", "rate_mbps")]
        + [[label_without_device(m) for m in methods], cells["device"].to_numpy()]
    )
    means = means.xs(ref[0], level=3)
    keys = pd.MultiIndex.from_arrays(
        [cells.index.get_level_values(k) for k in ("op", "size", "rate_mbps")] + [cells["device"].to_numpy()]
    )
    return means.reindex(keys).to_numpy()


def _grid(trials: pd.DataFrame, manifest: Manifest | None) -> pd.MultiIndex:
    remote = trials[trials["method"] != LOCAL]
    pairs = set(zip(trials["op"], trials["size"], strict=True))
    rates = set(remote["rate_mbps"])
    methods = set(remote["method"])
    plan = planned_grid(manifest)
    if plan:
        ops, sizes, plan_rates, plan_methods = plan
        pairs |= {(op, size) for op in ops for size in sizes_for(op, sizes)}
        rates |= set(plan_rates)
        methods |= set(plan_methods)
    tuples = [
        (op, size, rate, method)
        for op, size in sorted(pairs)
        for rate in sorted(rates)
        for method in method_order(methods)
        if serves(label_server(method), op)  # the embedded study's filters on the OpenCV servers only
    ]
    return pd.MultiIndex.from_tuples(tuples, names=KEYS)


def planned_grid(manifest: Manifest | None) -> tuple[list, list, list, list] | None:
    """The experiment's ops, sizes, rates and methods from the manifest, when there is one.

    Cells the sweep planned but never wrote (an interrupted run) then show up as missing instead of
    silently shrinking the grid.
    """
    if manifest is None:
        return None
    exp = manifest.experiment
    return list(exp.ops), list(exp.sizes), [float(r) for r in exp.rates_mbps], _planned_labels(manifest)


def _planned_labels(manifest: Manifest) -> list[str]:
    """The experiment's ways to offload; with clients of several devices each on the devices of the
    clients that ran it (k at once: clients 1..k, `testbed.sweep.plan`), so no cell that was never planned
    shows up as missing."""
    exp = manifest.experiment
    if not exp.client_devices:
        return exp.offload_labels()
    hosts = client_device_names(manifest)
    return [
        on_device(label, device)
        for label in exp.offload_labels()
        for device in dict.fromkeys(hosts[: label_clients(label) or 1])
    ]


def client_device_names(manifest: Manifest) -> list[str]:
    """Each client host's device by its profile's name, client 1 first, as the sweep recorded them;
    empty when the clients were of one device. A run from before the record: from the experiment's
    references (a profile's name, or a profile's file, whose stem is its name unless the file gives
    another)."""
    if manifest.client_device_names or not manifest.experiment.client_devices:
        return list(manifest.client_device_names)
    known = [d.profile.get("name") for d in (manifest.device, *manifest.client_devices) if d is not None]
    return [ref if ref in known else Path(ref).stem for ref in manifest.experiment.client_devices]
