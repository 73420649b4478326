"""The stock-kernel guest for real (`testbed guest`): Debian's kernel boots under QEMU, netem loads in it
and delays a veth pair between two namespaces by what it was told, and a command that hangs is killed
at the timeout with nothing left behind (no QEMU, no temp dir). Skipped, with the reason, where the
kernel image, QEMU or busybox-static is not installed; nothing here is about this host's own kernel."""

from __future__ import annotations

import os
import re
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

from contracts.errors import UserError
from testbed.guest import plan_guest
from tests.helpers import REPO

pytestmark = pytest.mark.privileged

DELAY_MS = 50  # one way, on one side only: the RTT is about this
NETEM = f"""set -e
modprobe sch_netem
ip netns add tbga; ip netns add tbgb
ip link add tbg0 netns tbga type veth peer name tbg1 netns tbgb
ip -n tbga addr add 10.99.0.1/24 dev tbg0; ip -n tbga link set tbg0 up
ip -n tbgb addr add 10.99.0.2/24 dev tbg1; ip -n tbgb link set tbg1 up
ip netns exec tbga tc qdisc add dev tbg0 root netem delay {DELAY_MS}ms
ip netns exec tbga ping -n -c 21 -i 0.2 10.99.0.2
"""


@pytest.fixture(scope="module")
def guest_ready():
    if os.geteuid() != 0:
        pytest.skip("privileged: needs root (CI runs as root)")
    try:
        plan_guest(["true"], 60)
    except UserError as exc:
        pytest.skip(f"no stock-kernel guest here: {exc}")


def guest(*argv: str, timeout: float, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "testbed", "guest", "--timeout", str(timeout), "--", *argv],
        capture_output=True,
        text=True,
        timeout=timeout + 60,
        cwd=REPO,
        env=env,
    )


def test_netem_in_the_guest_delays_a_ping_by_what_it_was_told(guest_ready):
    proc = guest("sh", "-c", NETEM, timeout=240)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "accelerator: " in proc.stderr  # which one, said in one line
    rtts = [float(t) for t in re.findall(r"time=([\d.]+) ms", proc.stdout)]
    assert len(rtts) == 21, proc.stdout
    median = statistics.median(rtts[1:])  # the first waits for ARP
    assert abs(median - DELAY_MS) <= 0.1 * DELAY_MS, rtts


def test_a_hung_command_is_killed_at_the_timeout_and_nothing_is_left(guest_ready, tmp_path):
    env = {**os.environ, "TMPDIR": str(tmp_path)}  # the guest's temp dir lands here
    proc = guest("sleep", "3600", timeout=15, env=env)
    assert proc.returncode == 124, proc.stderr
    assert "no result within 15 s" in proc.stderr
    assert list(tmp_path.iterdir()) == []
    assert [pid for pid in qemu_pids() if str(tmp_path) in cmdline(pid)] == []


def qemu_pids() -> list[str]:
    return [p.name for p in Path("/proc").iterdir() if p.name.isdigit() and "qemu" in cmdline(p.name)]


def cmdline(pid: str) -> str:
    try:
        return (Path("/proc") / pid / "cmdline").read_text().replace("\0", " ")
    except OSError:
        return ""
