"""The client as a fixed device: which profile a sweep emulates, and its calibration on this host.

In `scaled` mode the client runs at full speed and its worker scales each client stage by the
slowdown `client.scaled_calibration.calibrate` measured on the client host at the start of a session.
A resumed session on the same machine (`testbed.run_files.machine`: host, CPU, kernel, Python, NumPy)
uses the run's calibration again unless told to `recalibrate` (`reusable`): the client's slowdowns
follow the host's drift from the reference runs anyway, and the paper's grid takes the better part of
an hour to calibrate. A resumed run on another machine is calibrated for that machine. The calibration
is checked against the device's targets the way iperf3 checks the link; what misses the tolerance is
said before the sweep runs, recorded in the manifest, and marked on every trial it affects.
"""

from __future__ import annotations

import json
import statistics
from dataclasses import replace

from contracts.calibration import KERNEL, Calibration, CalibrationRow
from contracts.device import MODES, DeviceProfile, Grid, Mode
from contracts.errors import UserError
from contracts.hosts import Role
from contracts.message import decode
from contracts.profiles import GRANULARITY_PERIODS, MIN_CPU_QUOTA, CpuProfile, quota_period
from contracts.run import Device
from contracts.stages import COMPACT, GRPC, SERVER_START, Stack
from contracts.tolerance import DEFAULT, DeviceTolerance
from testbed.backends.lab import Lab
from testbed.devices import check_device_covers, load_device
from testbed.experiment import Experiment
from testbed.inventory import Inventory
from testbed.run_files import ManifestFile, machine

CORRECTIONS = 2  # throttle: checks again, with corrected quotas, of what missed the first check


def resolve_device(
    exp: Experiment, inv: Inventory, manifest: ManifestFile | None = None
) -> DeviceProfile | None:
    """The run's own profile when resuming; else the experiment's, else the inventory's (unless the
    experiment sets `client_cpu`, the old host-relative profile)."""
    if manifest is not None and manifest.manifest.device is not None:
        return DeviceProfile.from_dict(manifest.manifest.device.profile)
    if exp.rpc_study:  # its calls run at host speed (docs/rpc-study.md): no device to emulate
        return None
    ref = exp.client_device or (None if exp.client_cpu else inv.client_device)
    if not ref:
        return None
    device = load_device(ref)
    if not exp.datasets:  # a transfer sweep takes only its power figures (docs/transfers.md)
        check_device_covers(device, list(exp.ops), list(exp.methods), "the experiment")
    return device


def resolve_client_devices(exp: Experiment, manifest: ManifestFile | None = None) -> dict[str, DeviceProfile]:
    """Clients of several devices: each device after client 1's, by its profile's name, in the order
    of the clients; the run's own profile when the manifest has it (resuming)."""
    out: dict[str, DeviceProfile] = {}
    first = load_device(exp.client_device).name if exp.client_devices else None
    for ref in dict.fromkeys(exp.client_devices):  # each profile read once
        device = load_device(ref)
        if device.name in out or device.name == first:
            continue
        recorded = manifest.manifest.client_device(device.name) if manifest is not None else None
        if recorded is not None and recorded is not manifest.manifest.device:
            device = DeviceProfile.from_dict(recorded.profile)
        check_device_covers(device, list(exp.ops), list(exp.methods), "the experiment")
        out[device.name] = device
    return out


def resolve_server_device(
    exp: Experiment, inv: Inventory, manifest: ManifestFile | None = None
) -> DeviceProfile | None:
    """The server's profile: the run's own when resuming; else the experiment's, else the
    inventory's; None (the server runs as its host) when none names one."""
    if manifest is not None and manifest.manifest.server_device is not None:
        return DeviceProfile.from_dict(manifest.manifest.server_device.profile)
    if exp.rpc_study:  # its calls run at host speed (docs/rpc-study.md)
        return None
    ref = exp.server_device or inv.server_device
    if not ref:
        return None
    device = load_device(ref)
    check_device_covers(device, list(exp.ops), list(exp.methods), "the experiment")
    return device


def emulate_server_for(lab: Lab, device: DeviceProfile, exp: Experiment) -> Calibration:
    """Calibrate the server host for its device (scaled: the server's stages are scaled from the CPU
    time it measures around each, whatever mode the client is emulated in)."""
    grid = server_grid(
        lab,
        device,
        exp.ops,
        exp.sizes,
        exp.methods,
        exp.dtype,
        exp.seed,
        exp.server_stack == Stack.CGI,
        int_range=exp.int_range,
        codec_text=exp.codec_text,
    )
    return emulate(lab, device, "scaled", grid, tolerance=exp.device_tolerance)


