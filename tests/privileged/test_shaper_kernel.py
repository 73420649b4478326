"""The printed tc commands are the netlink requests: one namespace gets `Shaper.apply` (pyroute2), a
twin gets the dry run's lines run by the real `tc`, and the kernel reports the same qdiscs and classes
in both, for a fresh port, a rate change, and netem added and removed where the kernel has it."""

from __future__ import annotations

import os
import re
import subprocess

import pytest

from appliance.shaper import Shaper, plan_shaping
from contracts.profiles import LinkSpec

pytestmark = pytest.mark.privileged


def sh(*argv: str) -> str:
    return subprocess.run(argv, check=True, capture_output=True, text=True).stdout


@pytest.fixture
def twins():
    """Two namespaces of this test's own, each with a veth pair (a1, a0) inside, removed afterwards
    (the links stay down: no traffic, so the two kernels' views differ only in configuration)."""
    if os.geteuid() != 0:
        pytest.skip("privileged: needs root (CI runs as root)")
    names = [f"tbo{os.getpid()}{side}" for side in ("n", "t")]
    try:
        for ns in names:
            sh("ip", "netns", "add", ns)
            sh("ip", "-n", ns, "link", "add", "a1", "type", "veth", "peer", "name", "a0")
        yield names
    finally:
        for ns in names:
            subprocess.run(["ip", "netns", "delete", ns], capture_output=True)


def kernel_view(ns: str) -> list[str]:
    """What the kernel holds on both ports, in tc's own words (no statistics)."""
    out = []
    for dev in ("a1", "a0"):
        out += sh("ip", "netns", "exec", ns, "tc", "-d", "qdisc", "show", "dev", dev).splitlines()
        out += sh("ip", "netns", "exec", ns, "tc", "-d", "class", "show", "dev", dev).splitlines()
    return [re.sub(r"direct_packets_stat \d+ ", "", line) for line in out]


@pytest.mark.kernel
def test_the_dry_run_lines_run_by_tc_leave_what_apply_leaves(twins):
    netlink_ns, tc_ns = twins
    shaper, twin = Shaper(netlink_ns), Shaper(tc_ns)
    links = [LinkSpec(20_000_000, 10_000_000), LinkSpec(12_345_678, 1_500_000, ceil=30_000_000)]
    if shaper.netem_available():
        links += [
            LinkSpec(12_345_678, 1_500_000, delay_ms=25.0, loss_pct=0.5),
            LinkSpec(40_000_000, 40_000_000),
        ]
    kinds = []
    for link in links:
        ports = plan_shaping(link, "a1", "a0")
        printed = [op.tc() for op in twin.plan(ports)]
        assert printed == [op.tc() for op in shaper.plan(ports)]  # both twins are in the same state
        for line in printed:
            sh("ip", "netns", "exec", tc_ns, *line.split())
        shaper.apply(ports)
        view = kernel_view(netlink_ns)
        assert view == kernel_view(tc_ns), printed
        assert sum(line.startswith("class htb 1:10 root") for line in view) == 2
        kinds.append([line.split(" dev ")[0] for line in printed])
    assert kinds[0] == ["tc qdisc replace", "tc class add"] * 2
    assert kinds[1] == ["tc class change"] * 2
