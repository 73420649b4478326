"""Checking the shaped link with iperf3 before any measurement trusts it.

For each rate: shape, run iperf3 in both directions (client host to server host and back), and
compare the measured TCP goodput with what the configured rate can carry. Where the link has a delay
or a loss (netem), the rate is measured with the rate shaped alone, then netem is added and the round
trip and the loss are measured against their targets (`testbed.link.delay_loss`). A sweep calls
`validate_rate` for each of its link's points; `testbed validate` calls `validate` for lists.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, replace

from contracts.command import Result
from contracts.errors import UserError
from contracts.units import expected_goodput
from testbed.backends.lab import Lab
from testbed.link.delay_loss import NetemCheck, measure_netem, needs_netem, without_netem


@dataclass(frozen=True)
class Check:
    rate_mbps: float
    direction: str  # up: client->server, down: server->client
    expected_mbps: float
    measured_mbps: float | None
    error_pct: float | None
    ok: bool
    retransmits: int | None = None
    error: str | None = None
    delay_ms: float | None = None  # the link's netem (measured without it: `validate_rate`)
    loss_pct: float | None = None

    def as_dict(self) -> dict:
        return asdict(self)

    def describe(self) -> str:
        """What was measured, in words: the goodput against its target, or why iperf3 measured nothing."""
        if self.measured_mbps is None:
            return f"{self.direction}: iperf3 failed: {self.error or 'no result'}"
        return f"{self.direction} measured {self.measured_mbps} vs {self.expected_mbps} Mbit/s"


def parse_iperf3(data: dict) -> tuple[float, int | None]:
    """Receiver-side goodput (bits/s) and sender retransmits from iperf3's JSON result."""
    if "error" in data:
        raise ValueError(data["error"])
    end = data["end"]
    received = end["sum_received"]["bits_per_second"]
    retransmits = end.get("sum_sent", {}).get("retransmits")
    return float(received), retransmits


def iperf3_result(result: Result) -> tuple[float, int | None] | str:
    """Goodput and retransmits from one run of `client.iperf`, or why there are none: iperf3's own
    error, else the tail of what the command said, else its exit status (never just "no value")."""
    try:
        return parse_iperf3(json.loads(result.stdout or "{}"))
    except json.JSONDecodeError:
        said = result.stderr.strip() or result.stdout.strip()
    except ValueError as exc:  # the `error` iperf3 reported
        said = str(exc) or result.stderr.strip()
    except (KeyError, TypeError, AttributeError):  # JSON, but not iperf3's result
        said = result.stderr.strip()
    return said[-200:] or f"no result (exit status {result.returncode})"


def validate_rate(
    lab: Lab, rate_bps: int, duration: int = 3, tolerance_pct: float = 5.0, shape: bool = True
) -> list[Check | NetemCheck]:
    """The rate's goodput both ways, then (where the lab's link at this rate has a delay or a loss:
    `Lab.link_at`) its round trip and loss; the link is left shaped as `set_rate` shapes it."""
    link = lab.link_at(rate_bps)
    netem = needs_netem(link)
    if netem:
        lab.shape(without_netem(link))  # the rate alone: TCP's goodput through a lossy link is not it
    elif shape:
        lab.set_rate(rate_bps)
    checks: list[Check | NetemCheck] = list(_goodput_checks(lab, rate_bps, duration, tolerance_pct))
    if link.delay_ms is not None or link.loss_pct is not None:  # which point of the link they are of
        checks = [replace(c, delay_ms=link.delay_ms, loss_pct=link.loss_pct) for c in checks]
    if link.delay_ms or link.loss_pct:  # a serialized link alone has no round trip or loss of its own
        checks += measure_netem(lab, link, rate_bps / 1e6, tolerance_pct)
    return checks