def server_grid(
    lab: Lab,
    device: DeviceProfile,
    ops,
    sizes,
    codecs,
    dtype: str = "float64",
    seed: int = 1,
    cgi: bool = True,
    int_range: tuple[int, int] | None = None,
    codec_text: str = COMPACT,
) -> Grid:
    """The server's work for its calibration. On the cgi stack it is timed in fresh processes answering
    the trials' requests (`python -m server.cgi`, as lighttpd runs each request), with the process
    start-up as a kind of work of its own where the device's profile gives one."""
    argv = lab.host("server").python("server.cgi") if cgi else ()
    # gRPC's stages where its trials time them: in the Python gRPC server (`GrpcRequest`)
    target = lab.grpc_target if GRPC in codecs else ""
    return Grid.of(
        ops,
        sizes,
        codecs,
        dtype,
        seed,
        role="server",
        cgi_argv=argv,
        start_up=cgi and SERVER_START in device.stack,
        int_range=int_range,
        codec_text=codec_text,
        grpc_target=target,
    )


def client_cpu(device: DeviceProfile, mode: str) -> CpuProfile:
    """What the client host runs under: full speed when scaled; when throttled, a cgroup whose quota
    `emulate` sets from the calibration (a whole core until then)."""
    if mode not in MODES:
        raise UserError(f"unknown mode {mode!r}", f"use one of: {', '.join(MODES)}")
    return CpuProfile(cpu_quota=None if mode == Mode.SCALED else 1.0, blas_threads=device.blas_threads)


def emulate_for(lab: Lab, device: DeviceProfile, exp: Experiment, host: str = "client") -> Calibration:
    """Set the client host up as the device for everything the experiment's trials time; `host`: a
    further client host that calibrates (several clients are emulated scaled)."""
    grid = Grid.of(
        exp.ops,
        exp.sizes,
        exp.methods,
        exp.dtype,
        exp.seed,
        int_range=exp.int_range,
        codec_text=exp.codec_text,
    )
    if host != Role.CLIENT:
        if exp.mode != Mode.SCALED:
            raise ValueError(f"client host {host} calibrating in {exp.mode} mode")  # refused in check
        check_device_covers(device, list(grid.ops), list(grid.codecs), "the calibration")
        return _calibration(lab, host, device, grid, exp.device_tolerance, limited=False)
    return emulate(lab, device, exp.mode, grid, tolerance=exp.device_tolerance)


def emulate(
    lab: Lab,
    device: DeviceProfile,
    mode: str,
    grid: Grid,
    slow_host: float | None = None,
    tolerance: DeviceTolerance = DEFAULT,
) -> Calibration:
    """Calibrate the client host for the device; when throttling, also set and check the quota.

    Throttle: each kind of work runs under its own quota, this host's speed over the device's for
    that work (`work_quotas`: a host is not uniformly faster than a device, one quota for all was
    measured 17% off at mul 800 while right at 600); the trial worker puts each stage's quota in force
    before the stage. The check runs each kind of work once per sample inside the limit, under its
    quota, and compares its wall time with the target. A cgroup quota is enforced per period: work
    shorter than `GRANULARITY_PERIODS` of its periods can run at full speed within one quota, so it
    is flagged whatever the check measured, as is work the device does faster than this host.

    `slow_host` (scaled only) holds the whole calibration under an extra quota of that fraction of a
    core, as a slower host would run it: the device's times must not move, which is the point of
    scaling CPU time rather than wall time. The client's quota in force before is put back after.
    Each row is judged by `tolerance`, the experiment's (the host's answer records it).
    """
    check_device_covers(device, list(grid.ops), list(grid.codecs), "the calibration")
    if grid.role == Role.SERVER:
        if mode != Mode.SCALED or slow_host is not None:
            raise UserError(
                "the server is emulated in scaled mode only",
                "use --mode scaled and no --slow-host with --host server",
            )
        return _calibration(lab, "server", device, grid, tolerance, limited=False)
    if slow_host is not None:
        if mode != Mode.SCALED:
            raise UserError("a slower host is emulated for the scaled mode only", "use --mode scaled")
        before = lab.cpu_in_force().fraction or 1.0
        limit = lab.set_client_quota(slow_host)
        try:
            calibration = _calibration(lab, "client", device, grid, tolerance, limited=True)
        finally:
            lab.set_client_quota(before)
        return replace(calibration, slow_host=limit.fraction or slow_host)
    calibration = _calibration(lab, "client", device, grid, tolerance, limited=False)
    if mode == Mode.SCALED:
        return calibration
    quotas = work_quotas(calibration.rows)
    if quotas["base"] > 1:
        raise UserError(
            f"device {device.name} computes faster than this host ({1 / quotas['base']:.2f}x): a quota "
            "cannot speed the client up",
            "use mode: scaled, or a host at least as fast as the device",
        )
    needs = {r.key: r.host_cpu_s / r.target_s for r in calibration.rows}
    check = _check_wall(lab, device, grid, tolerance, quotas)
    rows = {r.key: _under_quota(r, quotas, needs) for r in check.rows}
    # closed loop: work runs less efficiently under a quota than at full speed (every period starts
    # with caches another process has used; measured +13% to +56% for paper-p4 at its quotas), so
    # what missed by more than half the tolerance gets its quota scaled by achieved over target and
    # is checked again, alone, up to CORRECTIONS times (measured: one correction left mul 600 at -12%)
    half = tolerance.halved()
    for _ in range(CORRECTIONS):
        missed = [k for k, r in rows.items() if not r.reason and half.missed(r.target_s, r.achieved_s)]
        if not missed:
            break
        for k in missed:
            quotas[k] = min(max(quotas[k] * rows[k].achieved_s / rows[k].target_s, MIN_CPU_QUOTA), 1.0)
        for row in _check_wall(lab, device, grid, tolerance, quotas, only=missed).rows:
            earlier = rows[row.key]
            first = earlier.error_pct if earlier.first_error_pct is None else earlier.first_error_pct
            rows[row.key] = _under_quota(replace(row, first_error_pct=first), quotas, needs)
    quota_us, period_us = quota_period(quotas["base"])
    return replace(
        check,
        rows=[rows[r.key] for r in check.rows],
        quota=quota_us / period_us,  # the request's, between the client's stages
        period_s=period_us / 1e6,
        quotas=quotas,
        host=calibration.rows,
    )


