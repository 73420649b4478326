"""The embedded testbed for real: namespaces, the OVS bridge, HTB, the cgroup, iperf3."""

from __future__ import annotations

import json
import re
import signal
import statistics
import subprocess
import sys
import time

import pytest

from contracts.units import expected_goodput
from tests.helpers import REPO, run_cli
from tests.isolation import leftovers, write_inventory

pytestmark = pytest.mark.privileged


def tc_class(ns: str, dev: str) -> str:
    return subprocess.run(
        ["ip", "netns", "exec", ns, "tc", "-s", "class", "show", "dev", dev],
        capture_output=True,
        text=True,
        check=True,
    ).stdout


def test_up_shape_validate_down(inventory, lease, tmp_path):
    run_cli(inventory, "up", "--no-server")
    run_cli(inventory, "shape", "--rate", "20mbit")
    for dev in (lease.name("a0"), lease.name("a1")):
        assert "rate 20Mbit ceil 20Mbit" in tc_class(lease.name("appliance"), dev)

    out = tmp_path / "validate.json"
    proc = run_cli(inventory, "validate", "--rates", "20", "--duration", "3", "--json", str(out))
    assert "up (client->server)" in proc.stdout and "down (server->client)" in proc.stdout
    checks = json.loads(out.read_text())["checks"]
    assert [c["direction"] for c in checks] == ["up", "down"]
    assert all(c["ok"] for c in checks)
    # validation leaves the link as it found it
    assert "rate 20Mbit" in tc_class(lease.name("appliance"), lease.name("a1"))

    # a plain iperf3 run by hand between the namespaces agrees, within 5% in the better of two runs as
    # the tool's validation retries (one 2-s run on the shared 2-core VM once fell 8% short, in CI)
    errors = []
    for _ in range(2):
        by_hand = subprocess.run(
            ["ip", "netns", "exec", lease.name("client"), "iperf3", "-c", lease.address(2), "-p",
             str(lease.ports[1]), "-t", "2", "-O", "1", "-J"],
            capture_output=True, text=True, check=True,
        )  # fmt: skip
        measured = json.loads(by_hand.stdout)["end"]["sum_received"]["bits_per_second"]
        errors.append(abs(measured - expected_goodput(20_000_000)) / expected_goodput(20_000_000))
        if errors[-1] < 0.05:
            break
    assert min(errors) < 0.05, errors

    proc = run_cli(inventory, "down")
    assert f"netns {lease.name('client')}" in proc.stdout
    assert leftovers(lease.prefix) == []
    assert "nothing to remove" in run_cli(inventory, "down").stdout


def test_status_shows_bridge_shaping_and_cpu_limit(inventory, lease):
    run_cli(inventory, "up", "--no-server")
    run_cli(inventory, "shape", "--up-rate", "10mbit", "--down-rate", "40mbit")
    status = json.loads(run_cli(inventory, "status", "--json").stdout)
    assert status["up"] is True
    assert status["bridge"]["datapath_type"] == "netdev"
    assert sorted(status["bridge"]["ports"]) == [lease.name("a0"), lease.name("a1")]
    assert status["shaping"]["up (client->server)"]["htb"]["rate"] == 10_000_000
    assert status["shaping"]["down (server->client)"]["htb"]["rate"] == 40_000_000
    assert status["client_cpu"]["in_force"]["fraction"] == pytest.approx(0.5)
    assert status["hosts"]["server"]["address"] == f"{lease.address(2)}/24"
    # the client's processes run in the limited cgroup; --unlimited ones do not
    assert (
        "/" + lease.name("client")
        in run_cli(inventory, "exec", "client", "--", "cat", "/proc/self/cgroup").stdout
    )
    assert (
        "/" + lease.name("client")
        not in run_cli(inventory, "exec", "--unlimited", "client", "--", "cat", "/proc/self/cgroup").stdout
    )
    # a rate change is in place: the qdisc stays, only the class changes
    before = tc_class(lease.name("appliance"), lease.name("a1"))
    run_cli(inventory, "shape", "--rate", "60mbit")
    after = tc_class(lease.name("appliance"), lease.name("a1"))
    assert "rate 10Mbit" in before and "rate 60Mbit" in after
    assert "Sent" in after


def test_bad_input_is_one_line_and_changes_nothing(inventory, lease):
    proc = run_cli(inventory, "shape", "--rate", "20mbit", check=False)
    assert proc.returncode == 2 and "not up" in proc.stderr and "Traceback" not in proc.stderr
    run_cli(inventory, "up", "--no-server")
    assert "already up" in run_cli(inventory, "up").stdout
    run_cli(inventory, "shape", "--rate", "30mbit")
    for bad in (
        ["--rate", "0"],
        ["--rate", "fast"],
        ["--rate=-5mbit"],
        ["--rate", "35gbit"],
    ):
        proc = run_cli(inventory, "shape", *bad, check=False)
        assert proc.returncode == 2, bad
        assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr
    # nothing was half-applied: the rate from before the failed commands is still in force
    for dev in (lease.name("a0"), lease.name("a1")):
        assert "rate 30Mbit" in tc_class(lease.name("appliance"), dev)
    proc = run_cli(inventory, "exec", "nosuchhost", "--", "true", check=False)
    assert proc.returncode == 2 and "unknown host" in proc.stderr


