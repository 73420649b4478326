"""The connection policy against real servers (gunicorn over HTTP, the gRPC server), counted by a TCP
relay in front of them: `per-trial` opens one connection per trial on both transports, `persistent`
one for all; the trial worker records the policy on every remote trial."""

from __future__ import annotations

from urllib.parse import urlsplit

import numpy as np
import pytest

from client.grpc_offload import GrpcOffloadClient
from client.offload import OffloadClient, make_operands
from client.worker import TrialWorker
from contracts.stages import PER_TRIAL, PERSISTENT
from contracts.worker_api import TrialSpec

TRIALS = 3


@pytest.mark.parametrize(("persistent", "connections"), [(False, TRIALS), (True, 1)])
def test_http_opens_a_connection_per_trial_unless_persistent(served, proxy, persistent, connections):
    server, _ = served
    url = urlsplit(server.url)
    relay = proxy(url.hostname, url.port)
    operands = make_operands("mul", 40, "float64", np.random.default_rng(1))
    with OffloadClient(f"http://127.0.0.1:{relay.port}", timeout=30, persistent=persistent) as client:
        for _ in range(TRIALS):
            _, times = client.offload("mul", operands, "raw")
            assert times.t_comm > 0
    assert relay.accepted == connections


@pytest.mark.parametrize(("persistent", "connections"), [(False, TRIALS), (True, 1)])
def test_grpc_opens_a_connection_per_trial_unless_persistent(served, proxy, persistent, connections):
    _, target = served
    host, port = target.rsplit(":", 1)
    relay = proxy(host, int(port))
    operands = make_operands("mul", 40, "float64", np.random.default_rng(1))
    with GrpcOffloadClient(f"127.0.0.1:{relay.port}", timeout=30, persistent=persistent) as client:
        for _ in range(TRIALS):
            client.offload("mul", operands)
    assert relay.accepted == connections


@pytest.mark.parametrize("connection", [PER_TRIAL, PERSISTENT])
def test_the_worker_records_its_connection_policy_on_remote_trials_only(served, connection):
    server, target = served
    worker = TrialWorker(server.url, 1, 30.0, grpc_target=target, connection=connection)
    for method in ("json", "grpc"):
        out = worker.run(TrialSpec(1, "mul", 30, "float64", method)).to_json()
        assert out["ok"] and out["connection"] == connection, out
    local = worker.run(TrialSpec(2, "mul", 30, "float64", "local")).to_json()
    assert local["ok"] and "connection" not in local
