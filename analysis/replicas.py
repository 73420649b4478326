"""Whether the testbeds of a sweep over several (replicas) measured alike, before their trials are pooled.

Per cell (op, size, rate, method) and measured quantity (the completion time and each stage), the
replicas' samples are compared with the Alexander-Govern test (k groups, unequal variances: Welch's
idea for more than two). The tests are many (cells x quantities), so their p-values are adjusted with
Holm's method and a replica effect is reported where the adjusted p is below 5%: a finding of the
run, not one test's chance at 5%. Groups with fewer than two successful trials, or a quantity
constant in every replica, are not tested. With clients of several devices the local baseline is
one cell per device (`local on paper-p4`), as each remote cell is of one device.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from analysis.load import row_devices
from contracts.stages import LOCAL, STAGES, on_device

QUANTITIES = ("t_total", *STAGES)
CELL = ["op", "size", "rate_mbps", "method"]
ALPHA = 0.05
COLUMNS = [*CELL, "quantity", "replicas", "n", "means", "p", "p_holm", "significant"]


def has_replicas(trials: pd.DataFrame) -> bool:
    return "replica" in trials and trials["replica"].dropna().nunique() > 1


def replica_effect(trials: pd.DataFrame) -> pd.DataFrame:
    """One row per tested (cell, quantity): the replicas, their sample counts and means, the test's p,
    Holm's adjusted p and whether the replicas differ significantly. Empty without replicas."""
    from scipy import stats

    if not has_replicas(trials):
        return pd.DataFrame(columns=COLUMNS)
    ok = trials[trials["ok"] & trials["replica"].notna()]
    baselines = [
        on_device(LOCAL, d) if m == LOCAL else m for m, d in zip(ok["method"], row_devices(ok), strict=True)
    ]
    ok = ok.assign(method=baselines)
    rows = []
    for cell, group in ok.groupby(CELL, dropna=False, sort=True):
        by_replica = dict(tuple(group.groupby("replica")))
        for quantity in QUANTITIES:
            samples = {
                int(r): g[quantity].dropna().to_numpy(float) for r, g in by_replica.items() if quantity in g
            }
            samples = {r: s for r, s in samples.items() if len(s) >= 2}
            if len(samples) < 2 or all(np.ptp(s) == 0 for s in samples.values()):
                continue
            p = float(stats.alexandergovern(*samples.values()).pvalue)
            rows.append(
                {
                    **dict(zip(CELL, cell, strict=True)),
                    "quantity": quantity,
                    "replicas": " ".join(map(str, samples)),
                    "n": " ".join(str(len(s)) for s in samples.values()),
                    "means": " ".join(f"{s.mean():.6g}" for s in samples.values()),
                    "p": p,
                }
            )
    table = pd.DataFrame(rows, columns=COLUMNS[:-2])
    table["p_holm"] = holm(table["p"].to_numpy(float))
    table["significant"] = table["p_holm"] < ALPHA
    return table


def holm(p: np.ndarray) -> np.ndarray:
    """Holm's step-down adjustment of `p` (the family-wise error rate held at the level asked)."""
    if not len(p):
        return p
    order = np.argsort(p)
    m = len(p)
    adjusted = np.maximum.accumulate((m - np.arange(m)) * p[order])
    out = np.empty(m)
    out[order] = np.minimum(adjusted, 1.0)
    return out


def replica_summary(table: pd.DataFrame, trials: pd.DataFrame) -> str | None:
    """One line for the terminal summary (None: the run had one testbed)."""
    if not has_replicas(trials):
        return None
    k = trials["replica"].dropna().nunique()
    found = table[table["significant"]]
    if found.empty:
        return f"replicas: {k}; no significant replica effect ({len(table)} tests, Holm-adjusted 5%)"
    what = ", ".join(
        f"{r.op} {r.size} {'local' if pd.isna(r.rate_mbps) else f'{r.rate_mbps:g} Mbit/s'} {r.method} "
        f"{r.quantity} (p={r.p_holm:.3g})"
        for r in found.itertuples()
    )
    return f"replicas: {k}; replica effect in {len(found)} of {len(table)} tests (Holm-adjusted 5%): {what}"
