"""Fixtures of the privileged tests: each test's own prefix, subnets and ports (`tests/isolation.py`),
and a throw-away embedded testbed made of them, removed even when the test fails."""

from __future__ import annotations

import os
import subprocess

import pytest

from tests.helpers import run_cli
from tests.isolation import give_back, leftovers, take, write_inventory


@pytest.fixture
def leases(request):
    """Takes leases of this test's own: `leases(subnets=1, ports=3)`; all given back after the test."""
    if os.geteuid() != 0:
        pytest.skip("privileged: needs root (CI runs as root)")
    taken = []

    def lease(subnets: int = 1, ports: int = 3, replicas: int = 1):
        taken.append(take(subnets, ports, test=request.node.nodeid, replicas=replicas))
        return taken[-1]

    yield lease
    for lease_ in taken:
        give_back(lease_)


@pytest.fixture
def lease(leases):
    """This test's prefix, /24 subnet and three free ports (server, iperf3, gRPC)."""
    return leases()


@pytest.fixture
def inventory(tmp_path, lease):
    """An inventory for an embedded testbed of the test's own, torn down after it whatever happened."""
    path = write_inventory(tmp_path / "inventory.yaml", lease)
    yield path
    run_cli(path, "down", check=False)
    assert leftovers(lease.prefix) == []


@pytest.fixture
def kernel_has_netem(lease) -> bool:
    """Whether this kernel can make a netem qdisc (tried on a throw-away namespace's loopback, named
    from the test's own lease)."""
    ns = lease.name("netemprobe")
    subprocess.run(["ip", "netns", "add", ns], check=True)
    try:
        probe = [
            "ip",
            "netns",
            "exec",
            ns,
            "tc",
            "qdisc",
            "add",
            "dev",
            "lo",
            "root",
            "netem",
            "delay",
            "1ms",
        ]
        return subprocess.run(probe, capture_output=True).returncode == 0
    finally:
        subprocess.run(["ip", "netns", "delete", ns], check=True)
