"""An RPC study's analysis (`rpc:`, issue 46; docs/rpc-study.md): per operation, size, link, transport
and server, a call's time and bytes; the tagless/gRPC ratio with its 95% CI; and the lightweight-RPC
study's figures beside ours, each difference split into what was measured.

A trial is a batch of N calls (`client.rpc_calls`); its per-call time is its batch's seconds over N,
and the cell's is the mean over its trials (CI over them). The study reports the time of 1000 calls,
which is that times 1000 (`per_1000_s`), whatever N the trial made. Bytes per call are of two kinds:
`bytes_up/down`, one call's messages as its transport frames them (tagless: its 16-byte header and
the payload; gRPC: its 5-byte prefix and the protobuf message), and `wire_up/down`, what the
appliance's ports sent while the batch ran, per call (Ethernet, IP and TCP headers, ACKs and, for
gRPC, HTTP/2's frames and headers included).

The ratio's CI is Student's on the log of the ratio of two means (delta method: each mean's relative
standard error, with the smaller side's degrees of freedom), so it stays positive and is symmetric
on a log scale.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from analysis.stats import ci95
from contracts.grid import is_unshaped, rate_label
from contracts.rpc_study import AVERAGE, GET_RAND_NUMS, LARGE_DATA, SAY_HELLO, STUDY_OPS
from contracts.stats import t_quantile

CELLS_FILE, RATIOS_FILE, STUDY_FILE = "rpc_cells.csv", "rpc_ratios.csv", "rpc_vs_study.csv"
TAGLESS, GRPC = "tagless", "grpc"
KEYS = ["op", "size", "rate_mbps", "server", "method"]
BOUND_TOLERANCE = 0.05  # the link's validation tolerance (`Validation.tolerance_pct`'s default)

# The study's figures (section 4.2): tagless (HPRPC) against gRPC, as the ratio of their times of
# 1000 calls. "X% better" is read as gRPC's time X% above HPRPC's, the reading its SayHello figures
# fix (305 ms against 279 ms is "9.3% better": 305 / 279 = 1.093); "k times better" as 1 / k.
STUDY = [
    (SAY_HELLO, 7, 279 / 305, "279 ms against gRPC's 305 ms (9.3% better)"),
    (AVERAGE, 10, 1 / 1.085, "8.5% better"),
    (AVERAGE, 10000, 1 / 1.216, "gRPC 21.6% higher"),
    (GET_RAND_NUMS, 10, 1 / 1.129, "12.9% better"),
    (GET_RAND_NUMS, 10000, 1 / 1.392, "39.2% better"),
    (LARGE_DATA, 128, 1 / 2.7, "nearly 2.7 times better"),
    (LARGE_DATA, 8192, 1 / 12.5, "about 12.5 times (gRPC's time)"),
]


def is_rpc_run(trials: pd.DataFrame) -> bool:
    return len(trials) > 0 and bool(trials["op"].isin(STUDY_OPS).all())


def link_name(rate: float) -> str:
    return rate_label(rate).replace(" Mbit/s", "M")


def rpc_cells(trials: pd.DataFrame) -> pd.DataFrame:
    """Per cell: trials kept and failed, calls per trial, a call's mean seconds and its 95% CI, the
    time of 1000 calls, the median and p99 call, the server's CPU per call, and bytes per call."""
    rows = trials[trials["op"].isin(STUDY_OPS)].copy()
    rows["server"] = rows["server"].fillna("python")
    rows["method"] = rows["method"].str.partition("@")[0]  # the loaded label (`grpc@cpp`): its transport
    ok = rows["ok"].astype(bool) & (rows["calls"] > 0)
    rows["per_call_s"] = (rows["t_total"] / rows["calls"]).where(ok)
    out = []
    for key, g in rows.groupby(KEYS, sort=True):
        good = g[g["per_call_s"].notna()]
        n = len(good)
        mean = float(good["per_call_s"].mean()) if n else math.nan
        half = float(ci95(good["per_call_s"].std(ddof=1), n)) if n else math.nan
        cell = dict(zip(KEYS, key, strict=True))
        cell.update(
            n=n,
            failed=len(g) - n,
            calls=int(good["calls"].median()) if n else 0,
            per_call_s=mean,
            per_call_sd=float(good["per_call_s"].std(ddof=1)) if n > 1 else math.nan,
            per_call_ci95=half,
            per_1000_s=mean * 1000,
            per_1000_ci95=half * 1000,
            median_call_s=float(good["t_call_median"].mean()) if n else math.nan,
            p99_call_s=float(good["t_call_p99"].mean()) if n else math.nan,
            server_cpu_call_s=float(good["cpu_server_call"].mean()) if n else math.nan,
            bytes_up=float(good["bytes_up"].mean()) if n else math.nan,
            bytes_down=float(good["bytes_down"].mean()) if n else math.nan,
            wire_up=float(good["wire_up"].mean()) if n else math.nan,
            wire_down=float(good["wire_down"].mean()) if n else math.nan,
        )
        out.append(cell)
    frame = pd.DataFrame(out)
    if not frame.empty:
        frame["wire_per_call"] = frame["wire_up"] + frame["wire_down"]
        frame["link"] = frame["rate_mbps"].map(link_name)
        # a call's request, then its reply, each through its direction's shaping: no call can take
        # less than its bytes at the rate; one that did passed through a burst at line rate
        rate_bps = frame["rate_mbps"].where(~frame["rate_mbps"].map(is_unshaped)) * 1e6
        frame["link_bound_s"] = frame["wire_per_call"] * 8 / rate_bps
        frame["below_link_bound"] = frame["per_call_s"] < (1 - BOUND_TOLERANCE) * frame["link_bound_s"]
    return frame


