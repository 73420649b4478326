"""A transfer sweep's analysis (`datasets:`, op fetch; docs/transfers.md): per dataset, rate (and
RTT, once the rows carry one) and transfer setting, the throughput and the client's energy per 100 MB,
in the energy study's form; written as `transfers.csv`, one figure per link and `report.html`.

Throughput is a fetch's bytes over its seconds (Mbit/s, 10^6 bits). Energy is the model of
`analysis.energy` (`trial_energy`): a fetch is all communication, so its joules are the device's radio
power (receive for the bytes that came, send for the requests' bytes) times its seconds, and per
100 MB they are that over its bytes. Energy per 100 MB therefore follows 1/throughput by construction:
the model has no tail energy and no power that grows with the connections open, the two things that
made the study's energy turn up where its throughput still rose.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from analysis.energy import trial_energy
from analysis.stats import ci95
from contracts.datasets import FETCH
from contracts.power import Power

SETTINGS = ["concurrency", "parallelism", "io_kb"]
# what the rows may say of the link beyond its rate (delays and losses: issue 48 item 3), when present
LINK = ["rate_mbps", "delay_ms", "loss_pct"]
FILE = "transfers.csv"
HUNDRED_MB = 100e6
_NO_STAGES = dict.fromkeys(
    ["t_client_encode", "t_client_decode", "t_server_decode", "t_server_compute", "t_server_encode"], 0.0
)


def is_transfer_run(trials: pd.DataFrame) -> bool:
    return len(trials) > 0 and bool((trials["op"] == FETCH).all())


def link_keys(trials: pd.DataFrame) -> list[str]:
    """The link's columns the rows vary or state (rate always; delay and loss where they are filled)."""
    return [k for k in LINK if k in trials and (k == "rate_mbps" or trials[k].notna().any())]


def transfer_rows(trials: pd.DataFrame, power: Power | None) -> pd.DataFrame:
    """Each fetch with its throughput and, with power figures, its joules and joules per 100 MB."""
    rows = trials[trials["op"] == FETCH].copy()
    for key in SETTINGS:
        rows[key] = rows[key].fillna(1 if key != "io_kb" else 64).astype(int)  # not varied: 1, 64 KiB
    ok = rows["ok"].astype(bool) & (rows["t_total"] > 0)
    seconds = rows["t_total"].where(ok)
    rows["throughput_mbps"] = rows["bytes_down"].astype(float) * 8 / seconds / 1e6
    if power is not None:
        rows["energy_j"] = trial_energy(rows.assign(t_comm=seconds, **_NO_STAGES), power).where(ok)
        rows["energy_per_100mb_j"] = rows["energy_j"] * HUNDRED_MB / rows["bytes_down"].astype(float)
    return rows


def transfer_table(trials: pd.DataFrame, power: Power | None) -> pd.DataFrame:
    """Per dataset, link and setting: fetches, failures, mean seconds, mean throughput and its 95% CI,
    and with power figures the mean energy per 100 MB and its 95% CI."""
    rows = transfer_rows(trials, power)
    keys = ["dataset", *link_keys(trials), *SETTINGS]
    out = []
    for key, g in rows.groupby(keys, sort=True, dropna=False):
        good = g[g["throughput_mbps"].notna()]
        n = len(good)
        row = dict(zip(keys, key, strict=True))
        row.update(
            n=n,
            failed=len(g) - n,
            mbytes=good["bytes_down"].mean() / 1e6 if n else np.nan,
            seconds=good["t_total"].mean() if n else np.nan,
            throughput_mbps=good["throughput_mbps"].mean() if n else np.nan,
            throughput_ci95=ci95(good["throughput_mbps"].std(), n) if n > 1 else np.nan,
        )
        if power is not None:
            energy = good["energy_per_100mb_j"]
            row["energy_per_100mb_j"] = energy.mean() if n else np.nan
            row["energy_ci95"] = ci95(energy.std(), n) if n > 1 else np.nan
        out.append(row)
    return pd.DataFrame(out)


def baseline(table: pd.DataFrame) -> dict[str, int]:
    """The settings held while another varies: the least concurrency and parallelism, the largest I/O
    size (the study's individual-parameter figures: one stream, one file at a time)."""
    return {
        "concurrency": int(table["concurrency"].min()),
        "parallelism": int(table["parallelism"].min()),
        "io_kb": int(table["io_kb"].max()),
    }


def effect(table: pd.DataFrame, setting: str) -> pd.DataFrame:
    """`setting` varied, the others at the baseline: the rows of one curve per dataset and link."""
    held = {k: v for k, v in baseline(table).items() if k != setting}
    mask = np.logical_and.reduce([table[k] == v for k, v in held.items()])
    return table[mask].sort_values(["dataset", setting])


def effect_lines(table: pd.DataFrame) -> list[str]:
    """Per dataset and link, what each setting did from its least to its largest value."""
    lines = []
    links = [k for k in LINK if k in table and k != "rate_mbps"]
    names = {"concurrency": "concurrency", "parallelism": "parallelism", "io_kb": "I/O size (KiB)"}
    for setting, name in names.items():
        if table[setting].nunique() < 2:
            continue
        for key, g in effect(table, setting).groupby(["dataset", "rate_mbps", *links], dropna=False):
            g = g[g["throughput_mbps"].notna()]
            if len(g) < 2:
                continue
            first, last = g.iloc[0], g.iloc[-1]
            link = f"{key[1]:g} Mbit/s" + "".join(f", {k} {v:g}" for k, v in zip(links, key[2:], strict=True))
            text = (
                f"{key[0]} @ {link}: {name} {first[setting]} -> {last[setting]}: "
                f"{first['throughput_mbps']:.1f} -> {last['throughput_mbps']:.1f} Mbit/s "
                f"({last['throughput_mbps'] / first['throughput_mbps']:.2f}x)"
            )
            if "energy_per_100mb_j" in g:
                change = last["energy_per_100mb_j"] / first["energy_per_100mb_j"] - 1
                text += f", energy per 100 MB {change:+.0%}"
            best = g.loc[g["throughput_mbps"].idxmax()]
            peak = best["throughput_mbps"] > 1.02 * max(last["throughput_mbps"], first["throughput_mbps"])
            if best[setting] not in (first[setting], last[setting]) and peak:
                text += (
                    f"; best at {best[setting]}: {best['throughput_mbps']:.1f} Mbit/s "
                    f"({best['throughput_mbps'] / first['throughput_mbps']:.2f}x)"
                )
            lines.append(text)
    return lines
