"""Checking the link's delay and loss (netem) against what was shaped, as `validate` checks its rate.

Netem adds the one-way delay in each direction, so the round trip is twice it plus the link's own.
The link's own round trip is measured first, with the rate shaped alone (the rate's iperf3 check runs
then too: TCP's goodput through a lossy link is not the rate), by ping and by TCP handshakes from the
client host to the server host; then netem is added and both measured again. Each round trip is the
median of its samples (a ping or SYN lost and resent waits a second; ARP through a lossy link too),
and holds within the rate's tolerance (`validation.tolerance_pct`) of its target, or 1 ms where that
is less (a link without added delay: its own round trip, a fraction of a millisecond, jitters by more
than a percentage of it). The loss is judged from the pings lost: a ping is lost when its request or
its reply is, so the round trip loses 1 - (1 - p)^2 of them for a loss p per direction; the target
holds when it lies within the 99% binomial (Wilson) interval of the pings lost, converted back to one
direction (`contracts.stats.binomial_ci`; at 95% one correct link in twenty would fail).
"""

from __future__ import annotations

import json
import math
import re
import statistics
from dataclasses import asdict, dataclass, replace

from contracts.errors import UserError
from contracts.profiles import NETEM_FIX, NETEM_MISSING, LinkSpec
from contracts.stats import binomial_ci
from testbed.backends.lab import Lab

PINGS = 200  # for the loss: at 5% per direction the interval is about +-5 points of the round trip's
PING_INTERVAL_S = 0.01
# the link's own round trip, before netem, at the same interval: measured at 50 ms apart under QEMU's
# TCG, 10 pings came out at 2.4 and 6.6 ms where 200 at 10 ms apart, through netem, took 1.0 and 2.0 ms
# more than its delay (a guest woken from idle for each ping answers later)
OWN_PINGS = 50
HANDSHAKES = 20
RTT_FLOOR_MS = 1.0
LOSS_LEVEL = 0.99
RTT_PING, RTT_TCP, LOSS = "rtt ping", "rtt tcp", "loss"

_REPLY = re.compile(r"icmp_seq=\d+ .*time=([0-9.]+) ms")
_SUMMARY = re.compile(r"(\d+) packets transmitted, (\d+) received")


@dataclass(frozen=True)
class Ping:
    sent: int
    received: int
    rtts_ms: tuple[float, ...]


def parse_ping(text: str) -> Ping:
    """iputils ping's output: each reply's time, and the packets sent and received from its summary
    (a reply line per packet that came back; none for one that was lost)."""
    summary = _SUMMARY.search(text)
    if summary is None:
        said = text.strip().splitlines()[-1:] or ["no output"]
        raise ValueError(f"no ping statistics ({said[0][-200:]})")
    rtts = tuple(float(t) for t in _REPLY.findall(text))
    return Ping(int(summary.group(1)), int(summary.group(2)), rtts)


def parse_handshakes(text: str) -> tuple[list[float], list[str]]:
    """`python -m client.handshake`'s JSON: the connect times (ms) and the errors."""
    data = json.loads(text or "{}")
    if not isinstance(data, dict) or "connect_ms" not in data:
        raise ValueError(f"not client.handshake's result: {text.strip()[-200:]!r}")
    return [float(t) for t in data["connect_ms"]], [str(e) for e in data.get("errors", [])]


def round_trip_loss(loss_pct: float) -> float:
    """The fraction of round trips lost for a loss of `loss_pct` % in each direction."""
    p = loss_pct / 100
    return 1 - (1 - p) ** 2


def one_way_loss_pct(round_trip: float) -> float:
    """The loss per direction, in %, that loses this fraction of round trips."""
    return 100 * (1 - math.sqrt(max(0.0, 1 - round_trip)))


@dataclass(frozen=True)
class NetemCheck:
    """One measure of a shaped netem link: a round trip (by ping or TCP handshake, ms) or the loss
    (% per direction), against its target, with the interval it is accepted in."""

    rate_mbps: float
    measure: str  # RTT_PING, RTT_TCP or LOSS
    expected: float
    measured: float | None
    low: float | None  # what is accepted: the target's tolerance (round trip), or the measured
    high: float | None  # loss's binomial interval (loss), which the target must lie within
    samples: int
    ok: bool
    error: str | None = None
    delay_ms: float | None = None
    loss_pct: float | None = None
    direction: str = "both"

    def as_dict(self) -> dict:
        return asdict(self)

    def describe(self) -> str:
        unit = "% per direction" if self.measure == LOSS else " ms"
        if self.measured is None:
            return f"{self.measure}: not measured: {self.error or 'no samples'}"
        return f"{self.measure} measured {self.measured:.3g} vs {self.expected:.3g}{unit}"

    def row(self) -> str:
        """Its line in `validate`'s table."""
        unit = "%" if self.measure == LOSS else "ms"
        measured = f"{self.measured:.2f}" if self.measured is not None else "-"
        accepted = f"[{self.low:.2f}, {self.high:.2f}]" if self.low is not None else "-"
        verdict = "ok" if self.ok else ("FAIL: " + self.error if self.error else "FAIL")
        return (
            f"{self.rate_mbps:>6g}M  {self.measure + ' (' + unit + ')':<26} {self.expected:>10.2f} "
            f"{measured:>10} {accepted:>16} n={self.samples:<4} {verdict}"
        )


