"""Checking the shaped link with iperf3 before any measurement trusts it.

For each rate: shape, run iperf3 in both directions (client host to server host and back), and
compare the measured TCP goodput with what the configured rate can carry. A sweep calls
`validate_rate` for each of its rates; `testbed validate` calls `validate` for a list.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass

from contracts.command import Result
from contracts.errors import UserError
from contracts.units import expected_goodput
from testbed.backends.lab import Lab


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
) -> list[Check]:
    if shape:
        lab.set_rate(rate_bps)
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


def validate(lab: Lab, rates_bps: list[int], duration: int = 3, tolerance_pct: float = 5.0) -> list[Check]:
    lab.require_up()
    before = lab.link_in_force()
    checks = []
    try:
        for rate in rates_bps:
            checks += validate_rate(lab, rate, duration, tolerance_pct)
    finally:
        lab.shape(before)  # leave the link as it was
    return checks


def format_table(checks: list[Check]) -> str:
    lines = [f"{'rate':>8}  {'dir':<26} {'expected':>10} {'measured':>10} {'error':>8} {'retr':>5}  result"]
    for c in checks:
        label = "up (client->server)" if c.direction == "up" else "down (server->client)"
        measured = f"{c.measured_mbps:.2f}" if c.measured_mbps is not None else "-"
        err = f"{c.error_pct:+.1f}%" if c.error_pct is not None else "-"
        verdict = "ok" if c.ok else ("FAIL: " + c.error if c.error else "FAIL")
        lines.append(
            f"{c.rate_mbps:>6g}M  {label:<26} {c.expected_mbps:>9.2f}M {measured:>9}M {err:>8} "
            f"{c.retransmits if c.retransmits is not None else '-':>5}  {verdict}"
        )
    return "\n".join(lines)


def raise_on_failure(checks: list[Check], tolerance_pct: float) -> None:
    bad = [c for c in checks if not c.ok]
    if bad:
        what = ", ".join(f"{c.rate_mbps:g} Mbit/s {c.direction}" for c in bad)
        raise UserError(
            f"link validation failed for {what} (tolerance {tolerance_pct:g}%)",
            "see the table above; check the shaping with `testbed status` and the machine's load",
        )
