"""A task stream for real: the trace replayed on the appliance while the client's worker runs each
task, per policy, then the analysis of `tasks.csv`; the testbed is down afterwards."""

from __future__ import annotations

import pandas as pd
import pytest

from contracts.tasks import TASKS_FILE, read_tasks
from tests.helpers import run_cli
from tests.synthetic import write_synthetic_run

pytestmark = pytest.mark.privileged

TRACE = "t_s,up_mbps,down_mbps\n0,50,50\n1,5,5\n2,5,5\n"


def test_a_stream_runs_every_policy_on_the_replayed_trace(inventory, lease, tmp_path):
    # the online policy's model: a synthetic sweep's (the devices: this host, as that run had none)
    model = write_synthetic_run(tmp_path / "model", sizes=(100, 200, 300), methods=("raw",))
    (tmp_path / "t.csv").write_text(TRACE)
    stream = tmp_path / "s.yaml"
    stream.write_text(
        "name: s\ntrace: t.csv\ntasks: {count: 5, mean_gap_s: 0.4, ops: [mul], sizes: [100, 200]}\n"
        "methods: [raw]\npolicies: [local, remote, online]\nestimator: {window: 2, stale_s: 1, probe_size: 50}\n"
    )
    results = tmp_path / "results"
    proc = run_cli(inventory, "stream", str(stream), "--model", str(model), "--results", str(results))
    (run_dir,) = results.iterdir()
    tasks = read_tasks(run_dir / TASKS_FILE)
    assert [t.policy for t in tasks] == ["local"] * 5 + ["remote-raw"] * 5 + ["online-raw"] * 5, proc.stdout
    assert all(t.ok for t in tasks), [t.error for t in tasks if not t.ok]
    remote = [t for t in tasks if t.policy == "remote-raw"]
    assert all(t.bytes_up and t.t_comm > 0 for t in remote)  # they went over the shaped link
    assert {t.trace_up_mbps for t in tasks} <= {50.0, 5.0}
    metrics = pd.read_csv(run_dir / "analysis" / "online.csv")
    assert set(metrics["policy"]) == {"local", "remote-raw", "online-raw"}
    assert (metrics["regret_s"] >= -1e-9).all()  # no policy beats the per-task hindsight oracle
    assert "testbed: error" not in proc.stderr
