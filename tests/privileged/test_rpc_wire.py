"""The lightweight-RPC study's packet sizes on the testbed's link: LargeData8192 over gRPC against the
tagless transport, counted by the appliance's HTB class (the study's Fig. 9d, measured)."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from contracts.tagless import HEADER
from tests.helpers import run_cli
from tests.isolation import leftovers

pytestmark = pytest.mark.privileged
K, CALLS = 8192, 100


def sent_bytes(ns: str, dev: str) -> int:
    out = subprocess.run(
        ["ip", "netns", "exec", ns, "tc", "-s", "class", "show", "dev", dev],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    return sum(int(n) for n in re.findall(r"Sent (\d+) bytes", out))


def test_each_largedata_member_costs_grpc_at_least_two_bytes_more_than_tagless_on_the_wire(inventory, lease):
    run_cli(inventory, "up")
    run_cli(inventory, "shape", "--rate", "100mbit")
    server = lease.address(2)
    per_call = {}
    for transport, port in (("tagless", lease.tagless_port), ("grpc", lease.ports[2])):
        before = sent_bytes(lease.name("appliance"), lease.name("a1"))  # client -> server
        run_cli(
            inventory, "exec", "--unlimited", "client", "--", sys.executable, "-m", "client", "rpc-calls",
            "--transport", transport, "--target", f"{server}:{port}", "--op", "SendRcvLargeData",
            "--n", str(K), "--calls", str(CALLS), "--warmup", "0",
        )  # fmt: skip
        calls = CALLS + 1  # and the one untimed call a batch makes first
        per_call[transport] = (sent_bytes(lease.name("appliance"), lease.name("a1")) - before) / calls
    assert per_call["tagless"] >= HEADER.size + 4 * K  # the frames, and TCP/IP's headers around them
    assert per_call["grpc"] - per_call["tagless"] >= 2 * K, per_call
    run_cli(inventory, "down")
    assert leftovers(lease.prefix) == []
