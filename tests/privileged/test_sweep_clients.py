"""A sweep with three clients on the embedded testbed for real: their namespaces and workers, the
shared link, the paced server's work slot and its queue, the rows' `client` and `clients`, and the
analysis of contention; `down` leaves nothing of any client."""

from __future__ import annotations

import pytest

from tests.helpers import rows, run_cli
from tests.isolation import leftovers

pytestmark = pytest.mark.privileged

EXPERIMENT = """\
name: clients
ops: [mul]
sizes: [400]
rates: [20]
methods: [raw]
reps: 2
warmup: 0
clients:
  - {device: paper-p4, count: 3}
contention: [1, 3]
server_device: paper-i3
server_workers: 1
validation: {enabled: true, duration: 2, retries: 2, tolerance_pct: 20}
"""


def test_a_sweep_with_three_clients_runs_each_cell_on_them_at_once(inventory, lease, tmp_path):
    results = tmp_path / "results"
    exp = tmp_path / "clients.yaml"
    exp.write_text(EXPERIMENT)
    out = run_cli(inventory, "sweep", str(exp), "--results", str(results), timeout=1800).stdout
    assert "3 clients, 1/3 offloading at once, 1 server worker(s)" in out and "sweep complete" in out
    (run_dir,) = results.iterdir()
    got = rows(run_dir)
    assert all(r["ok"] == "true" for r in got), [r["error"] for r in got if r["ok"] != "true"]
    local = [r for r in got if r["method"] == "local"]
    remote = [r for r in got if r["method"] == "raw"]
    assert len(local) == 2 and len(remote) == 2 * (1 + 3)
    assert sorted((r["clients"], r["client"]) for r in remote) == sorted(
        [("1", "1")] * 2 + [("3", str(c)) for c in (1, 2, 3)] * 2
    )
    for r in remote:  # the paced server's stages last paper-i3's times; its work slot's wait is queue
        assert float(r["t_server_queue"]) >= 0
        comm = float(r["t_request"]) - float(r["t_server_queue"])
        comm -= sum(float(r[f"t_server_{s}"]) for s in ("decode", "compute", "encode"))
        assert float(r["t_comm"]) == pytest.approx(comm, abs=1e-6)
    # three at once on one link (and one server slot): each request took longer. Means, not every
    # trial: in closed loop the clients drift apart, so a request may find the link to itself
    alone = [float(r["t_request"]) for r in remote if r["clients"] == "1"]
    shared = [float(r["t_request"]) for r in remote if r["clients"] == "3"]
    assert sum(shared) / len(shared) > 1.5 * sum(alone) / len(alone), (alone, shared)
    assert (run_dir / "worker-client3.log").exists()
    assert (run_dir / "analysis" / "contention.csv").exists()
    assert "several clients" in out
    assert leftovers(lease.prefix) == []  # the sweep brought the testbed up, and took every client down
