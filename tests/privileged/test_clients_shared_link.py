"""Several clients on the embedded testbed for real (`testbed up --clients 3`): each its namespace,
port and cgroup, one shaped link each way that they share, and `down` leaving nothing."""

from __future__ import annotations

import json
import subprocess
import time

import pytest

from contracts.units import expected_goodput
from tests.helpers import run_cli
from tests.isolation import leftovers, write_inventory
from tests.privileged.test_testbed import tc_class

pytestmark = pytest.mark.privileged


@pytest.fixture
def three_clients(tmp_path, leases):
    """A testbed of the test's own with three clients, and a fourth port for a second iperf3 server;
    torn down after the test whatever happened."""
    lease = leases(ports=4)
    inventory = write_inventory(tmp_path / "inventory.yaml", lease)
    yield inventory, lease
    run_cli(inventory, "down", check=False)
    assert leftovers(lease.prefix) == []


def iperf3_reverse(ns: str, server: str, port: int) -> subprocess.Popen:
    """A 4-s download from the server to the client in `ns`, as iperf3 JSON."""
    argv = ["iperf3", "-c", server, "-p", str(port), "-t", "4", "-O", "1", "-R", "-J"]
    return subprocess.Popen(["ip", "netns", "exec", ns, *argv], stdout=subprocess.PIPE, text=True)


def test_three_clients_share_one_shaped_link_and_down_removes_them_all(three_clients):
    inventory, lease = three_clients
    run_cli(inventory, "up", "--no-server", "--clients", "3")
    assert "already up" in run_cli(inventory, "up").stdout  # the plain inventory finds the three
    refused = run_cli(inventory, "up", "--clients", "2", check=False)
    assert refused.returncode != 0 and "up with 3 client" in refused.stderr
    run_cli(inventory, "shape", "--rate", "20mbit")

    status = json.loads(run_cli(inventory, "status", "--json").stdout)
    assert list(status["hosts"]) == ["client", "client2", "client3", "appliance", "server"]
    assert status["hosts"]["client3"]["address"] == f"{lease.address(4)}/24"
    assert sorted(status["bridge"]["ports"]) == sorted(lease.name(p) for p in ("a0", "ac1", "ac2", "t0"))
    assert sorted(status["bridges"][0]["ports"]) == [lease.name("a1"), lease.name("t1")]
    appliance = lease.name("appliance")
    for port in ("a1", "t1"):  # up where it leaves for the server, down where it leaves for the clients
        assert "rate 20Mbit ceil 20Mbit" in tc_class(appliance, lease.name(port))
    assert "htb" not in tc_class(appliance, lease.name("a0"))  # the clients' own ports are not shaped

    server = lease.address(2)
    for k, role in enumerate(("client", "client2", "client3")):
        ping = run_cli(inventory, "exec", role, "--", "ping", "-c", "1", "-W", "2", server)
        assert "1 received" in ping.stdout
        cgroup = run_cli(inventory, "exec", role, "--", "cat", "/proc/self/cgroup").stdout
        assert "/" + lease.name("client" if k == 0 else f"client{k + 1}") in cgroup

    # two clients downloading at once share the one shaped port: together the link's goodput
    in_server = ["ip", "netns", "exec", lease.name("server")]
    second = subprocess.Popen([*in_server, "iperf3", "-s", "-1", "-B", server, "-p", str(lease.ports[3])])
    try:
        deadline = time.monotonic() + 10  # it listens before the client connects (no test connection:
        while time.monotonic() < deadline:  # -1 would serve that one and exit)
            listening = [*in_server, "ss", "-Hltn", f"sport = :{lease.ports[3]}"]
            if subprocess.run(listening, capture_output=True, text=True).stdout.strip():
                break
            time.sleep(0.05)
        runs = [
            iperf3_reverse(lease.name("client"), server, lease.ports[1]),
            iperf3_reverse(lease.name("client2"), server, lease.ports[3]),
        ]
        received = [
            json.loads(r.communicate(timeout=60)[0])["end"]["sum_received"]["bits_per_second"] for r in runs
        ]
    finally:
        second.kill()
        second.wait()
    goodput = expected_goodput(20_000_000)
    assert abs(sum(received) - goodput) / goodput < 0.10, received
    # both ran at once (one FIFO under one HTB class shares it unevenly between two TCP flows:
    # measured 15% and 83% of it once, so the check is that each moved data beside the other)
    assert min(received) > 0.1 * goodput, received

    proc = run_cli(inventory, "down")
    for name in ("client", "client2", "client3"):
        assert f"netns {lease.name(name)}" in proc.stdout
    assert leftovers(lease.prefix) == []
