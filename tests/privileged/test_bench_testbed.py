"""`testbed bench --quick` on a real embedded testbed of its own: every row measured, and
the testbed left as found (down if it was down; up, with its shaping, if it was up)."""

from __future__ import annotations

import json

import pytest

from benchmarks import grid
from benchmarks.common import SKIPPED
from benchmarks.runner import MODULES
from tests.helpers import run_bench, run_cli
from tests.isolation import leftovers

pytestmark = pytest.mark.privileged


def unmeasured(rows: list[dict]) -> list[dict]:
    """Rows skipped that the bench should have measured: all of them, but the shipped run's row
    while no run is shipped (it then says so)."""
    return [
        r
        for r in rows
        if r["status"] == SKIPPED and not (r["section"] == grid.SECTION and not grid.RUN.exists())
    ]


def test_bench_quick_brings_the_testbed_up_and_takes_it_down(inventory, lease, tmp_path):
    out = tmp_path / "bench"
    proc, rows = run_bench(inventory, out)
    assert "targets:" in proc.stdout
    assert f"bringing testbed {lease.prefix} up" in proc.stderr
    assert unmeasured(rows) == []
    assert {r["section"] for r in rows} == {m.SECTION for m in MODULES}  # every benchmark measured
    assert leftovers(lease.prefix) == [], "a testbed the bench brought up is down again"
    assert (out / "worker.log").exists()


def test_bench_leaves_a_running_testbed_up_with_its_shaping(inventory, tmp_path):
    run_cli(inventory, "up", "--no-server")
    run_cli(inventory, "shape", "--up-rate", "30mbit", "--down-rate", "20mbit")
    out = tmp_path / "bench"
    _, rows = run_bench(inventory, out)
    assert unmeasured(rows) == []
    status = json.loads(run_cli(inventory, "status", "--json").stdout)
    assert status["up"] is True
    assert status["shaping"]["up (client->server)"]["htb"]["rate"] == 30_000_000
    assert status["shaping"]["down (server->client)"]["htb"]["rate"] == 20_000_000
    assert status["services"] == {"iperf3": True, "offload": False, "grpc": False}, "its server is stopped"
    assert status["client_cpu"]["in_force"]["fraction"] == pytest.approx(0.5), "the CPU limit stays"
