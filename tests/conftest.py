"""Shared fixtures: a throw-away embedded testbed for privileged tests, removed even when a test fails."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent

INVENTORY = """\
backend: netns
prefix: {prefix}
hosts:
  - role: client
    name: client
    address: 10.{net}.0.1/24
  - role: appliance
    name: appliance
  - role: server
    name: server
    address: 10.{net}.0.2/24
link:
  rate: 100mbit
client_cpu:
  cpu_quota: {quota}
services:
  server_port: {port}
  iperf3_port: {iperf_port}
"""


def write_inventory(
    path: Path,
    prefix: str = "tbt",
    net: int = 78,
    quota: float = 0.5,
    port: int = 18080,
    iperf_port: int = 15201,
) -> Path:
    path.write_text(
        textwrap.dedent(
            INVENTORY.format(prefix=prefix, net=net, quota=quota, port=port, iperf_port=iperf_port)
        )
    )
    return path


def leftovers(prefix: str) -> list[str]:
    """Everything of a testbed with this prefix still on the machine."""
    found = []
    netns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.split("\n")
    found += [f"netns {line.split()[0]}" for line in netns if line.startswith(f"{prefix}-")]
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    found += [
        f"link {line.split(':')[1].strip()}"
        for line in links.splitlines()
        if line.split(":")[1].strip().split("@")[0].startswith(f"{prefix}-")
    ]
    for cg in (Path("/sys/fs/cgroup/cpu") / f"{prefix}-client", Path("/sys/fs/cgroup") / f"{prefix}-client"):
        if cg.exists():
            found.append(f"cgroup {cg}")
    procs = subprocess.run(["pgrep", "-af", f"/run/testbed/{prefix}/"], capture_output=True, text=True).stdout
    found += [f"process {line}" for line in procs.splitlines()]
    if Path(f"/run/testbed/{prefix}").exists():
        found.append(f"state /run/testbed/{prefix}")
    return found


def run_cli(
    inventory: Path, *args: str, check: bool = True, timeout: float = 600
) -> subprocess.CompletedProcess:
    proc = subprocess.run(
        [sys.executable, "-m", "testbed", "--inventory", str(inventory), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=REPO,
    )
    if check and proc.returncode != 0:
        raise AssertionError(
            f"testbed {' '.join(args)} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}"
        )
    return proc


@pytest.fixture
def inventory(tmp_path):
    """An inventory for a testbed of its own (prefix tbt), torn down after the test whatever happened."""
    if os.geteuid() != 0:
        pytest.skip("privileged: needs root (CI runs as root)")
    path = write_inventory(tmp_path / "inventory.yaml")
    run_cli(path, "down", check=False)
    yield path
    run_cli(path, "down", check=False)
    assert leftovers("tbt") == []