def ping_rtt_ms(lease, count: int = 10) -> tuple[float, float]:
    """Median round-trip time and loss (%) from the client to the server. The median: a mean took in
    a few pings' long waits (185 ms for a 50 ms round trip, once in three runs in the stock-kernel
    guest; with loss on the link ARP's own requests are lost too, and pings wait for its retries),
    which are not the link's delay."""
    out = subprocess.run(
        [
            "ip",
            "netns",
            "exec",
            lease.name("client"),
            "ping",
            "-n",
            "-i",
            "0.2",
            "-c",
            str(count),
            lease.address(2),
        ],
        capture_output=True,
        text=True,
    ).stdout
    loss = float(out.split("% packet loss")[0].split()[-1])
    times = [float(t) for t in re.findall(r"time=([0-9.]+) ms", out)]
    return (statistics.median(times) if times else float("nan")), loss


@pytest.mark.kernel
def test_delay_and_loss_are_applied_where_the_kernel_has_netem(inventory, lease, kernel_has_netem):
    """With sch_netem: the delay is measured in the round trip and the loss in the pings lost.
    Without it: one line naming the module, and the link is left as it was."""
    run_cli(inventory, "up", "--no-server")
    run_cli(inventory, "shape", "--rate", "30mbit")
    proc = run_cli(inventory, "shape", "--rate", "20mbit", "--delay", "25", "--loss", "20", check=False)
    if not kernel_has_netem:
        assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1
        assert "sch_netem" in proc.stderr
        for dev in (lease.name("a0"), lease.name("a1")):
            assert "rate 30Mbit" in tc_class(lease.name("appliance"), dev)
        return
    assert proc.returncode == 0, proc.stderr
    assert "netem" in tc_class(lease.name("appliance"), lease.name("a1")) or "netem" in subprocess.run(
        ["ip", "netns", "exec", lease.name("appliance"), "tc", "qdisc", "show", "dev", lease.name("a1")],
        capture_output=True, text=True,
    ).stdout  # fmt: skip
    rtt, loss = ping_rtt_ms(lease, count=100)
    assert 45 <= rtt <= 80, rtt  # 25 ms each way
    assert 15 <= loss <= 65, loss  # 20% each way: about 36% of round trips lost
    run_cli(inventory, "shape", "--rate", "20mbit")  # no delay or loss: netem goes away
    rtt, loss = ping_rtt_ms(lease)
    assert rtt < 20 and loss < 15, (rtt, loss)


def test_kill_9_of_the_orchestrator_then_down_leaves_nothing(inventory, lease):
    run_cli(inventory, "up", "--no-server")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "testbed",
            "--inventory",
            str(inventory),
            "validate",
            "--rates",
            "10",
            "--duration",
            "10",
        ],
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    time.sleep(3)  # iperf3 is running by now
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert leftovers(lease.prefix) != []
    run_cli(inventory, "down")
    assert leftovers(lease.prefix) == []


def test_another_testbed_and_foreign_namespaces_are_not_touched(inventory, lease, leases, tmp_path):
    second = leases()
    other = write_inventory(tmp_path / "other.yaml", second)
    foreign = f"foreign-{lease.prefix}"  # a namespace of no testbed
    subprocess.run(["ip", "netns", "add", foreign], check=True)
    try:
        subprocess.run(
            [
                "ip",
                "netns",
                "exec",
                foreign,
                "tc",
                "qdisc",
                "add",
                "dev",
                "lo",
                "root",
                "handle",
                "1:",
                "htb",
            ],
            check=True,
        )
        run_cli(other, "up", "--no-server")
        run_cli(other, "shape", "--rate", "7mbit")
        run_cli(inventory, "up", "--no-server")
        run_cli(inventory, "down")
        assert leftovers(lease.prefix) == []
        assert foreign in subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
        assert (
            "htb"
            in subprocess.run(
                ["ip", "netns", "exec", foreign, "tc", "qdisc", "show", "dev", "lo"],
                capture_output=True,
                text=True,
            ).stdout
        )
        status = json.loads(run_cli(other, "status", "--json").stdout)
        assert status["up"] and status["bridge"]["ports"] == [second.name("a0"), second.name("a1")]
        assert "rate 7Mbit" in tc_class(second.name("appliance"), second.name("a1"))
    finally:
        run_cli(other, "down", check=False)
        subprocess.run(["ip", "netns", "delete", foreign], check=False)
    assert leftovers(second.prefix) == []


def test_the_tagless_server_comes_with_up_answers_through_the_switch_and_goes_with_down(inventory, lease):
    run_cli(inventory, "up")
    status = json.loads(run_cli(inventory, "status", "--json").stdout)
    target = f"{lease.address(2)}:{lease.tagless_port}"
    assert status["tagless_servers"]["python"] == {"target": target, "answers": True}
    assert status["tagless_servers"]["cpp"]["answers"] is False  # not asked for: no C++ gRPC server
    call = (
        "import numpy as np; from client.tagless_call import TaglessClient; "
        f"c = TaglessClient('{lease.address(2)}', {lease.tagless_port}); "
        "r = c.call('SendRcvLargeData8192', tuple(range(8192)), timing=True); "
        "print(r.values == tuple(range(8192)), r.bytes_up, r.timing.decode_cpu > 0)"
    )
    out = subprocess.run(
        ["ip", "netns", "exec", lease.name("client"), sys.executable, "-c", call],
        cwd=REPO, capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    assert out.split() == ["True", str(16 + 4 * 8192), "True"]
    run_cli(inventory, "down")
    assert leftovers(lease.prefix) == []
