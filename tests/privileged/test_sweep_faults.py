"""Faults injected into a running sweep on the real embedded testbed (issue 23): what the sweep
checks after every trial, and what it repairs."""

from __future__ import annotations

import json
import subprocess

import pytest

from tests.helpers import rows, start_sweep, wait_for_rows

pytestmark = pytest.mark.privileged


def test_shaping_deleted_mid_rate_is_never_kept_as_shaped_and_is_repaired(inventory, lease, tmp_path):
    """`tc qdisc del ... root` on both appliance ports while a rate's trials run: the trial that ran
    unshaped is failed with what was read back, the shaping is applied and validated again (recorded in
    the manifest), and the sweep completes with every other trial kept."""
    results = tmp_path / "results"
    proc = start_sweep(
        inventory, "--ops", "mul", "--sizes", "96", "--rates", "20", "--methods", "raw", "--reps", "24",
        "--warmup", "0", "--results", str(results), "--name", "qdisc", "--no-analyze",
    )  # fmt: skip
    run_dir = wait_for_rows(proc, results, 24 + 4)  # the local baseline, then some at 20 Mbit/s
    for port in ("a0", "a1"):
        subprocess.run(
            ["ip", "netns", "exec", f"{lease.prefix}-appliance", "tc", "qdisc", "del", "dev",
             f"{lease.prefix}-{port}", "root"],
            check=True,
        )  # fmt: skip
    out, _ = proc.communicate(timeout=600)
    assert proc.returncode == 0, out
    got = rows(run_dir)
    assert len(got) == 24 * 2 and "sweep complete" in out
    failed = [r for r in got if r["ok"] != "true"]
    assert len(failed) == 1, [r["error"] for r in failed]
    assert failed[0]["error"].startswith("not kept, the shaping was wrong while it ran:")
    assert "has no HTB class 1:10" in failed[0]["error"]
    manifest = json.loads((run_dir / "manifest.json").read_text())
    (repair,) = manifest["repairs"]
    assert repair["ok"] is True and repair["trials"] == [int(failed[0]["trial"])]
    assert len([v for v in manifest["validation"] if v.get("direction")]) >= 4, "validated again"
