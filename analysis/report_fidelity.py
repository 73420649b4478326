"""The report's fidelity verdict: one table saying how close the emulation came to what it emulated, each
device and the link, target against achieved and the worst case, with a link to the detail.

It judges nothing itself: it reads what the analysis and the sweep computed (each device's calibrations,
`analysis.trial_fidelity`'s table of the trials' stage times, the link validation in the manifest and
`analysis.link_counters`'s table) and picks, for each, the case furthest from its target.
"""

from __future__ import annotations

import math

import pandas as pd

from analysis.decisions import format_mbps
from analysis.devices import (
    AS_HOST,
    calibration_table,
    device_key,
    last_calibrations,
    role_devices,
    work_name,
)
from analysis.host_speed import RECORD, SLOW, STEADY
from analysis.report_html import e
from analysis.trial_fidelity import by_device, tolerance, worst
from contracts.hosts import Role
from contracts.run import LinkCheck, Manifest
from contracts.steadiness import UNSTEADY_SHARE, Steadiness

HEADERS = ("emulated", "checked by", "target", "worst case (target → achieved)", "outside tolerance")


def verdict_html(manifest: Manifest | None, tables: dict[str, pd.DataFrame]) -> str:
    """The verdict table (a highlighted row: some of its checks are outside their tolerance)."""
    if manifest is None:
        return "<p>No manifest.json in the run directory: no device or link check is known.</p>"
    rows = [*_device_rows(manifest, tables.get("trial_fidelity")), *_link_rows(manifest, tables)]
    rows += _host_speed_rows(tables.get("host_speed"))
    head = "".join(f'<th class="k">{h}</th>' for h in HEADERS)
    body = "".join(
        ('<tr class="bad">' if bad else "<tr>") + "".join(f'<td class="k">{c}</td>' for c in cells) + "</tr>"
        for *cells, bad in rows
    )
    return f'<table class="verdict"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def _link(text: str, anchor: str) -> str:
    return f'<a href="#{e(anchor)}">{e(text)}</a>'


def _device_rows(manifest: Manifest, fidelity: pd.DataFrame | None) -> list[tuple]:
    """Per device: its last calibration on each host, then the trials' stage times against it."""
    groups = {(role, name): rows for role, name, rows in by_device(fidelity)} if fidelity is not None else {}
    several = "device" in fidelity if fidelity is not None else False
    rows = []
    for role, device in role_devices(manifest):
        key = device_key(role, device, manifest)
        if device is None:
            rows.append((e(role), "", "", e(AS_HOST[role]), "not emulated", False))
            continue
        what = e(f"{role} device {device.profile['name']} ({device.mode})")
        if not device.calibrations:
            rows.append((what, _link("calibration", f"device-{key}"), "", "", "not calibrated", True))
        for host, (i, cal) in last_calibrations(device).items():
            table = calibration_table(cal)
            checked = _link(f"calibration {i}" + (f" on {host}" if host else ""), f"device-{key}")
            target = f"the profile's time for each kind of work, within {cal.tolerance.describe()}"
            worst_ = _calibration_worst(table)
            flagged = int(table["flagged"].astype(bool).sum())
            rows.append((what, checked, target, worst_, f"{flagged} of {len(table)}", flagged > 0))
            if (steady := cal.steadiness) is not None:
                rows.append(_steadiness_row(what, checked, steady))
        name = device.profile["name"] if role == Role.CLIENT and several else ""
        if (mine := groups.get((role, name))) is not None and len(mine):
            w = worst(mine)
            worst_ = e(f"{w['op']} {w['size']} {w['method']} {w['work']}: ") + _change(
                w["target_s"], w["mean_s"], w["error_pct"], "s"
            )
            flagged = int(mine["flagged"].astype(bool).sum())
            stated = tolerance(device, manifest.experiment.device_tolerance)
            target = f"the same, in the trials' stage times, within {stated.describe()}"
            checked = _link("the trials", "trial-fidelity")
            rows.append((what, checked, target, worst_, f"{flagged} of {len(mine)}", flagged > 0))
    return rows


def _steadiness_row(what: str, checked: str, steady: Steadiness) -> tuple:
    """The host's speed around a calibration (`contracts.steadiness`): its probes of one fixed work
    against the fastest of them; unsteady, no emulation rule holds its stages within tolerance."""
    target = (
        f"the host's speed: probes of one fixed work within {steady.slow_pct:g}% of the fastest "
        f"({steady.fastest_ms:.2g} ms), at most {UNSTEADY_SHARE:.0%} slower"
    )
    worst_ = e(f"median {steady.median_ratio:.2f}x, slowest {steady.worst_ratio:.2f}x the fastest")
    outside = f"{steady.slow_share:.0%} of {steady.probes} probes"
    return (what, checked, e(target), worst_, outside, steady.unsteady)