def work_quotas(host_rows: list[CalibrationRow]) -> dict[str, float]:
    """The fraction of a core each kind of work runs under, from this host's CPU seconds at full
    speed over the device's target (within what a quota can hold), keyed as `contracts.device.key`;
    `base`, the median of the kernels' fractions, covers what no key does (the request, start-up)."""
    quotas = {r.key: min(max(r.host_cpu_s / r.target_s, MIN_CPU_QUOTA), 1.0) for r in host_rows}
    kernels = [r.host_cpu_s / r.target_s for r in host_rows if r.kind == KERNEL and r.codec is None]
    return {**quotas, "base": max(statistics.median(kernels), MIN_CPU_QUOTA)}


def _check_wall(
    lab: Lab, device: DeviceProfile, grid: Grid, tolerance: DeviceTolerance, quotas: dict, **extra
) -> Calibration:
    """Throttle mode's check on the client host, each kind of work under its own quota. Its process
    starts at a whole core (importing numpy under the device's quota would take minutes) and puts each
    work's quota in force itself; a whole core again after it, for the trial worker's start."""
    lab.set_client_quota(1.0)
    try:
        return _calibration(
            lab, "client", device, grid, tolerance, limited=True, check="wall", quotas=quotas, **extra
        )
    finally:
        lab.set_client_quota(1.0)


def _under_quota(row: CalibrationRow, quotas: dict, needs: dict) -> CalibrationRow:
    """A throttle check's row with the quota its work ran under, flagged if a quota cannot hold it:
    work the device does faster than this host, and work shorter than `GRANULARITY_PERIODS` of its
    quota's periods (it can run at full speed within one quota, whatever the check measured)."""
    quota = quotas[row.key]
    period_s = row.period_s or quota_period(quota)[1] / 1e6
    if needs[row.key] > 1:
        reason = "the device is faster than this host at this work: a quota cannot speed it up"
    elif row.target_s < GRANULARITY_PERIODS * period_s:
        reason = f"shorter than {GRANULARITY_PERIODS} quota periods of {period_s * 1000:.0f} ms"
    else:
        return replace(row, quota=quota)
    return replace(row, quota=quota, flagged=True, reason=reason)


def _calibration(
    lab: Lab,
    role: str,
    device: DeviceProfile,
    grid: Grid,
    tolerance: DeviceTolerance,
    limited: bool,
    **extra,
) -> Calibration:
    """`python -m client.calibration` on the host of `role` (the client: inside the device's CPU
    limit if `limited`). The server host runs it too: the calibration times the server's own work
    (the grid's role), with the device-emulation code the client's scaled mode uses."""
    request = {
        "device": device.as_dict(),
        "grid": grid.as_dict(),
        "tolerance_pct": tolerance.pct,
        "tolerance_ms": tolerance.ms,
        **extra,
    }
    host = lab.host(role)
    out = host.run(
        host.python("client.calibration"), input=json.dumps(request), limited=limited, timeout=7200
    )
    return decode(Calibration, json.loads(out.stdout))


