"""Every shaped trial checked against the shaping it asked for, before its row is kept.

A rate group's link is validated once (iperf3), but the shaping can go away while its trials run (a
qdisc deleted, the class replaced, the switch restarted without it): trials would then be kept as
run "at 20 Mbit/s" over an unshaped link, silently wrong in exactly the data the tool exists to
produce. So after each trial the appliance's HTB classes are read back (one agent verb): each port
must still have our class, at the rate asked, and its byte counter must have advanced by at least
the payload the trial moved that way. A trial that fails the check is written as failed, with what
was measured, and the sweep repairs the shaping (`testbed.sweep.phases`).
"""

from __future__ import annotations

from contracts.agent_answers import HtbClass
from contracts.units import format_rate

RATE_TOLERANCE = 0.01  # the kernel keeps rates in bytes/s: a rate asked in bits/s rounds


class ShapingGuard:
    """The shaping of one rate group: `check` compares the classes now with the last reading."""

    def __init__(self, rate_bps: int, up_if: str, down_if: str, classes: dict[str, HtbClass]) -> None:
        self.rate_bps = rate_bps
        self.ports = (("up", up_if, "bytes_up"), ("down", down_if, "bytes_down"))
        self.last = classes

    def check(self, classes: dict[str, HtbClass], record: dict) -> str | None:
        """What was wrong with the shaping while the trial of `record` ran, or None; `classes` becomes
        the reading the next trial is checked against."""
        problems = []
        for direction, port, payload_key in self.ports:
            before, now = self.last.get(port), classes.get(port)
            if now is None:
                problems.append(f"{port} ({direction}) has no HTB class 1:10: the link was not shaped")
                continue
            if abs(now.rate - self.rate_bps) > RATE_TOLERANCE * self.rate_bps:
                problems.append(
                    f"{port} ({direction}) is shaped at {format_rate(now.rate)}, not {format_rate(self.rate_bps)}"
                )
            if before is None:
                continue  # the class came back since the last reading: its counters say nothing yet
            sent = now.bytes - before.bytes
            payload = record.get(payload_key)
            if sent < 0:
                problems.append(
                    f"{port} ({direction}): the class's byte counter went back ({sent} bytes): it was replaced"
                )
            elif payload and sent < payload:
                problems.append(
                    f"{port} ({direction}) sent {sent} bytes through its class while the trial moved "
                    f"{payload} bytes that way: the trial bypassed the shaping"
                )
        self.last = classes
        return "; ".join(problems) or None
