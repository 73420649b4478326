"""Delay and loss validated for real (issue 48, item 3): netem on the embedded testbed's appliance,
`testbed validate` measuring the round trip (ping, TCP handshake) and the loss against what was shaped.

It needs sch_netem: where this kernel lacks it the test is skipped here, and scripts/test.sh runs it
again in the stock-kernel guest (`testbed guest`), which has it."""

from __future__ import annotations

import json
import re
import statistics
import subprocess

import pytest

from tests.helpers import run_cli

pytestmark = [pytest.mark.privileged, pytest.mark.kernel]


def test_a_50ms_delay_is_validated_as_a_100ms_round_trip_and_5_percent_loss_in_its_interval(
    inventory, lease, tmp_path, kernel_has_netem
):
    if not kernel_has_netem:
        pytest.skip("this kernel has no sch_netem (scripts/test.sh runs this in the stock-kernel guest)")
    run_cli(inventory, "up", "--no-server")
    proc = run_cli(inventory, "shape", "--rate", "20mbit", "--delay", "50ms")
    assert "delay 50 ms" in proc.stdout
    # a ping by hand from the client to the server: the round trip is twice the one-way delay
    pings = subprocess.run(
        ["ip", "netns", "exec", lease.name("client"), "ping", "-n", "-c", "20", "-i", "0.1", lease.address(2)],
        capture_output=True, text=True,
    ).stdout  # fmt: skip
    rtt = statistics.median(float(t) for t in re.findall(r"time=([0-9.]+) ms", pings))
    assert abs(rtt - 100) <= 10, pings

    out = tmp_path / "validate.json"
    proc = run_cli(
        inventory, "validate", "--rates", "20", "--delays", "50", "--losses", "5", "--duration", "2",
        "--tolerance", "10", "--json", str(out), check=False,
    )  # fmt: skip
    checks = json.loads(out.read_text())["checks"]
    by = {c.get("measure") or c["direction"]: c for c in checks}
    print(proc.stdout)
    assert set(by) == {"up", "down", "rtt ping", "rtt tcp", "loss"}, checks
    for measure in ("rtt ping", "rtt tcp"):  # each within 10% of 100 ms plus the link's own round trip
        c = by[measure]
        assert c["ok"] and c["delay_ms"] == 50 and c["samples"] >= 10, c
        assert c["low"] <= c["measured"] <= c["high"] and c["expected"] >= 100
    assert abs(by["rtt ping"]["measured"] - 100) <= 10, by["rtt ping"]  # the ping's: within 10% of 100 ms
    # a handshake is a round trip too: never shorter than the delay both ways (under QEMU's TCG it took
    # 8 ms more than the link's own handshake, 3.8 ms, added to them: 112.5 ms, in the first run here)
    assert 100 <= by["rtt tcp"]["measured"] <= 1.1 * by["rtt tcp"]["expected"], by["rtt tcp"]
    loss = by["loss"]  # 5% each way, within the binomial interval of the pings lost
    assert loss["ok"] and loss["low"] <= 5 <= loss["high"] and loss["samples"] >= 200, loss
    assert proc.returncode == 0, proc.stdout + proc.stderr  # the rate held too (measured without netem)
    assert "rtt ping" in proc.stdout and "loss" in proc.stdout

    status = run_cli(inventory, "status").stdout
    assert "appliance" in status


def median_rtt_ms(lease, size: int) -> float:
    pings = subprocess.run(
        ["ip", "netns", "exec", lease.name("client"), "ping", "-n", "-c", "10", "-i", "0.3", "-s", str(size),
         lease.address(2)],
        capture_output=True, text=True,
    ).stdout  # fmt: skip
    return statistics.median(float(t) for t in re.findall(r"time=([0-9.]+) ms", pings))


def test_a_serialized_link_holds_each_packet_for_its_bytes_at_the_rate(inventory, lease, kernel_has_netem):
    """`shape --serialize` (an RPC study's links, where netem is there): at 1 Mbit/s a 1442-byte ping
    takes 11.5 ms a way on the line, which HTB alone lets through within its burst (2014 bytes at HZ
    250, one frame more at HZ 100)."""
    if not kernel_has_netem:
        pytest.skip("this kernel has no sch_netem (scripts/test.sh runs this in the stock-kernel guest)")
    run_cli(inventory, "up", "--no-server")
    run_cli(inventory, "shape", "--rate", "1mbit")
    free = median_rtt_ms(lease, 1400)
    proc = run_cli(inventory, "shape", "--rate", "1mbit", "--serialize")
    assert "each packet serialized at the rate" in proc.stdout
    held = median_rtt_ms(lease, 1400)
    line = 2 * (1400 + 8 + 20 + 14) * 8 / 1e6 * 1000  # both ways, ICMP, IP and Ethernet headers: 23.1 ms
    assert held >= 0.95 * line and held <= line + 20, (free, held)
    assert free < line / 2, (free, held)  # the burst passed it at once
