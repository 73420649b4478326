"""How close the trials came to the devices: each stage's mean over the run's successful trials against
the device profile's time for that work.

A calibration checks the emulation on the work it samples, in its own process; the trials time the
same work inside a trial (the client's long-lived worker between transfers, the server's request
handler, on the cgi stack a fresh process per request, with cold caches and first-touch memory).
Where those conditions make the host's CPU time differ from the calibration's, the scaled times miss
the device's although the calibration held (measured 2026-11-24, the smoke run: the local `mul 800`
24% above paper-p4's time, the server's encode of a JSON response 20-68% above paper-i3's). So the
analysis checks what was used: per role, kind of work, op, size and method, the mean used stage time
(`t_*`, the device's time in scaled mode, the quota-held wall time in throttle mode) with its 95% CI,
the profile's target, the error, and a flag where it is outside the calibration's tolerance (the
experiment's `contracts.tolerance.DeviceTolerance`, max(10%, 0.1 ms) by default, as the calibration
recorded it; a calibration from before the ms part judged by its percent alone, and so is its table).

A server device's targets are those of the Python server's code, which its calibration runs; the
gRPC servers in other languages (`grpc@cpp`, `grpc@go`) are scaled by the same slowdowns and are
meant to differ from them (README "gRPC servers in other languages"), so they have no row here.

With clients of several devices, each row's client stages are checked against its own device's
profile (`Manifest.client_device`), the table gains a column `device` (the client device whose rows
were checked; the server's rows are split by it too, as its cells are), and a device the manifest
does not hold (not yet calibrated when the run stopped) has no client rows.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from analysis.load import row_devices, trial_devices
from analysis.stats import ci95
from contracts.device import IMAGE_FORMAT, IMAGE_WORK, DeviceProfile
from contracts.hosts import Role
from contracts.run import Device, Manifest
from contracts.stage_targets import stage_work, target_s
from contracts.stages import PYTHON, label_server, method_codec
from contracts.tolerance import DEFAULT, DeviceTolerance

COLUMNS = ["role", "work", "op", "size", "method", "n", "target_s", "mean_s", "ci95", "error_pct", "flagged"]


def tolerance(device: Device, default: DeviceTolerance = DEFAULT) -> DeviceTolerance:
    """What a device's stages are judged by: its last calibration's tolerance as that recorded it (the
    trials then agree with the calibration's flags), else `default` (the experiment's)."""
    return device.calibrations[-1].tolerance if device.calibrations else default


def trial_fidelity(trials: pd.DataFrame, manifest: Manifest | None) -> pd.DataFrame:
    """One row per role's kind of work in the run (with a device), its target and the trials' mean."""
    several = bool(trial_devices(trials))
    columns = [*COLUMNS[:1], "device", *COLUMNS[1:]] if several else COLUMNS
    if manifest is None:
        return pd.DataFrame(columns=columns)
    itemsize = np.dtype(manifest.experiment.dtype).itemsize
    stated = manifest.experiment.device_tolerance
    good = trials[trials["ok"].astype(bool)]
    good = good.assign(device=row_devices(good))
    rows, profiles = [], {}
    for (op, size, method, name), group in good.groupby(["op", "size", "method", "device"], sort=True):
        devices = {"client": manifest.client_device(name or None), "server": manifest.server_device}
        stages = stage_work(method)
        for column, (role, kind, data) in stages.items():
            device = devices[role]
            if (
                device is None
                or column not in group
                or (role == Role.SERVER and label_server(method) != PYTHON)
            ):
                continue
            values = group[column].dropna().astype(float)
            if id(device) not in profiles:
                profiles[id(device)] = DeviceProfile.from_dict(device.profile)
            target = target_s(profiles[id(device)], kind, method, op, int(size), data, itemsize)
            if values.empty or target is None:
                continue
            mean, n = float(values.mean()), len(values)
            half = float(ci95(values.std(), n)) if n > 1 else float("nan")
            error = (mean - target) / target * 100
            # an image op's encode and decode are its image format's, whatever message carries it
            codec = IMAGE_FORMAT if op in IMAGE_WORK else method_codec(method)
            work = kind if kind in ("kernel", "server_start") else f"{codec} {kind}"
            rows.append(
                [
                    role,
                    *([name] if several else []),
                    work,
                    op,
                    int(size),
                    method,
                    n,
                    target,
                    mean,
                    half,
                    error,
                    tolerance(device, stated).missed(target, mean),
                ]
            )
    return pd.DataFrame(rows, columns=columns)


def by_device(table: pd.DataFrame) -> list[tuple[str, str, pd.DataFrame]]:
    """(role, client device name or "", its rows): per role, and per client device with clients of
    several, in the table's order."""
    names = table["device"].where(table["role"] == Role.CLIENT, "") if "device" in table else ""
    groups = table.assign(_name=names).groupby(["role", "_name"], sort=False)
    return [(role, name, group.drop(columns="_name")) for (role, name), group in groups]


def worst(rows: pd.DataFrame) -> pd.Series:
    """The row furthest from its target (flagged, if any row is)."""
    return rows.loc[rows["error_pct"].abs().idxmax()]


def fidelity_lines(table: pd.DataFrame) -> list[str]:
    """The summary's line per role (per client device, with clients of several): how many kinds of work
    the trials kept within tolerance, the worst."""
    lines = []
    for role, name, group in by_device(table):
        bad = group[group["flagged"]]
        who = f"{role} device {name}" if name else f"{role} device"
        line = f"{who} in the trials: {len(bad)} of {len(group)} kinds of work outside tolerance"
        if len(bad):
            worst_ = worst(group)
            line += (
                f" (worst: {worst_['op']} {worst_['size']} {worst_['method']} {worst_['work']} "
                f"{worst_['error_pct']:+.0f}%; analysis/trial_fidelity.csv)"
            )
        lines.append(line)
    return lines
