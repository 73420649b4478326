"""A sweep with a client's concurrent requests on the embedded testbed for real: a worker per request
stream on the one client host, the device's core shared by their paced stages, the paced server's
work slot, the rows' `concurrency` and `stream`; `down` leaves nothing."""

from __future__ import annotations

import pytest

from tests.helpers import rows, run_cli
from tests.isolation import leftovers

pytestmark = pytest.mark.privileged

EXPERIMENT = """\
name: concurrency
ops: [mul]
sizes: [400]
rates: [20]
methods: [json]
reps: 2
warmup: 0
client_device: paper-p4
concurrency: [1, 2]
server_device: paper-i3
server_workers: 1
validation: {enabled: true, duration: 2, retries: 2, tolerance_pct: 20}
"""


def test_a_sweep_runs_a_clients_concurrent_requests_on_its_one_core(inventory, lease, tmp_path):
    results = tmp_path / "results"
    exp = tmp_path / "concurrency.yaml"
    exp.write_text(EXPERIMENT)
    out = run_cli(inventory, "sweep", str(exp), "--results", str(results), timeout=1800).stdout
    assert "1/2 request(s) outstanding per client" in out and "sweep complete" in out
    (run_dir,) = results.iterdir()
    got = rows(run_dir)
    assert all(r["ok"] == "true" for r in got), [r["error"] for r in got if r["ok"] != "true"]
    remote = [r for r in got if r["method"] == "json"]
    assert sorted((r["concurrency"], r["stream"]) for r in remote) == sorted(
        [("1", "1")] * 2 + [("2", "1"), ("2", "2")] * 2
    )
    # paper-p4's JSON encode of mul 400 takes it most of a second (the paper's figure); paced, each
    # stage lasts that long, and two requests at once take turns on its one core: the later waits
    alone = [float(r["t_client_encode"]) for r in remote if r["concurrency"] == "1"]
    both = sorted(float(r["t_client_encode"]) for r in remote if r["concurrency"] == "2")
    assert min(alone) > 0.3, alone
    assert both[-1] > 1.5 * min(alone), (alone, both)
    assert (run_dir / "worker-client-2.log").exists()
    assert leftovers(lease.prefix) == []
