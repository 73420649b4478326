"""Two replicas of the embedded testbed sharing one sweep: real namespaces, switches and links."""

from __future__ import annotations

import json

import pytest

from tests.helpers import rows, run_cli
from tests.isolation import leftovers, write_inventory

pytestmark = pytest.mark.privileged


@pytest.fixture
def replicas_inventory(tmp_path, leases):
    """An inventory whose prefix leaves room for a replica's number; both replicas checked gone after."""
    lease = leases(replicas=2)
    path = write_inventory(tmp_path / "inventory.yaml", lease)
    yield path, lease
    run_cli(path, "down", check=False)
    assert leftovers(lease.prefix) == [] and leftovers(f"{lease.prefix}1") == []


def test_a_sweep_over_two_replicas_shares_its_trials_and_down_removes_both(replicas_inventory, tmp_path):
    inventory, lease = replicas_inventory
    results = tmp_path / "results"
    exp = tmp_path / "replicas.yaml"  # two testbeds validate at once on two cores: loosely
    exp.write_text(
        "name: replicas\nops: [mul]\nsizes: [64]\nrates: [20, 40]\nmethods: [raw]\nreps: 4\nwarmup: 0\n"
        "replicas: 2\nvalidation: {enabled: true, duration: 2, retries: 2, tolerance_pct: 40}\n"
    )
    out = run_cli(
        inventory, "sweep", str(exp), "--keep-up", "--results", str(results), "--no-analyze", timeout=900
    ).stdout
    assert "on 2 testbeds side by side" in out and "sweep complete" in out
    (run_dir,) = results.iterdir()
    got = rows(run_dir)
    assert len(got) == 4 + 2 * 4 and all(r["ok"] == "true" for r in got)
    assert {r["replica"] for r in got} == {"0", "1"}
    manifest = json.loads((run_dir / "manifest.json").read_text())
    for r in got:
        if r["rate_mbps"]:  # the rate was validated on the testbed that ran it
            assert any(
                v["replica"] == int(r["replica"]) and v["rate_mbps"] == float(r["rate_mbps"]) and v["ok"]
                for v in manifest["validation"]
            )
    assert leftovers(f"{lease.prefix}1"), "the replica stayed up (--keep-up)"
    run_cli(inventory, "down")
    assert leftovers(lease.prefix) == [] and leftovers(f"{lease.prefix}1") == []
