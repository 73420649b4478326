"""A link trace replayed for real: in-place HTB changes on the appliance at their times, under an
iperf3 flow, each interval's achieved rate read from the class counters against the trace."""

from __future__ import annotations

import json
import subprocess

import pytest

from tests.helpers import run_cli

pytestmark = pytest.mark.privileged

# 4 s of steps, down (server -> client) 1 s at each rate; up the same
TRACE = "t_s,up_mbps,down_mbps\n0,20,20\n1,5,5\n2,40,40\n3,10,10\n4,10,10\n"


def htb_handles(ns: str, dev: str) -> str:
    """The qdiscs on a port with their handles (`tc qdisc show`): what must not change mid-trace."""
    out = subprocess.run(
        ["ip", "netns", "exec", ns, "tc", "qdisc", "show", "dev", dev],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return " ".join(line.split(" refcnt")[0] for line in out.splitlines())


def class_rate(ns: str, dev: str) -> str:
    out = subprocess.run(
        ["ip", "netns", "exec", ns, "tc", "class", "show", "dev", dev],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return out.split(" rate ")[1].split()[0]


def test_replay_short_trace_within_10pct_per_interval(inventory, lease, tmp_path):
    run_cli(inventory, "up", "--no-server")
    appliance, port = lease.name("appliance"), lease.name("a1")
    before = htb_handles(appliance, port)
    rate_before = class_rate(appliance, port)
    trace = tmp_path / "steps.csv"
    trace.write_text(TRACE)
    out = tmp_path / "check.json"
    proc = run_cli(inventory, "shape", "--trace", str(trace), "--check", "down", "--json", str(out))
    result = json.loads(out.read_text())

    # the agent applied every step within a few ms of its time, both ports each time, in place
    (played,) = result["passes"]
    assert [s["t_s"] for s in played["steps"]] == [0, 1, 2, 3]
    for step in played["steps"][1:]:
        assert all(cmd.startswith("tc class change") for cmd in step["commands"]), step
        assert len(step["commands"]) == 2
    assert htb_handles(appliance, port) == before  # no qdisc deleted or added

    # every interval (1 s each) of the loaded direction within 10% of its rate (HTB counters)
    htb = [c for c in result["checks"] if c["measure"] == "htb"]
    assert [c["target_bps"] for c in htb] == [20e6, 5e6, 40e6, 10e6]
    assert not any(c["idle"] for c in htb)  # the flow kept the link busy: every interval is judged
    assert all(abs(c["error_pct"]) <= 10 for c in htb), proc.stdout
    assert result["summary"]["htb.down"]["failed"] == []
    # the link is back as it was before the replay
    assert class_rate(appliance, port) == rate_before