def record_calibration(
    manifest: ManifestFile,
    device: DeviceProfile,
    mode: str,
    calibration: Calibration,
    at: str,
    role: str = "client",
    replica: int | None = None,
    replicas: list[int] | None = None,
    client: str | None = None,
) -> None:
    """The calibration in the manifest, under its device's section (made at its first calibration):
    `device` or `server_device` by `role`; that of a further `client` host (its role) under its
    device's, client 1's or one among `client_devices`, with the host's role."""
    run = manifest.manifest
    if client is not None:
        section = run.client_device(device.name)
        if section is None:
            section = Device(profile=device.as_dict(), mode=mode)
            run.client_devices.append(section)
    else:
        name = "device" if role == Role.CLIENT else "server_device"
        if getattr(run, name) is None:
            setattr(run, name, Device(profile=device.as_dict(), mode=mode))
        section = getattr(run, name)
    section.calibrations.append(
        replace(
            calibration,
            at=at,
            replica=replica,
            replicas=replicas,
            client=client,
            machine=machine(),
            device=None,  # whose it is: the section says
            mode=None,
            role=None,
        )
    )
    manifest.save()


def reusable(
    manifest: ManifestFile,
    role: str,
    mode: str,
    replica: int | None,
    embedded: bool,
    device: str | None = None,
    client: str | None = None,
) -> Calibration | None:
    """The run's last calibration of `role`'s host on `replica`'s testbed (of further `client` host,
    for its `device` by name) when this session can use it again: scaled mode (throttle sets quotas,
    checked each session), an embedded testbed (its hosts are this machine, whose facts the
    calibration recorded) and the same facts now. None: calibrate."""
    if client is not None:
        section = manifest.manifest.client_device(device)
    else:
        section = getattr(manifest.manifest, "device" if role == Role.CLIENT else "server_device")
    if mode != Mode.SCALED or not embedded or section is None or section.mode != Mode.SCALED:
        return None
    mine = [c for c in section.calibrations if c.replica == replica and c.client == client]
    last = mine[-1] if mine else None
    if last is None or last.scale is None or last.machine != machine():
        return None
    return last


def reuse(manifest: ManifestFile, calibration: Calibration, at: str) -> Calibration:
    """`calibration` used again by the session started `at`, recorded there; returns it."""
    calibration.reused = [*(calibration.reused or []), at]
    manifest.save()
    return calibration


def missed_work(calibration: Calibration) -> list[str]:
    """What a calibration's missed targets are of, with their errors ("mul 500 raw encode -26.2%";
    the stack's start-up without op and size)."""
    out = []
    for row in calibration.rows:
        if row.flagged:
            work = " ".join(str(p) for p in (row.op, row.size, row.codec) if p not in (None, "any"))
            out.append(f"{work} {row.kind} {row.error_pct:+.1f}%".lstrip())
    return out


def format_calibration(calibration: Calibration) -> str:
    """A host's calibration as a table, for `testbed calibrate`."""
    quotas = calibration.quotas is not None  # throttle: each kind of work under its own quota
    counted = all(r.samples is not None for r in calibration.rows)  # sampled until precise
    lines = [
        f"device {calibration.device} ({calibration.mode}): target vs achieved on the "
        f"{calibration.role or 'client'} host, within {calibration.tolerance.describe()}",
        f"{'work':<20} {'op':<4} {'size':>5} {'target s':>10} {'achieved s':>11} {'error':>8}"
        + (f" {'quota':>8} {'period':>9}" if quotas else "")
        + (f" {'samples':>8}" if counted else ""),
    ]
    if calibration.slow_host is not None:
        lines.insert(
            1,
            f"calibration held under an extra quota of {calibration.slow_host:g} of one core "
            "(a slower host): the targets must be met as without it",
        )
    if calibration.quota is not None:
        lines.insert(
            1,
            f"client quota {calibration.quota:g} of one core, period {calibration.period_s * 1000:g} ms"
            + (" (between stages; each stage under its work's quota)" if quotas else ""),
        )
    steady = [f"the host's {calibration.steadiness.describe()}"] if calibration.steadiness else []
    return "\n".join(lines + [_row_line(r, quotas, counted) for r in calibration.rows] + steady)


def _row_line(r: CalibrationRow, quotas: bool, counted: bool) -> str:
    per_work = f" {r.quota:>8.4f} {r.period_s * 1000:>7.0f}ms" if quotas and r.quota and r.period_s else ""
    return (
        f"{r.work:<20} {r.op:<4} {r.size or '-':>5} {r.target_s:>10.4f} {r.achieved_s:>11.4f} "
        f"{r.error_pct:>+7.1f}%{per_work}"
        + (f" {r.samples:>8}" if counted else "")
        + ("  FLAGGED" if r.flagged else "")
        + (f" ({r.reason})" if r.reason else "")
        + (
            f" (first check {r.first_error_pct:+.1f}%, quota corrected)"
            if r.first_error_pct is not None
            else ""
        )
    )
