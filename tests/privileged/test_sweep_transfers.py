"""A transfer sweep on the embedded testbed for real (issue 48 item 4): the datasets generated on the
server host and served by its offload server, each fetched by the client's worker over the shaped
link with each setting, a row per fetch with its dataset, bytes and seconds, the transfer analysis
from the rows (throughput at most the link's rate, energy per 100 MB from the device's figures), and
`down` leaves nothing."""

from __future__ import annotations

import csv

import pytest

from contracts.datasets import DATASETS
from tests.helpers import rows, run_cli
from tests.isolation import leftovers

pytestmark = pytest.mark.privileged

EXPERIMENT = """\
name: transfers
datasets: [image, video]
rates: [20]
concurrency: [1, 2]
parallelism: [1, 4]
io_kb: [16]
reps: 1
warmup: 0
seed: 5
client_device: multilang-snapdragon600
validation: {enabled: true, duration: 2, retries: 2, tolerance_pct: 20}
"""


def test_a_transfer_sweep_fetches_every_dataset_with_every_setting(inventory, lease, tmp_path):
    results = tmp_path / "results"
    exp = tmp_path / "transfers.yaml"
    exp.write_text(EXPERIMENT)
    out = run_cli(inventory, "sweep", str(exp), "--results", str(results), timeout=1200).stdout
    assert "sweep complete" in out, out
    (run_dir,) = results.iterdir()
    got = rows(run_dir)
    assert all(r["ok"] == "true" for r in got), [r["error"] for r in got if r["ok"] != "true"]
    assert sorted((r["dataset"], r["concurrency"], r["parallelism"]) for r in got) == sorted(
        (d, c, p) for d in ("image", "video") for c in ("1", "2") for p in ("1", "4")
    )
    for r in got:
        assert r["op"] == "fetch" and r["io_kb"] == "16" and int(r["size"]) == DATASETS[r["dataset"]].files
        assert int(r["bytes_down"]) == DATASETS[r["dataset"]].total(5)
        mbps = int(r["bytes_down"]) * 8 / float(r["t_total"]) / 1e6
        assert 3 < mbps < 20.5, r  # through the 20 Mbit/s link, not around it
    with open(run_dir / "analysis" / "transfers.csv", newline="") as f:
        table = list(csv.DictReader(f))
    assert len(table) == 8 and all(float(t["energy_per_100mb_j"]) > 0 for t in table)
    assert "Transfer analysis" in (run_dir / "analysis" / "report.html").read_text()
    assert "video @ 20 Mbit/s: concurrency 1 -> 2" in out
    run_cli(inventory, "down")
    assert leftovers(lease.prefix) == []