def _goodput_checks(lab: Lab, rate_bps: int, duration: int, tolerance_pct: float) -> list[Check]:
    expected = expected_goodput(rate_bps, lab.inv.link.mtu)
    client = lab.host("client")
    server_addr = str(lab.inv.host("server").address.ip)
    checks = []
    for direction, reverse in (("up", False), ("down", True)):
        argv = client.python(
            "client.iperf",
            "--server",
            server_addr,
            "--port",
            str(lab.inv.iperf3_port),
            "--duration",
            str(duration),
        )
        if reverse:
            argv.append("--reverse")
        measured = retrans = err = None
        for attempt in range(3):  # the iperf3 server takes one test at a time and may still be busy
            # the link is measured, not the device: iperf3 runs outside the client's CPU limit
            result = client.run(argv, check=False, limited=False, timeout=duration + 60)
            outcome = iperf3_result(result)
            if not isinstance(outcome, str):
                (measured, retrans), err = outcome, None
                break
            err = outcome
            time.sleep(1 + attempt)
        if measured is None:
            checks.append(Check(rate_bps / 1e6, direction, expected / 1e6, None, None, False, None, err))
            continue
        error_pct = (measured - expected) / expected * 100
        checks.append(
            Check(
                rate_bps / 1e6,
                direction,
                round(expected / 1e6, 3),
                round(measured / 1e6, 3),
                round(error_pct, 2),
                abs(error_pct) <= tolerance_pct,
                retrans,
            )
        )
    return checks


def validate(
    lab: Lab,
    rates_bps: list[int],
    duration: int = 3,
    tolerance_pct: float = 5.0,
    delays_ms: tuple[float, ...] = (),
    losses_pct: tuple[float, ...] = (),
) -> list[Check | NetemCheck]:
    """Each rate, with each delay and loss given (none given: the inventory's)."""
    lab.require_up()
    before = lab.link_in_force()
    checks: list[Check | NetemCheck] = []
    try:
        for rate in rates_bps:
            for delay in delays_ms or (None,):
                for loss in losses_pct or (None,):
                    lab.delay_ms, lab.loss_pct = delay, loss
                    checks += validate_rate(lab, rate, duration, tolerance_pct)
    finally:
        lab.delay_ms = lab.loss_pct = None
        lab.shape(before)  # leave the link as it was
    return checks


def format_table(checks: list[Check | NetemCheck]) -> str:
    lines = [f"{'rate':>8}  {'dir':<26} {'expected':>10} {'measured':>10} {'error':>8} {'retr':>5}  result"]
    point = prev = None
    for c in checks:
        if (c.delay_ms, c.loss_pct) != point and (c.delay_ms is not None or c.loss_pct is not None):
            point = (c.delay_ms, c.loss_pct)
            lines.append(f"  delay {c.delay_ms or 0:g} ms one way, loss {c.loss_pct or 0:g}% per direction:")
        if isinstance(c, NetemCheck):
            if not isinstance(prev, NetemCheck):  # the netem checks' own columns
                lines.append(
                    f"{'':>8}  {'measure':<26} {'expected':>10} {'measured':>10} {'accepted':>16} samples"
                )
            lines.append(c.row())
            prev = c
            continue
        prev = c
        label = "up (client->server)" if c.direction == "up" else "down (server->client)"
        measured = f"{c.measured_mbps:.2f}" if c.measured_mbps is not None else "-"
        err = f"{c.error_pct:+.1f}%" if c.error_pct is not None else "-"
        verdict = "ok" if c.ok else ("FAIL: " + c.error if c.error else "FAIL")
        lines.append(
            f"{c.rate_mbps:>6g}M  {label:<26} {c.expected_mbps:>9.2f}M {measured:>9}M {err:>8} "
            f"{c.retransmits if c.retransmits is not None else '-':>5}  {verdict}"
        )
    return "\n".join(lines)


def raise_on_failure(checks: list[Check | NetemCheck], tolerance_pct: float) -> None:
    bad = [c for c in checks if not c.ok]
    if bad:
        what = ", ".join(
            f"{c.rate_mbps:g} Mbit/s {c.measure if isinstance(c, NetemCheck) else c.direction}" for c in bad
        )
        raise UserError(
            f"link validation failed for {what} (tolerance {tolerance_pct:g}%)",
            "see the table above; check the shaping with `testbed status` and the machine's load",
        )