def judge_rtt(
    measure: str, samples_ms: list[float], own_ms: float | None, link: LinkSpec, rate_mbps: float,
    tolerance_pct: float, error: str | None = None,
) -> NetemCheck:  # fmt: skip
    """A round trip: the median of the samples against twice the delay plus the link's own."""
    delay = link.delay_ms or 0.0
    expected = 2 * delay + (own_ms or 0.0)
    slack = max(expected * tolerance_pct / 100, RTT_FLOOR_MS)
    base = dict(rate_mbps=rate_mbps, measure=measure, expected=round(expected, 3), low=round(expected - slack, 3),
                high=round(expected + slack, 3), samples=len(samples_ms), delay_ms=link.delay_ms,
                loss_pct=link.loss_pct)  # fmt: skip
    if own_ms is None or not samples_ms:
        why = error or ("no samples without netem" if own_ms is None else "no samples")
        return NetemCheck(**base, measured=None, ok=False, error=why)
    measured = statistics.median(samples_ms)
    return NetemCheck(**base, measured=round(measured, 3), ok=abs(measured - expected) <= slack)


def judge_loss(ping: Ping, link: LinkSpec, rate_mbps: float) -> NetemCheck:
    """The loss per direction: the target within the binomial interval of the pings lost."""
    target = link.loss_pct or 0.0
    lost = ping.sent - ping.received
    base = dict(rate_mbps=rate_mbps, measure=LOSS, expected=target, samples=ping.sent,
                delay_ms=link.delay_ms, loss_pct=link.loss_pct)  # fmt: skip
    if ping.sent <= 0:
        return NetemCheck(**base, measured=None, low=None, high=None, ok=False, error="no pings sent")
    low, high = binomial_ci(lost, ping.sent, LOSS_LEVEL)
    low_pct, high_pct = one_way_loss_pct(low), one_way_loss_pct(high)
    return NetemCheck(
        **base,
        measured=round(one_way_loss_pct(lost / ping.sent), 3),
        low=round(low_pct, 3),
        high=round(high_pct, 3),
        ok=low_pct - 1e-9 <= target <= high_pct + 1e-9,
    )


def ping_argv(address: str, count: int, interval_s: float) -> list[str]:
    return ["ping", "-n", "-c", str(count), "-i", f"{interval_s:g}", "-W", "2", address]


def measure_netem(lab: Lab, link: LinkSpec, rate_mbps: float, tolerance_pct: float) -> list[NetemCheck]:
    """The link's own round trip with the rate shaped alone (the caller shaped it), then `link`
    shaped (netem added) and its round trips and loss measured and judged."""
    client = lab.host("client")
    address = str(lab.inv.host("server").address.ip)
    handshake = client.python(
        "client.handshake", "--server", address, "--port", str(lab.inv.iperf3_port),
        "--count", str(HANDSHAKES),
    )  # fmt: skip

    def pings(count: int, interval: float) -> tuple[Ping | None, str | None]:
        out = client.run(
            ping_argv(address, count, interval), check=False, limited=False, timeout=count * 2 + 60
        )
        try:
            return parse_ping(out.stdout), None
        except ValueError as exc:
            return None, str(exc)

    def handshakes() -> tuple[list[float], str | None]:
        out = client.run(handshake, check=False, limited=False, timeout=HANDSHAKES * 6 + 60)
        try:
            times, errors = parse_handshakes(out.stdout)
        except (ValueError, json.JSONDecodeError):
            return [], (out.stderr.strip() or out.stdout.strip())[-200:] or f"exit status {out.returncode}"
        return times, "; ".join(dict.fromkeys(errors)) or None

    own_ping, own_ping_error = pings(OWN_PINGS, PING_INTERVAL_S)
    own_tcp, own_tcp_error = handshakes()
    lab.shape(link)
    ping, ping_error = pings(PINGS, PING_INTERVAL_S)
    tcp, tcp_error = handshakes()
    own_rtt = statistics.median(own_ping.rtts_ms) if own_ping and own_ping.rtts_ms else None
    own_connect = statistics.median(own_tcp) if own_tcp else None
    checks = [
        judge_rtt(RTT_PING, list(ping.rtts_ms) if ping else [], own_rtt, link, rate_mbps, tolerance_pct,
                  ping_error or own_ping_error),
        judge_rtt(RTT_TCP, tcp, own_connect, link, rate_mbps, tolerance_pct, tcp_error or own_tcp_error),
    ]  # fmt: skip
    if ping is None:
        checks.append(NetemCheck(rate_mbps, LOSS, link.loss_pct or 0.0, None, None, None, 0, False,
                                 ping_error, link.delay_ms, link.loss_pct))  # fmt: skip
    else:
        checks.append(judge_loss(ping, link, rate_mbps))
    return checks


def without_netem(link: LinkSpec) -> LinkSpec:
    return replace(link, delay_ms=None, loss_pct=None)


def needs_netem(link: LinkSpec) -> bool:
    return bool(link.delay_ms) or bool(link.loss_pct) or link.serialize


def require_netem(lab: Lab, what: str) -> None:
    """Refuse in one line, before any work, where the appliance's kernel has no netem: `what` (the
    experiment's delays and losses, say) needs it. The message is the shaper's (`appliance.shaper`)."""
    if not lab.netem_available():
        raise UserError(f"{what}: {NETEM_MISSING}", NETEM_FIX)
