"""What the sweep does when the testbed breaks under it: check, repair, record, or stop.

A rate's link is shaped and validated before its trials (`shape_and_validate`), and every shaped trial
is checked (`testbed.sweep.trials.TrialCheck`: its switch watched while it runs; after it, its classes
against `shaping_guard`, and the switch's daemons in the same request). When a trial
or a validation fails, or the check finds the switch down, `heal` asks every host for its health (the
appliance's Open vSwitch daemons, bridge and ports; the server's HTTP and gRPC transports) and
repairs what it can with the code `up` and `shape` use: it restarts Open vSwitch and the bridge, shapes
and validates the rate again, restarts the offload server. Each repair is a `Repair` in the manifest
(when, what was found, what was done, the trials it affected). What cannot be repaired raises
`Unrepairable`, which stops the sweep in one line naming the part and the resume command.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from contracts.errors import UserError
from contracts.grid import LinkPoint
from contracts.run import LinkCheck, Repair
from contracts.worker_api import TrialResult
from testbed.backends.lab import Lab
from testbed.experiment import Experiment
from testbed.link.guard import ShapingGuard
from testbed.link.validate import validate_rate
from testbed.run_files import ManifestFile, add_repair, add_validation, now

log = logging.getLogger("testbed.sweep")


class Unrepairable(Exception):
    """A part of the testbed is broken and its repair failed: the sweep cannot go on (not a bug: the
    sweep turns it into a UserError with the resume command)."""

    def __init__(self, part: str, found: str, tried: str) -> None:
        super().__init__(f"{part} is broken ({found}) and {tried}")
        self.part = part


@dataclass
class Healing:
    """What `heal` did: the repairs (empty: every host was healthy) and, when it shaped and validated
    the rate again, why the rate cannot be used (None: validated, or not asked)."""

    repairs: list[Repair] = field(default_factory=list)
    link: str | None = None

    @property
    def parts(self) -> str:
        return ", ".join(r.part for r in self.repairs)


def point_label(lab: Lab, rate_mbps: float) -> str:
    """The link's point the lab is shaped for at this rate, in words (its delay and loss where the
    sweep sets them)."""
    return LinkPoint(rate_mbps, lab.delay_ms, lab.loss_pct).label()


def shape_and_validate(lab: Lab, exp: Experiment, rate_mbps: float, manifest: ManifestFile) -> str | None:
    """Shape for this rate (with the lab's delay and loss: `Lab.link_at`) and check it; a reason to
    skip the rate, or None when it can be trusted."""
    rate_bps = int(round(rate_mbps * 1e6))
    lab.set_rate(rate_bps)
    at = point_label(lab, rate_mbps)
    if not exp.validation.enabled:
        add_validation(
            manifest,
            LinkCheck(
                rate_mbps=rate_mbps, skipped="validation disabled", replica=lab.replica,
                delay_ms=lab.delay_ms, loss_pct=lab.loss_pct,
            ),
        )  # fmt: skip
        return None
    v = exp.validation
    for attempt in range(1 + v.retries):
        # a retry shapes again: a shaping lost while the last attempt ran (measured: a fault that
        # deleted both ports' qdiscs, the second during the repair) is back for this one
        checks = validate_rate(lab, rate_bps, v.duration, v.tolerance_pct, shape=attempt > 0)
        add_validation(
            manifest,
            *(LinkCheck(**c.as_dict(), attempt=attempt + 1, at=now(), replica=lab.replica) for c in checks),
        )
        if all(c.ok for c in checks):
            log.info("rate %s validated: %s", at, ", ".join(c.describe() for c in checks))
            return None
        log.warning(
            "rate %s failed validation (attempt %d): %s",
            at,
            attempt + 1,
            [c.as_dict() for c in checks if not c.ok],
        )
    bad = "; ".join(c.describe() for c in checks if not c.ok)
    return f"link validation failed at {at} ({bad}); rate skipped"


def shaping_guard(lab: Lab, rate_mbps: float, since_start: bool = False) -> ShapingGuard:
    """The check of every trial of a rate group against the shaping it asked for (from the classes
    now); `since_start`: of a cell's trials with several clients at once (see `ShapingGuard`)."""
    rate_bps = int(round(rate_mbps * 1e6))
    return ShapingGuard(rate_bps, lab.up_if, lab.down_if, lab.shaping_classes(), since_start)


def not_kept(result: TrialResult, why: str, own: str | None = None) -> TrialResult:
    """The trial's result, failed because of what it ran through (`why`: the shaping was wrong, the
    switch was down), with what the trial itself said (`own`, by default its error) after."""
    own = own or result.error
    said = f" (the trial itself: {own})" if own else ""
    return result.failed(f"not kept, {why}{said}")


def repair_shaping(
    lab: Lab, exp: Experiment, rate_mbps: float, manifest: ManifestFile, why: str, trial: int
) -> str | None:
    """Shape and validate the rate again after a trial found its shaping wrong; recorded in the
    manifest. Returns why the rate's remaining trials cannot run (None: repaired)."""
    log.warning(
        "rate %g Mbit/s: shaping wrong after trial %d (%s); shaping and validating again",
        rate_mbps,
        trial,
        why,
    )
    reason = shape_and_validate(lab, exp, rate_mbps, manifest)
    done = "shaped and validated the link again" + (f", which failed: {reason}" if reason else "")
    add_repair(
        manifest,
        Repair(
            at=now(),
            part="shaping",
            why=why,
            done=done,
            ok=reason is None,
            trials=[trial],
            replica=lab.replica,
        ),
    )
    return reason


def heal(
    lab: Lab,
    exp: Experiment,
    rate_mbps: float,
    manifest: ManifestFile,
    why: str,
    trials: list[int],
    grpc: bool,
    switch: list[str] | None = None,
    iperf3: bool = False,
) -> Healing:
    """After `why` (a failed trial or validation at `rate_mbps`, or `switch`: what the per-trial check
    found wrong with the switch), ask the appliance and the server for their health and repair what is
    broken, the switch first (the server is reached through it); with `iperf3` (a failed validation),
    also the iperf3 server. Raises `Unrepairable`."""
    healing = Healing()
    broken = switch or lab.switch_problems()
    if broken:
        found = "; ".join(broken)
        log.warning("after %s: the appliance's switch is broken (%s); restarting it", why, found)
        try:
            lab.restart_switch()
            left = lab.switch_problems()
        except UserError as exc:
            raise Unrepairable(
                "the appliance's Open vSwitch", found, f"restarting it failed: {exc}"
            ) from None
        if left:
            raise Unrepairable(
                "the appliance's Open vSwitch", found, f"after a restart still: {'; '.join(left)}"
            )
        healing.link = shape_and_validate(lab, exp, rate_mbps, manifest)
        done = (
            f"restarted Open vSwitch and bridge {lab.bridge}; shaped and validated {rate_mbps:g} Mbit/s again"
        )
        repair = Repair(
            at=now(),
            part="switch",
            why=f"{found} (found after: {why})",
            done=done + (f", which failed: {healing.link}" if healing.link else ""),
            ok=healing.link is None,
            trials=list(trials),
            replica=lab.replica,
        )
        add_repair(manifest, repair)
        healing.repairs.append(repair)
    if iperf3 and not lab.iperf3_alive():
        found = "the iperf3 server is not running"
        _restart(
            lab,
            healing,
            manifest,
            "iperf3",
            "the server's iperf3",
            found,
            why,
            [],
            lab.start_iperf3,
            "started it again",
        )
    if not lab.server_alive(grpc=grpc):
        found = "the offload server is not running" + (
            " or its gRPC transport does not answer" if grpc else ""
        )
        done = "restarted the offload server; it answers from the client"
        _restart(
            lab,
            healing,
            manifest,
            "server",
            "the offload server",
            found,
            why,
            trials,
            lab.restart_offload_server,
            done,
        )
    return healing


def _restart(
    lab: Lab,
    healing: Healing,
    manifest: ManifestFile,
    part: str,
    name: str,
    found: str,
    why: str,
    trials: list[int],
    start,
    done: str,
) -> None:
    """Start a service again with `start` (the code `up` uses) and record it; Unrepairable if it fails."""
    log.warning("after %s: %s; starting it again", why, found)
    try:
        start()
    except UserError as exc:
        raise Unrepairable(name, found, f"starting it again failed: {exc}") from None
    repair = Repair(
        at=now(),
        part=part,
        why=f"{found} (found after: {why})",
        done=done,
        ok=True,
        trials=list(trials),
        replica=lab.replica,
    )
    add_repair(manifest, repair)
    healing.repairs.append(repair)
