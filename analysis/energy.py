"""The client's energy per trial, from the stage times the testbed measures: a model, not a meter.

There is no power meter on an emulated device, so energy is computed from the device's power figures
(`contracts.power.Power`: watts, each with its source) and the stage times of every trial:

- local:  cpu_active_w x t_total
- remote: cpu_active_w x (t_client_encode + t_client_decode)
          + radio_tx_w x t_comm x bytes_up / (bytes_up + bytes_down)
          + radio_rx_w x t_comm x bytes_down / (bytes_up + bytes_down)
          + cpu_idle_w x (t_server_queue + t_server_decode + t_server_compute + t_server_encode)

The communication time is split between sending and receiving by the bytes each way; while the
server works, the device waits idle. Energy decisions and penalties then follow the time-based ones
of the paper (section II-E) with joules in place of seconds.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from analysis.stats import ci95, welch
from contracts.power import Power, power_of_profile
from contracts.run import MANIFEST_FILE, Manifest
from contracts.trials import LOCAL

KEYS = ["op", "size", "rate_mbps", "method"]


def run_power(manifest: Manifest | None, manifest_path: Path | str = MANIFEST_FILE) -> Power | None:
    """The power figures of the run's device profile, if it has them."""
    if manifest is None or manifest.device is None:
        return None
    return power_of_profile(manifest.device.profile, manifest_path)


def trial_energy(trials: pd.DataFrame, power: Power) -> pd.Series:
    """Joules per trial (NaN for failed trials)."""
    local = trials["method"] == LOCAL
    up = trials.get("bytes_up", pd.Series(np.nan, index=trials.index)).astype(float)
    down = trials.get("bytes_down", pd.Series(np.nan, index=trials.index)).astype(float)
    total = up + down
    # the device waits idle while its request queues at the server, as while the server works
    queued = trials.get("t_server_queue", pd.Series(np.nan, index=trials.index)).astype(float).fillna(0.0)
    share_up = np.where(total > 0, up / total.where(total > 0, 1), 0.5)
    remote = (
        power.cpu_active_w * (trials["t_client_encode"] + trials["t_client_decode"])
        + power.radio_tx_w * trials["t_comm"] * share_up
        + power.radio_rx_w * trials["t_comm"] * (1 - share_up)
        + power.cpu_idle_w
        * (trials["t_server_decode"] + trials["t_server_compute"] + trials["t_server_encode"] + queued)
    )
    energy = pd.Series(np.where(local, power.cpu_active_w * trials["t_total"], remote), index=trials.index)
    return energy.where(trials["ok"])


def energy_cells(cells: pd.DataFrame, trials: pd.DataFrame, power: Power) -> pd.DataFrame:
    """`cells` with the energy columns: means, the remote mean's CI, the decision and the penalty."""
    trials = trials.assign(energy_j=trial_energy(trials, power))
    remote = trials[trials["method"] != LOCAL].groupby(KEYS)["energy_j"].agg(["count", "mean", "std"])
    local = (
        trials[trials["method"] == LOCAL].groupby(["op", "size"])["energy_j"].agg(["count", "mean", "std"])
    )
    index = pd.MultiIndex.from_frame(cells[KEYS])
    r = remote.reindex(index)
    lo = local.reindex(pd.MultiIndex.from_frame(cells[["op", "size"]]))
    out = cells.copy()
    out["energy_remote_j"] = r["mean"].to_numpy()
    out["energy_ci95"] = ci95(r["std"].to_numpy(), r["count"].fillna(0).to_numpy())
    out["energy_local_j"] = lo["mean"].to_numpy()
    known = r["count"].fillna(0).to_numpy() > 0
    known &= lo["count"].fillna(0).to_numpy() > 0
    out["energy_offload"] = pd.array(
        np.where(known, out["energy_remote_j"] < out["energy_local_j"], pd.NA), dtype="Int64"
    )
    diff, half, _ = welch(
        out["energy_remote_j"], r["std"].to_numpy(), r["count"].fillna(0).to_numpy(),
        out["energy_local_j"], lo["std"].to_numpy(), lo["count"].fillna(0).to_numpy(),
    )  # fmt: skip
    out["energy_significant"] = pd.array(
        np.where(np.isnan(half), pd.NA, np.abs(diff) > half), dtype="boolean"
    )
    out["energy_penalty_j"] = out["energy_remote_j"] - out["energy_local_j"]
    return out


def as_decision_cells(cells: pd.DataFrame) -> pd.DataFrame:
    """The energy view in the columns the decision vectors and cumulative penalties read."""
    return cells.assign(
        offload=cells["energy_offload"],
        significant=cells["energy_significant"],
        penalty=cells["energy_penalty_j"],
    )


def disagreements(cells: pd.DataFrame) -> pd.DataFrame:
    """Cells where saving time and saving energy call for different decisions."""
    known = cells["offload"].notna() & cells["energy_offload"].notna()
    differ = known & (cells["offload"].astype("float") != cells["energy_offload"].astype("float"))
    return cells.loc[differ, [*KEYS, "offload", "energy_offload", "penalty", "energy_penalty_j"]]
