"""A dataset fetch against a real server (gunicorn on loopback): every byte of the dataset arrives
with each transfer setting, through the trial worker as a sweep runs it; a missing dataset fails the
trial with the server's reason."""

from __future__ import annotations

import pytest

from benchmarks.loopback import stop
from client.fetch import fetch_dataset
from client.worker import TrialWorker
from contracts.datasets import DATASETS, generate
from contracts.processes import group_alive
from contracts.worker_api import TrialSpec
from tests.servers import start_server


@pytest.fixture(scope="module")
def dataset_server(tmp_path_factory):
    root = tmp_path_factory.mktemp("datasets")
    generate(root, ["image", "video"], seed=2)
    server = start_server(tmp_path_factory.mktemp("server"), "--datasets", str(root), "--threads", "40")
    try:
        yield server
    finally:
        stop(server.proc)
        assert not group_alive(server.proc.pid), server.log_text()


@pytest.mark.parametrize("concurrency, parallelism, io_kb", [(1, 1, None), (4, 1, 1), (1, 8, 64), (3, 4, 16)])
def test_every_byte_arrives_with_every_setting(dataset_server, concurrency, parallelism, io_kb):
    got = fetch_dataset(dataset_server.url, "image", 2, concurrency, parallelism, io_kb, timeout=60)
    assert got.bytes_down == DATASETS["image"].total(2) and got.seconds > 0
    assert got.requests == DATASETS["image"].files * parallelism
    assert 100 * got.requests < got.bytes_up < 1000 * got.requests  # request lines and headers


def test_the_worker_runs_a_fetch_as_a_trial(dataset_server):
    worker = TrialWorker(dataset_server.url, seed=2, timeout=60)
    spec = TrialSpec(trial=3, op="fetch", size=4, dtype="float64", method="http", parallelism=2,
                     io_kb=4, concurrency=2, dataset="video")  # fmt: skip
    result = worker.run(spec)
    assert result.ok, result.error
    assert result.bytes_down == DATASETS["video"].total(2)
    assert result.t_total == result.t_comm == result.t_request > 0
    missing = worker.run(
        TrialSpec(trial=4, op="fetch", size=48, dtype="float64", method="http", dataset="html")
    )
    assert not missing.ok and "dataset not generated" in missing.error
    wrong_seed = TrialWorker(dataset_server.url, seed=3, timeout=60).run(spec)
    assert not wrong_seed.ok and "from this seed" in wrong_seed.error
