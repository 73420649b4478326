"""The embedded testbed's switch forwards in the kernel where the openvswitch module loads (issue 48):
two testbeds sweep side by side, each on a kernel datapath of its own in its appliance namespace,
neither seeing the other's ports; `status` and the manifest name the datapath; `down` leaves
nothing, a module the testbeds loaded included. Where the kernel has no such module (this VM's), the
same sweep runs on the userspace datapath, and says so."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from testbed.backends.replicas import replica_inventories
from testbed.backends.topology import Names
from testbed.inventory import load_inventory
from tests.helpers import rows, run_cli
from tests.isolation import leftovers, write_inventory

pytestmark = [pytest.mark.privileged, pytest.mark.kernel]

LOADED = Path("/sys/module/openvswitch")


def module_there() -> bool:
    """Whether this kernel has the openvswitch module, loaded or there to load."""
    return LOADED.exists() or subprocess.run(["modprobe", "-n", "-q", "openvswitch"]).returncode == 0


@pytest.fixture
def two_testbeds(tmp_path, leases):
    lease = leases(replicas=2)
    path = write_inventory(tmp_path / "inventory.yaml", lease)
    yield path, lease
    run_cli(path, "down", check=False)
    assert leftovers(lease.prefix) == [] and leftovers(f"{lease.prefix}1") == []


def datapath_ports(ns: str) -> str:
    return subprocess.run(
        ["ip", "netns", "exec", ns, "ovs-dpctl", "show"], capture_output=True, text=True, check=True
    ).stdout


def test_two_testbeds_sweep_each_through_a_kernel_datapath_of_its_own(two_testbeds, tmp_path):
    inventory, lease = two_testbeds
    expected = "system" if module_there() else "netdev"
    loaded_before = LOADED.exists()
    exp = tmp_path / "datapath.yaml"
    exp.write_text(
        "name: datapath\nops: [mul]\nsizes: [64]\nrates: [20]\nmethods: [raw]\nreps: 2\nwarmup: 0\n"
        "replicas: 2\nvalidation: {enabled: true, duration: 2, retries: 2, tolerance_pct: 40}\n"
    )
    results = tmp_path / "results"
    out = run_cli(
        inventory, "sweep", str(exp), "--keep-up", "--results", str(results), "--no-analyze", timeout=1500
    ).stdout
    assert "sweep complete" in out
    (run_dir,) = results.iterdir()
    got = rows(run_dir)
    assert got and all(r["ok"] == "true" for r in got) and {r["replica"] for r in got} == {"0", "1"}
    (session,) = json.loads((run_dir / "manifest.json").read_text())["sessions"]
    assert session["datapath"] == expected
    assert f"datapath {expected}" in run_cli(inventory, "status").stdout
    if expected == "system":
        names = [Names.of(inv) for inv in replica_inventories(load_inventory(inventory), 2)]
        for mine, other in (names, names[::-1]):
            shown = datapath_ports(mine.appliance_ns)
            assert "system@ovs-system" in shown
            assert all(port in shown for port in mine.bridges[mine.bridge]), shown
            assert not any(port in shown for port in other.bridges[other.bridge]), shown
    run_cli(inventory, "down")
    assert leftovers(lease.prefix) == [] and leftovers(f"{lease.prefix}1") == []
    if expected == "system" and not loaded_before:
        assert not LOADED.exists(), "the module the testbeds loaded was left loaded"
