"""Calibrating a testbed's hosts for the devices they emulate, at the start of a session (or using
the run's calibration again). A missed target is announced; it marks no trial: a trial is marked
`emulation_flagged` by its own stages (`testbed.sweep.bookkeeping.own_stages_missed`), since the
trials' runs, not the calibration's, are what the decisions are made of."""

from __future__ import annotations

import logging

from contracts.device import DeviceProfile, Mode
from contracts.hosts import Backend, Role
from contracts.worker_api import WorkerEmulation
from testbed.backends.lab import Lab
from testbed.experiment import Experiment
from testbed.run_files import ManifestFile, now
from testbed.sweep import device_emulation
from testbed.sweep.progress import Progress

log = logging.getLogger("testbed.sweep")


def calibrate_devices(
    lab: Lab,
    exp: Experiment,
    manifest: ManifestFile,
    progress: Progress,
    device: DeviceProfile | None,
    server_device: DeviceProfile | None,
    replicas: list[int] | None = None,
    reuse_at: str | None = None,
) -> WorkerEmulation | None:
    """At the start of a session, each host that emulates a device is calibrated for it and the
    calibration recorded (with the `replicas` that use it, when testbeds on one machine share it).
    With `reuse_at` (the session's start), the run's calibration of a host is used again instead
    when it still holds (`device_emulation.reusable`), and the session recorded with it.
    Returns what the trial worker needs (the client's calibration, and the server's slowdowns as
    `server_scale` with its rows, the targets they follow, as `server_rows`; None: neither is a
    device)."""
    calibration = None
    for role, profile in (("client", device), ("server", server_device)):
        if profile is None:
            continue
        result = calibrate_host(lab, exp, manifest, progress, role, profile, replicas, reuse_at)
        if role == Role.CLIENT:
            calibration = result.with_server(calibration)
        else:
            calibration = (calibration or WorkerEmulation()).with_server(result)
    return calibration


def calibrate_host(
    lab: Lab,
    exp: Experiment,
    manifest: ManifestFile,
    progress: Progress,
    role: str,
    profile: DeviceProfile,
    replicas: list[int] | None = None,
    reuse_at: str | None = None,
    host: str | None = None,
) -> WorkerEmulation:
    """One host calibrated for its device (or its calibration used again): `role` "client" or
    "server", on the host of that role or on `host` (a further client host: of another device, or an
    SSH lab's further machine; recorded under its device with the host's role). Returns what the
    trial worker takes of the calibration (a `WorkerEmulation`)."""
    embedded = lab.inv.backend == Backend.NETNS
    mode = exp.mode if role == Role.CLIENT else Mode.SCALED
    client = host if host not in (None, role) else None  # a further client host's own calibration
    earlier = reuse_at and device_emulation.reusable(
        manifest, role, mode, lab.replica, embedded, profile.name, client
    )
    if earlier:
        progress.show(f"the {host or role} host's calibration of {earlier.at} holds on this machine")
        log.info("using the %s host's calibration of %s again (same machine)", host or role, earlier.at)
        result = device_emulation.reuse(manifest, earlier, reuse_at)
    else:
        progress.show(f"calibrating the {host or role} host for device {profile.name}")
        log.info("calibrating the %s host for device %s", host or role, profile.name)
        if role == Role.CLIENT:
            result = device_emulation.emulate_for(lab, profile, exp, host or role)
        else:
            result = device_emulation.emulate_server_for(lab, profile, exp)
        device_emulation.record_calibration(
            manifest, profile, mode, result, now(), role, lab.replica, replicas, client
        )
        if result.steadiness is not None and result.steadiness.unsteady:
            log.warning("the %s host's %s", host or role, result.steadiness.describe())
            progress.note(
                f"{host or role} host's {result.steadiness.describe()}: its stages' CPU times vary with "
                "it, so trials will be flagged; a quieter machine emulates the device closer"
            )
    progress.reset_clock()
    if missed := device_emulation.missed_work(result):
        what = ", ".join(missed)
        log.warning("%s device emulation misses its tolerance for: %s", host or role, what)
        progress.note(
            f"{host or role} device {profile.name}: calibration outside {result.tolerance.describe()} "
            f"for {what}; a trial is marked emulation_flagged where its own stage misses"
        )
    emulation = (
        WorkerEmulation.of_client(result) if role == Role.CLIENT else WorkerEmulation.of_server(result)
    )
    return emulation
