"""The lightweight-RPC study's packet sizes on the testbed's link: LargeData8192 over gRPC against the
tagless transport, counted by the appliance's HTB class (the study's Fig. 9d, measured)."""

from __future__ import annotations

import csv
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


def test_an_rpc_study_sweeps_both_transports_on_both_servers_shaped_and_unshaped(inventory, lease, tmp_path):
    """`testbed sweep` of an `rpc:` file end to end: every batch runs, the unshaped link is recorded as
    such, the bytes per call come from the ports' counters in the rows, and the analysis finds gRPC's
    tags on every LargeData8192 member on both links and both servers."""
    exp = tmp_path / "rpc.yaml"
    exp.write_text(
        "name: rpc-e2e\nrpc:\n  calls: {none: 40, 100: 20}\n  operations:\n    SayHello:\n"
        "    SendRcvLargeData: [8192]\nservers: [python, cpp]\nrates: [none, 100]\nreps: 2\n"
    )
    results = tmp_path / "results"
    out = run_cli(inventory, "sweep", str(exp), "--results", str(results)).stdout
    assert "RPC study" in out and "at host speed" in out
    (run_dir,) = results.iterdir()
    with open(run_dir / "trials.csv", newline="") as f:
        got = list(csv.DictReader(line for line in f if not line.startswith("#")))
    assert len(got) == 2 * 4 * 2 * 2 and all(r["ok"] == "true" for r in got), [r["error"] for r in got]
    assert {r["rate_mbps"] for r in got} == {"inf", "100.0"}
    assert {int(r["calls"]) for r in got if r["rate_mbps"] == "inf"} == {40}
    assert all(float(r["wire_up"]) > int(r["bytes_up"]) for r in got)  # frames and TCP/IP around them
    ratios = list(csv.DictReader(open(run_dir / "analysis" / "rpc_ratios.csv")))  # noqa: SIM115
    large = [r for r in ratios if r["op"] == "SendRcvLargeData"]
    assert {(r["server"], r["link"]) for r in large} == {
        (s, k) for s in ("python", "cpp") for k in ("unshaped", "100M")
    }
    assert all(float(r["wire_extra_per_member"]) >= 2 for r in large), large
    assert (run_dir / "analysis" / "report.html").stat().st_size > 0
    assert leftovers(lease.prefix) == []
