"""The transfer settings against a real server: one request over P connections and the client's
writes of a given size give the same result, byte for byte, and the same stage times' shape."""

from __future__ import annotations

import numpy as np
import pytest
import requests

from client.offload import OffloadClient, check_result, local, make_operands
from tests.servers import assert_healthy


@pytest.mark.parametrize("codec", ["raw", "json"])
@pytest.mark.parametrize("parallelism, io_bytes", [(1, 4096), (2, None), (4, 1000), (7, 65536)])
def test_one_request_over_several_connections_is_the_same_request(server, codec, parallelism, io_bytes):
    operands = make_operands("mul", 120, "float64", np.random.default_rng(parallelism))
    with OffloadClient(server.url) as plain:
        _, alone = plain.offload("mul", operands, codec)
    with OffloadClient(server.url, parallelism=parallelism, io_bytes=io_bytes, persistent=False) as split:
        result, stages = split.offload("mul", operands, codec)
    check_result(result, local("mul", operands)[0])
    if codec == "raw":
        assert np.array_equal(result, operands[0] @ operands[1])  # byte for byte: the same float64s
    assert (stages.bytes_up, stages.bytes_down) == (alone.bytes_up, alone.bytes_down)
    assert stages.t_server_compute > 0 and stages.t_comm > 0
    assert_healthy(server.url)


def test_a_malformed_part_is_a_json_400_and_the_server_keeps_serving(server):
    resp = requests.post(
        f"{server.url}/v1/ops/mul",
        data=b"{}",
        headers={"X-Codec": "json", "X-Transfer": "t", "X-Part": "5/4"},
        timeout=30,
    )
    assert resp.status_code == 400 and resp.json()["error"] == "bad part"
    assert "need 1 <= i <= P" in resp.json()["detail"]
    assert_healthy(server.url)