def compared_calls(trials: pd.DataFrame) -> pd.DataFrame:
    """The cells as `testbed compare` keys them (op, size, rate, and the transport labelled with its
    server: `grpc@cpp`), with a call's mean seconds and its CI (`analysis.compare`)."""
    cells = rpc_cells(trials)
    if cells.empty:
        return pd.DataFrame(columns=["op", "size", "rate_mbps", "method", "per_call_s", "per_call_ci95"])
    method = [
        m if s == "python" else f"{m}@{s}" for m, s in zip(cells["method"], cells["server"], strict=True)
    ]
    return cells.assign(method=method)[["op", "size", "rate_mbps", "method", "per_call_s", "per_call_ci95"]]


def ratio_ci(a: pd.Series, b: pd.Series) -> tuple[float, float, float]:
    """The ratio of the means of a over b per call and its 95% CI (delta method on the log)."""
    ratio = a["per_call_s"] / b["per_call_s"]
    rse = [
        (x["per_call_sd"] / x["per_call_s"]) ** 2 / x["n"] for x in (a, b) if x["n"] > 1
    ]  # each mean's squared relative standard error
    if len(rse) < 2 or not np.isfinite(ratio):
        return float(ratio), math.nan, math.nan
    half = float(t_quantile(min(a["n"], b["n"]) - 1)) * math.sqrt(sum(rse))
    return float(ratio), float(ratio * math.exp(-half)), float(ratio * math.exp(half))


def rpc_ratios(cells: pd.DataFrame) -> pd.DataFrame:
    """Per operation, size, link and server: tagless's call against gRPC's (the ratio of their mean
    times, with its CI), and what separates them, measured: the call's time, the server's CPU and the
    link's bytes per call (and per member for LargeDataK), each tagless minus gRPC."""
    out = []
    if cells.empty:
        return pd.DataFrame(out)
    for key, g in cells.groupby(["op", "size", "rate_mbps", "server"], sort=True):
        by = {m: r for m, r in g.set_index("method").iterrows()}
        if TAGLESS not in by or GRPC not in by or not (by[TAGLESS]["n"] and by[GRPC]["n"]):
            continue
        t, r = by[TAGLESS], by[GRPC]
        ratio, low, high = ratio_ci(t, r)
        op, size, rate, server = key
        wire_extra = r["wire_per_call"] - t["wire_per_call"]
        out.append(
            {
                "op": op,
                "size": size,
                "rate_mbps": rate,
                "link": link_name(rate),
                "server": server,
                "ratio": ratio,
                "ratio_low": low,
                "ratio_high": high,
                "significant": bool(np.isfinite(high) and (high < 1 or low > 1)),
                # either transport's calls beat their bytes at the link's rate (`below_link_bound`):
                # the shaper's burst passed part of them free, so the ratio is not the link's
                "flagged": bool(t.get("below_link_bound", False) or r.get("below_link_bound", False)),
                "tagless_per_call_s": t["per_call_s"],
                "grpc_per_call_s": r["per_call_s"],
                "saved_per_call_s": r["per_call_s"] - t["per_call_s"],
                "server_cpu_saved_s": r["server_cpu_call_s"] - t["server_cpu_call_s"],
                "tagless_wire_per_call": t["wire_per_call"],
                "grpc_wire_per_call": r["wire_per_call"],
                "wire_extra_per_call": wire_extra,
                "wire_s_per_call": 0.0 if is_unshaped(rate) else wire_extra * 8 / (rate * 1e6),
                "message_extra_per_call": (r["bytes_up"] + r["bytes_down"])
                - (t["bytes_up"] + t["bytes_down"]),
                # LargeDataK is echoed: K members each way, so a member's extra bytes are per direction
                "wire_extra_per_member": wire_extra / (2 * size) if op == LARGE_DATA else math.nan,
            }
        )
    return pd.DataFrame(out)


