"""Each stage's target: the device's seconds for the work a trial's stage column holds.

One definition for the sweep, which marks a trial `emulation_flagged` when one of its own stages
missed its target (`missed_stages`), and for the analysis, which checks each kind of work's mean over
the trials (`analysis.trial_fidelity`) and each cell's emulation error (`analysis.emulation_error`):
the two must agree on which stage is which work on which device.

A server device's targets are those of the Python server's code, which its calibration runs; the
gRPC servers in other languages are scaled by the same slowdowns and are meant to differ from them,
so their server stages have no target.
"""

from __future__ import annotations

from collections.abc import Mapping

from contracts.device import DeviceProfile, operand_bytes, result_bytes
from contracts.stages import LOCAL
from contracts.tolerance import DeviceTolerance

# stage column -> (role, kind of work, the matrix data it handles)
STAGE_WORK = {
    "t_client_encode": ("client", "encode", "operands"),
    "t_client_decode": ("client", "decode", "result"),
    "t_server_decode": ("server", "decode", "operands"),
    "t_server_compute": ("server", "kernel", None),
    "t_server_encode": ("server", "encode", "result"),
    "t_server_start": ("server", "server_start", None),
}
LOCAL_WORK = {"t_total": ("client", "kernel", None)}  # a local trial's one stage: the device's kernel


def stage_work(method: str) -> dict[str, tuple[str, str, str | None]]:
    """The stages a trial of `method` has, each as (role, kind of work, data)."""
    return LOCAL_WORK if method == LOCAL else STAGE_WORK


def target_s(
    profile: DeviceProfile, kind: str, method: str, op: str, size: int, data: str | None, itemsize: int
) -> float | None:
    """The device's seconds for one kind of work of a trial (`DeviceProfile.work_s`); None where its
    profile does not say."""
    if not profile.covers(kind, op, method):
        return None
    nbytes = operand_bytes(op, size, itemsize) if data == "operands" else result_bytes(op, size, itemsize)
    return profile.work_s(kind, op, size, method, nbytes)


def stage_targets(
    op: str,
    size: int,
    method: str,
    itemsize: int,
    client: DeviceProfile | None,
    server: DeviceProfile | None,
) -> dict[str, float]:
    """Stage column -> the device's seconds for it, for the stages of a trial that have one: the
    client's with a client device, the server's with a server device (`server` None also where the
    trial's server is not the Python one, whose code the device's targets are of)."""
    devices = {"client": client, "server": server}
    out = {}
    for column, (role, kind, data) in stage_work(method).items():
        if devices[role] is None:
            continue
        target = target_s(devices[role], kind, method, op, size, data, itemsize)
        if target is not None:
            out[column] = target
    return out


def missed_stages(
    times: Mapping[str, float | None], targets: Mapping[str, float], tolerance: DeviceTolerance
) -> list[str]:
    """The stage columns whose time (the emulated one a trial recorded) is outside `tolerance` of its
    target; a stage the trial did not time (None: the cgi start-up of a persistent server) is not."""
    return [
        column
        for column, target in targets.items()
        if times.get(column) is not None and tolerance.missed(target, float(times[column]))
    ]
