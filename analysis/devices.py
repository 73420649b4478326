"""The run's two devices, client and server, as the report and the terminal summary show them.

A run emulates up to two devices (issue 24): the client's (`Manifest.device`) and the server's
(`Manifest.server_device`), each a profile, a mode and the calibrations that checked it. Both are
shown the same way, by role, so that a reader sees which device each time belongs to; a role
without a device ran as its host, and the page and the summary say so rather than leave it out.
With clients of several devices, each client device (`Manifest.client_devices`, after client 1's) is
shown as client 1's is, with its own calibrations, and named by its profile's name where a role
alone would not tell them apart (`device_key`).
"""

from __future__ import annotations

import pandas as pd

from contracts.device import Mode
from contracts.hosts import Role
from contracts.run import Calibration, Device, Manifest

# what a role without a device profile ran as
AS_HOST = {
    "client": "no device profile: the client ran as the inventory's CPU profile describes it",
    "server": "the server ran as its host (no device profile)",
}
# the calibration columns shown, in order; the mode-specific ones follow when a calibration has them
CALIBRATION_COLUMNS = ["work", "op", "size", "target_s", "achieved_s", "error_pct", "flagged"]
CALIBRATION_EXTRA = ["quota", "period_s", "samples", "reason"]


def role_devices(manifest: Manifest | None) -> list[tuple[str, Device | None]]:
    """(role, device or None) for the client (each client device, client 1's first), then the server;
    none at all without a manifest."""
    if manifest is None:
        return []
    clients = [("client", d) for d in manifest.client_devices if d is not None]
    return [("client", manifest.device), *clients, ("server", manifest.server_device)]


def device_key(role: str, device: Device | None, manifest: Manifest | None) -> str:
    """What tells a role's device apart in names (figure files, page anchors): the role, and with
    clients of several devices a client device's name too (`client-paper-p4`)."""
    if role != Role.CLIENT or device is None or manifest is None or not manifest.client_devices:
        return role
    return f"{role}-{device.profile['name']}"


def calibration_table(cal: Calibration) -> pd.DataFrame:
    """One calibration's rows: target vs achieved per kind of work, flagged rows included."""
    rows = pd.DataFrame(cal.row_dicts())
    return rows[[*CALIBRATION_COLUMNS, *(c for c in CALIBRATION_EXTRA if c in rows)]]


def device_lines(manifest: Manifest | None) -> list[str]:
    """The summary's lines on both devices: name, mode and description, and how the last
    calibration of each host held (the flagged work named, since trials of it are marked
    emulation_flagged)."""
    lines = []
    for role, device in role_devices(manifest):
        if device is None:
            lines.append(f"{role}: {AS_HOST[role]}")
            continue
        profile = device.profile
        described = f": {profile['description']}" if profile.get("description") else ""
        lines.append(f"{role} device {profile['name']} ({device.mode}){described}")
        if not device.calibrations:
            lines.append(f"  not calibrated ({role} host)")
            continue
        last = last_calibrations(device)
        for host, (i, cal) in last.items():
            table = calibration_table(cal)
            bad = table[table["flagged"].astype(bool)]
            where = f" on {host or 'client'}" if len(last) > 1 else ""
            told = f"  calibration {i} ({cal.at}){where}: {len(bad)} of {len(table)} outside "
            told += cal.tolerance.describe()
            if len(bad):
                told += ": " + "; ".join(
                    f"{work_name(r)} {r.error_pct:+.3g}%" for r in bad.itertuples(index=False)
                )
            lines.append(told)
    return lines


def last_calibrations(device: Device) -> dict[str | None, tuple[int, Calibration]]:
    """The last calibration of each host that calibrated for the device (an SSH lab's client machines
    each do: `Calibration.client`), with its number among the device's (from 1), by host."""
    return {cal.client: (i, cal) for i, cal in enumerate(device.calibrations, 1)}


def steadiness_lines(manifest: Manifest | None) -> list[str]:
    """The summary's line per host whose last calibration found its speed unsteady
    (`contracts.steadiness`): why its trials' stages missed, which no emulation rule could help."""
    lines = []
    for role, device in role_devices(manifest):
        for host, (_, cal) in (last_calibrations(device) if device else {}).items():
            if cal.steadiness is not None and cal.steadiness.unsteady:
                lines.append(f"{host or role} host's {cal.steadiness.describe()}, around its calibration")
    return lines


def work_name(row) -> str:
    """A calibration row's work as a reader names it: `mul 500 json decode`, or the stack's own
    (`server_start`, for any op and size; its size column is empty, so the column reads as floats)."""
    if row.op == "any" or pd.isna(row.size):
        return row.work
    return f"{row.op} {int(row.size)} {row.work}"


def server_stage_note(manifest: Manifest | None) -> str:
    """What the stage plots' server stages are: the server device's times or the host's."""
    device = manifest.server_device if manifest else None
    if device is None:
        return (
            "Server stages (server decode, compute, encode) are the server host's measured times: the server "
            "ran as its host (no device profile)."
        )
    name = device.profile["name"]
    if device.mode == Mode.SCALED:
        how = (
            f"the server device {name}'s times (scaled mode): each stage's CPU time on the server host "
            "times the calibrated slowdown of its kind of work (trials.csv keeps what was measured in "
            "wall_server_* and cpu_server_*)"
        )
    else:
        how = f"the server device {name}'s times ({device.mode} mode), measured on the server host"
    return (
        f"Server stages (server decode, compute, encode) are {how}. Communication is the request's wall "
        "time minus the server's measured stages, so it does not depend on the server device."
    )
