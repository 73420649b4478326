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

With clients of several devices, each row's energy is its own device's figures times its times, and
each cell is decided against its own device's local baseline; a device whose profile has no power
figures has no energy view (its cells' energy columns are empty).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from analysis.cells import BASELINE, cell_devices
from analysis.load import row_devices, trial_devices
from analysis.stats import ci95, welch
from contracts.errors import UserError
from contracts.power import Power, power_of_profile
from contracts.run import MANIFEST_FILE, Manifest
from contracts.stages import LOCAL

KEYS = ["op", "size", "rate_mbps", "method"]


def run_power(manifest: Manifest | None, manifest_path: Path | str = MANIFEST_FILE) -> Power | None:
    """The power figures of the run's device profile, if it has them."""
    if manifest is None or manifest.device is None:
        return None
    return power_of_profile(manifest.device.profile, manifest_path)


def run_powers(
    manifest: Manifest | None, trials: pd.DataFrame, manifest_path: Path | str = MANIFEST_FILE
) -> dict[str, Power]:
    """The power figures of each client device the rows ran as, by its name (`Manifest.client_device`),
    those without figures left out; for a run of one device, {"": its figures} (or nothing)."""
    devices = trial_devices(trials)
    if not devices:
        power = run_power(manifest, manifest_path)
        return {"": power} if power is not None else {}
    out = {}
    for name in devices:
        device = manifest.client_device(name) if manifest is not None else None
        if device is not None and (power := power_of_profile(device.profile, manifest_path)) is not None:
            out[name] = power
    return out


def given_powers(power: Power, trials: pd.DataFrame) -> dict[str, Power]:
    """A power file's figures (`--power`) for a run: one device's, so refused for a run whose clients
    were of several (each of them would be given another's watts)."""
    if len(devices := trial_devices(trials)) > 1:
        raise UserError(
            f"--power gives one device's power figures; the run's clients were of {len(devices)} devices "
            f"({', '.join(devices)})",
            "leave out --power: each device's own figures are read from its profile in the manifest",
        )
    return {"": power}


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


def device_energy(trials: pd.DataFrame, powers: dict[str, Power]) -> pd.Series:
    """Joules per trial, each row by its own device's figures (`run_powers`; "": the run's one device);
    NaN for failed trials and for rows of a device without figures."""
    devices = row_devices(trials)
    energy = pd.Series(np.nan, index=trials.index)
    for name, power in powers.items():
        mine = (devices == name).to_numpy()
        energy[mine] = trial_energy(trials[mine], power).to_numpy()
    return energy


def energy_cells(cells: pd.DataFrame, trials: pd.DataFrame, power: Power | dict[str, Power]) -> pd.DataFrame:
    """`cells` with the energy columns: means, the remote mean's CI, the decision and the penalty.
    `power`: the run's one device's figures, or each device's by name (`run_powers`)."""
    energy = trial_energy(trials, power) if isinstance(power, Power) else device_energy(trials, power)
    trials = trials.assign(energy_j=energy, device=row_devices(trials))
    remote = trials[trials["method"] != LOCAL].groupby(KEYS)["energy_j"].agg(["count", "mean", "std"])
    local = trials[trials["method"] == LOCAL].groupby(BASELINE)["energy_j"].agg(["count", "mean", "std"])
    index = pd.MultiIndex.from_frame(cells[KEYS])
    r = remote.reindex(index)
    devices = cells["device"] if "device" in cells else cell_devices(cells["method"])
    lo = local.reindex(pd.MultiIndex.from_arrays([cells["op"], cells["size"], devices], names=BASELINE))
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
    """The energy view in the columns the decision vectors and cumulative penalties read. The
    emulation's error (`emulation_uncertain`) is judged on the time difference, so the energy's
    decisions carry no such mark."""
    return cells.drop(columns="emulation_uncertain", errors="ignore").assign(
        offload=cells["energy_offload"],
        significant=cells["energy_significant"],
        penalty=cells["energy_penalty_j"],
    )


def disagreements(cells: pd.DataFrame) -> pd.DataFrame:
    """Cells where saving time and saving energy call for different decisions."""
    known = cells["offload"].notna() & cells["energy_offload"].notna()
    differ = known & (cells["offload"].astype("float") != cells["energy_offload"].astype("float"))
    return cells.loc[differ, [*KEYS, "offload", "energy_offload", "penalty", "energy_penalty_j"]]
