"""Link rates: parsing what users type, and the numbers derived from a rate.

tc's own unit rules are a trap ("mbps" means megabytes per second to tc), so only bit units are
accepted and a bare number means Mbit/s, the unit of the paper and of the experiment files.
"""

from __future__ import annotations

import functools
import gzip
import re
from pathlib import Path

from contracts.errors import UserError

_UNITS = {"bit": 1, "kbit": 10**3, "mbit": 10**6, "gbit": 10**9}
_RATE = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*([a-z]*)\s*$")
MAX_RATE_BPS = (2**32 - 1) * 8  # HTB's rate is a 32-bit count of bytes per second
ETH_HEADER = 14
TCP_IP_HEADERS = 52  # IPv4 20 + TCP 20 + timestamps 12, as Linux sends by default


def parse_rate(text: str | int | float, what: str = "rate") -> int:
    """Return bits per second; reject zero, negatives and anything that is not a rate."""
    if isinstance(text, bool):
        raise UserError(f"{what} {text!r} is not a rate", "give e.g. 20mbit, 500kbit or 20 (Mbit/s)")
    raw = str(text).strip().lower()
    if raw.startswith("-"):
        raise UserError(f"{what} {text!r} is negative", "give a positive rate, e.g. 20mbit")
    match = _RATE.match(raw)
    if not match:
        raise UserError(f"{what} {text!r} is not a rate", "give e.g. 20mbit, 500kbit, 1gbit or 20 (Mbit/s)")
    number, unit = float(match.group(1)), match.group(2) or "mbit"
    if unit in ("mbps", "kbps", "gbps", "bps"):
        raise UserError(
            f"{what} {text!r} is ambiguous (tc reads '{unit}' as bytes per second)",
            f"write {match.group(1)}{unit[0]}bit for bits per second"
            if unit != "bps"
            else "write e.g. 20mbit",
        )
    if unit not in _UNITS:
        raise UserError(f"{what} {text!r} has an unknown unit {unit!r}", "use bit, kbit, mbit or gbit")
    bps = int(round(number * _UNITS[unit]))
    if bps < 8000:
        raise UserError(f"{what} {text!r} is below 8kbit", "give a rate of at least 8kbit")
    if bps > MAX_RATE_BPS:
        raise UserError(
            f"{what} {text!r} is above {format_rate(MAX_RATE_BPS)}, the most HTB's 32-bit rate field holds",
            "give at most 34gbit",
        )
    return bps


def format_rate(bps: int) -> str:
    for unit, scale in (("gbit", 10**9), ("mbit", 10**6), ("kbit", 10**3)):
        if bps >= scale:
            return f"{bps / scale:g}{unit}"
    return f"{bps}bit"


@functools.cache
def kernel_hz(default: int = 100) -> int:
    """The kernel timer frequency, which bounds how often HTB can refill tokens.

    Read from the kernel config where it is available; otherwise the conservative 100 (a lower HZ
    means a larger burst is needed to reach the rate, so guessing low never under-shoots the rate).
    """
    candidates = [Path("/proc/config.gz")] + sorted(Path("/boot").glob("config-*"))
    for path in candidates:
        try:
            data = gzip.open(path, "rt").read() if path.suffix == ".gz" else path.read_text()
        except OSError:
            continue
        match = re.search(r"^CONFIG_HZ=(\d+)$", data, re.M)
        if match:
            return int(match.group(1))
    return default


def default_burst(rate_bps: int, mtu: int = 1500, hz: int | None = None) -> int:
    """Bytes HTB may send at once: one timer tick of data plus one full frame (as tcconfig does).

    Never a whole second of data, which would let bursts through at line rate.
    """
    hz = hz or kernel_hz()
    return rate_bps // 8 // hz + mtu + ETH_HEADER


def small_burst(mtu: int = 1500) -> int:
    """Two full frames: a burst HTB still reaches its rate with where the kernel times it with
    high-resolution timers (measured: the RPC study's run of 2026-11-28 on this project's VM validated
    10 and 100 Mbit/s shaped with it within 0.05% of the goodput, both ways). What an RPC study shapes
    with: the default's one timer tick of data (50 KB at 100 Mbit/s and HZ 250) passes a whole
    LargeData8192 message (35 KB) at line rate while the other direction's reply refills it, so a
    call took half its bytes' time at the rate. Up to a burst a direction still passes free (a token
    bucket is not a line's serialization): where the kernel has netem the study serializes them too
    (`LinkSpec.serialize`), and `analysis.rpc_study` flags the calls made faster than their bytes at
    the rate. A kernel where two frames cannot reach the rate fails the link's validation, and its
    trials are not run."""
    return 2 * (mtu + ETH_HEADER)


def expected_goodput(rate_bps: int, mtu: int = 1500) -> float:
    """TCP payload bits per second that a shaped Ethernet link of `rate_bps` can carry.

    HTB counts whole frames (payload + TCP/IP + Ethernet headers), so for a 1500-byte MTU the
    payload share is 1448/1514.
    """
    payload = mtu - TCP_IP_HEADERS
    return rate_bps * payload / (mtu + ETH_HEADER)