def why(row: pd.Series) -> str:
    """A ratio's difference from 1, split into what was measured: of gRPC's extra time per call, its
    server's CPU, its extra bytes at the link's rate, and the rest (the client's side: marshalling,
    HTTP/2's framing, Python's per-call work in grpcio)."""
    saved = row["saved_per_call_s"] * 1e6
    cpu = row["server_cpu_saved_s"] * 1e6 if np.isfinite(row["server_cpu_saved_s"]) else 0.0
    wire = row["wire_s_per_call"] * 1e6
    rest = saved - cpu - wire
    return (
        f"gRPC {saved:+.0f} us a call: server CPU {cpu:+.0f} us, "
        f"{row['wire_extra_per_call']:+.0f} B on the wire ({wire:+.0f} us at {row['link']}), "
        f"client and transport {rest:+.0f} us"
    )


def study_table(ratios: pd.DataFrame) -> pd.DataFrame:
    """The study's ratios beside ours: per figure it gives, our ratio with its CI for each server and
    link, and what made ours what it is (`why`)."""
    out = []
    for op, size, theirs, said in STUDY:
        mine = ratios[(ratios["op"] == op) & (ratios["size"] == size)] if not ratios.empty else ratios
        for _, r in mine.iterrows():
            out.append(
                {
                    "op": op,
                    "size": size,
                    "study_ratio": theirs,
                    "study_says": said,
                    "server": r["server"],
                    "link": r["link"],
                    "ratio": r["ratio"],
                    "ratio_low": r["ratio_low"],
                    "ratio_high": r["ratio_high"],
                    "ours_against_study": r["ratio"] / theirs,
                    "flagged": r["flagged"],
                    "why": why(r),
                }
            )
        if mine.empty:
            out.append({"op": op, "size": size, "study_ratio": theirs, "study_says": said, "why": "not run"})
    return pd.DataFrame(out)


def headlines(ratios: pd.DataFrame) -> list[str]:
    """One line per operation: the range of tagless/gRPC over its sizes, servers and links (flagged
    cells apart), beside the study's range: what the report's first screen says."""
    out = []
    if ratios.empty:
        return out
    for op, g in ratios.groupby("op", sort=False):
        kept = g[~g["flagged"]] if "flagged" in g else g
        theirs = [r for o, _, r, _ in STUDY if o == op]
        study = f"{min(theirs):.2f}-{max(theirs):.2f}" if len(theirs) > 1 else f"{theirs[0]:.2f}"
        if kept.empty:
            out.append(f"{op}: every cell flagged (the study: {study})")
            continue
        low, high = kept.loc[kept["ratio"].idxmin()], kept.loc[kept["ratio"].idxmax()]
        out.append(
            f"{op}: tagless/gRPC per call {low['ratio']:.2f} ({low['server']}, {low['link']}, size "
            f"{low['size']}) to {high['ratio']:.2f} ({high['server']}, {high['link']}, size {high['size']}); "
            f"the study: {study}"
        )
    return out


def findings(cells: pd.DataFrame, ratios: pd.DataFrame) -> list[str]:
    """The run's findings in words, first what a reader came for: tagless against gRPC per operation."""
    if ratios.empty:
        return ["no cell has both transports with a kept trial: no ratio"]
    lines = []
    for (op, server, rate), g in ratios.groupby(["op", "server", "rate_mbps"], sort=False):
        parts = [
            f"{op if op == SAY_HELLO else f'n={s}' if op != LARGE_DATA else f'K={s}'} {r:.2f}"
            + (f" [{lo:.2f}, {hi:.2f}]" if np.isfinite(hi) else "")
            for s, r, lo, hi in g[["size", "ratio", "ratio_low", "ratio_high"]].itertuples(index=False)
        ]
        lines.append(f"{op} on {server}, {link_name(rate)}: tagless/gRPC per call {'; '.join(parts)}")
    large = ratios[(ratios["op"] == LARGE_DATA) & ratios["wire_extra_per_member"].notna()]
    if not large.empty:
        top = large[large["size"] == large["size"].max()]
        lines.append(
            f"LargeData{int(top['size'].iloc[0])}: gRPC puts {top['wire_extra_per_member'].min():.2f} to "
            f"{top['wire_extra_per_member'].max():.2f} more bytes per member on the wire than tagless "
            "(each way; the tags of fields 1..K and protobuf's varints against 4 bytes a member)"
        )
    fast = cells[cells["below_link_bound"].fillna(False).astype(bool)]
    if not fast.empty:
        lines.append(
            f"{len(fast)} cell(s) took less per call than their bytes need at the link's rate (e.g. "
            f"{fast['op'].iloc[0]} {fast['size'].iloc[0]} {fast['method'].iloc[0]} at {fast['link'].iloc[0]}: "
            f"{fast['per_call_s'].iloc[0] * 1e3:.2f} ms against {fast['link_bound_s'].iloc[0] * 1e3:.2f} ms): "
            "their messages passed within the shaper's burst at line rate; flagged in rpc_cells.csv"
        )
    failed = int(cells["failed"].sum())
    if failed:
        lines.append(f"{failed} trial(s) failed and are left out (trials.csv says why)")
    return lines