def _host_speed_rows(table: pd.DataFrame | None) -> list[tuple]:
    """The host's speed through the sweep (`analysis.host_speed`): its probes against the fastest, and
    the trials flagged on a steady host beside those on a slow one."""
    if table is None or table.empty:
        return []
    by = table.set_index("host")
    whole = by.loc[RECORD]
    target = (
        f"the host's speed through the trials: probes of one fixed work within "
        f"{whole['slow_above_pct']:g}% of the fastest ({whole['fastest_ms']:.2g} ms), at most {UNSTEADY_SHARE:.0%} slower"
    )
    flagged = "; ".join(
        f"{by.loc[name, 'flagged']:.0f} of {by.loc[name, 'trials']:.0f} trials flagged on a {name} host"
        for name in (STEADY, SLOW)
        if by.loc[name, "trials"]
    )
    worst_ = f"slowest {whole['slowest_ms'] / whole['fastest_ms']:.2f}x the fastest" + (
        f"; {flagged}" if flagged else ""
    )
    outside = f"{whole['slow_pct']:.0f}% of {whole['probes']:.0f} probes"
    bad = whole["slow_probes"] > UNSTEADY_SHARE * whole["probes"]
    checked = "the sweep's probes (analysis/host_speed.csv)"
    return [("host", e(checked), e(target), e(worst_), outside, bad)]


def _calibration_worst(table: pd.DataFrame) -> str:
    errors = pd.to_numeric(table["error_pct"], errors="coerce").abs()
    if errors.isna().all():
        return ""
    w = table.loc[errors.idxmax()]
    return e(f"{work_name(w)}: ") + _change(w["target_s"], w["achieved_s"], w["error_pct"], "s")


def _change(target: float, achieved: float, error_pct: float, unit: str) -> str:
    return e(f"{target:.3g} → {achieved:.3g} {unit} ({error_pct:+.3g}%)")


def _link_rows(manifest: Manifest, tables: dict[str, pd.DataFrame]) -> list[tuple]:
    """The link's rate, as the validation measured it before each rate's trials, and what the
    appliance's counters saw while they ran."""
    rows = []
    goodput = [c for c in manifest.validation if c.measure is None]  # netem's checks: `_netem_row`
    measured = [c for c in goodput if _number(c.error_pct) and _number(c.measured_mbps)]
    if measured:
        w = max(measured, key=lambda c: abs(c.error_pct))
        failed = sum(1 for c in goodput if c.ok is False)
        outside = f"{failed} of {len(measured)} checks"
        if given_up := _given_up(goodput):
            outside += f"; {given_up} rate(s) given up"
        if skipped := sum(1 for c in manifest.validation if c.skipped):
            outside += f"; {skipped} skipped"
        where = f"{format_mbps(w.rate_mbps)} Mbit/s {w.direction or ''}".strip()
        where += f" (testbed {w.replica})" if w.replica is not None else ""
        expected = w.expected_mbps if _number(w.expected_mbps) else w.rate_mbps
        tolerance = manifest.experiment.validation.tolerance_pct
        rows.append(
            (
                "link rate",
                _link("link validation (iperf3)", "validation"),
                f"each rate's expected throughput, ±{tolerance:g}%",
                e(f"{where}: ") + _change(expected, w.measured_mbps, w.error_pct, "Mbit/s"),
                outside,
                failed > 0,
            )
        )
    rows += _netem_row([c for c in manifest.validation if c.measure is not None and _number(c.measured)])
    counters = tables.get("link_counters")
    if counters is not None and not counters.empty:
        ratio = pd.to_numeric(counters["wire_per_payload"], errors="coerce")
        told = ""
        if ratio.notna().any():
            r = counters.loc[ratio.idxmax()]
            told = f"{r['wire_per_payload']:.3g} wire bytes per payload byte ({format_mbps(r['rate_mbps'])} "
            told += f"Mbit/s {r['direction']}); "
        told += (
            f"dropped: {int(counters['htb_drops'].sum())} by HTB, {int(counters['ovs_dropped'].sum())} by OVS"
        )
        checked = _link("appliance counters", "counters")
        rows.append(("link traffic", checked, "no target: what the link carried", e(told), "", False))
    if not rows:
        rows.append(("link", "", "", "no link validation or counters recorded in the manifest", "", False))
    return rows


def _netem_row(checks: list[LinkCheck]) -> list[tuple]:
    """The round trip and loss netem added (`testbed.link.delay_loss`): the check furthest from its
    target, and how many were outside what they are accepted in."""
    if not checks:
        return []
    w = max(checks, key=lambda c: abs(c.measured - c.expected) / max(c.high - c.low, 1e-9))
    unit = "% loss per direction" if w.measure == "loss" else f"ms {w.measure}"
    where = f"{format_mbps(w.rate_mbps)} Mbit/s, {w.delay_ms or 0:g} ms, {w.loss_pct or 0:g}%: "
    told = f"{w.expected:.3g} → {w.measured:.3g} {unit} (accepted {w.low:.3g} to {w.high:.3g})"
    failed = sum(1 for c in checks if c.ok is False)
    target = "twice the delay plus the link's own round trip; the loss within its 99% binomial interval"
    return [("link delay and loss", _link("link validation (ping, TCP)", "validation"), target,
             e(where + told), f"{failed} of {len(checks)} checks", failed > 0)]  # fmt: skip


def _number(value) -> bool:
    return isinstance(value, int | float) and not math.isnan(value)


def _given_up(checks: list[LinkCheck]) -> int:
    """Rates (per direction and testbed) whose last check failed: their trials did not run there."""
    last = {(c.rate_mbps, c.direction, c.replica): c for c in checks if c.ok is not None}
    return sum(1 for c in last.values() if c.ok is False)
