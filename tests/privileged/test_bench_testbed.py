"""`testbed bench --quick` on a real embedded testbed of its own (prefix tbq): every row measured, and
the testbed left as found (down if it was down; up, with its shaping, if it was up)."""

from __future__ import annotations

import json
import os

import pytest

from benchmarks.common import SKIPPED
from tests.conftest import leftovers, run_cli, write_inventory
from tests.unit.test_bench import check_outputs

pytestmark = pytest.mark.privileged

PREFIX = "tbq"


@pytest.fixture
def bench_inventory(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("privileged: needs root (CI runs as root)")
    path = write_inventory(tmp_path / "inventory.yaml", prefix=PREFIX, net=83, port=18083, iperf_port=15213)
    run_cli(path, "down", check=False)
    yield path
    run_cli(path, "down", check=False)
    assert leftovers(PREFIX) == []


def test_bench_quick_brings_the_testbed_up_and_takes_it_down(bench_inventory, tmp_path):
    out = tmp_path / "bench"
    proc = run_cli(bench_inventory, "bench", "--quick", "--out", str(out), timeout=900)
    assert "targets:" in proc.stdout
    assert "bringing testbed tbq up" in proc.stderr
    rows = check_outputs(out, quick=True)
    assert [r for r in rows if r["status"] == SKIPPED] == []
    assert {r["section"] for r in rows} == {"codecs", "efficiency", "memory", "orchestration"}
    assert leftovers(PREFIX) == [], "a testbed the bench brought up is down again"
    assert (out / "worker.log").exists()


def test_bench_leaves_a_running_testbed_up_with_its_shaping(bench_inventory, tmp_path):
    run_cli(bench_inventory, "up", "--no-server")
    run_cli(bench_inventory, "shape", "--up-rate", "30mbit", "--down-rate", "20mbit")
    out = tmp_path / "bench"
    run_cli(bench_inventory, "bench", "--quick", "--out", str(out), timeout=900)
    rows = check_outputs(out, quick=True)
    assert [r for r in rows if r["status"] == SKIPPED] == []
    status = json.loads(run_cli(bench_inventory, "status", "--json").stdout)
    assert status["up"] is True
    assert status["shaping"]["up (client->server)"]["htb"]["rate"] == 30_000_000
    assert status["shaping"]["down (server->client)"]["htb"]["rate"] == 20_000_000
    assert status["services"] == {"iperf3": True, "offload": False, "grpc": False}, "its server is stopped"
    assert status["client_cpu"]["in_force"]["fraction"] == pytest.approx(0.5), "the CPU limit stays"
