"""The lightweight-RPC study's service over gRPC, end to end: a real `python -m server.grpc_service`
on loopback answers `rpcstudy.v1.Study` beside Execute, with the same values as the tagless server,
its stage times in `server-timing`, its refusals; and the bytes a LargeData call's messages take each
way against the tagless transport's."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from benchmarks.loopback import free_port, stop
from client.grpc_offload import ready
from client.grpc_study_call import GRPC_PREFIX, GrpcStudyClient
from client.tagless_call import CallRefused
from contracts.tagless import HEADER
from tests.helpers import REPO


@pytest.fixture(scope="module")
def grpc_target():
    port = free_port()
    argv = [sys.executable, "-m", "server.grpc_service", "--port", str(port), "--max-body-mb", "1"]
    proc = subprocess.Popen(argv, cwd=REPO, start_new_session=True, stderr=subprocess.DEVNULL)
    target = f"127.0.0.1:{port}"
    try:
        assert ready(target, 30), "the gRPC server did not come up"
        yield target
    finally:
        stop(proc)


def test_the_four_operations_answer_as_over_tagless(grpc_target):
    with GrpcStudyClient(grpc_target) as client:
        assert client.call("SayHello", ("world",)).values == ("Hello world",)
        assert client.call("Average", (np.arange(10, dtype=np.int32),)).values == (4.5,)
        (numbers,) = client.call("GetRandNums", (5000,)).values
        assert len(numbers) == 5000 and min(numbers) >= 0 and max(numbers) <= (1 << 31) - 1
        values = tuple(np.random.default_rng(2).integers(0, 1 << 31, 1024).tolist())
        assert client.call("SendRcvLargeData1024", values).values == values


def test_each_call_reports_its_stages_and_a_connection_per_call_works_too(grpc_target):
    for persistent in (True, False):
        with GrpcStudyClient(grpc_target, persistent=persistent) as client:
            reply = client.call("Average", (np.arange(50000, dtype=np.int32),), timing=True)
        t = reply.timing
        assert reply.values == (24999.5,)
        assert 1e-6 < t.decode_wall < 1 and 1e-6 < t.compute_wall < 1 and 0 <= t.encode_cpu < 1


def test_refusals_are_statuses_and_the_server_goes_on(grpc_target):
    with GrpcStudyClient(grpc_target) as client:
        with pytest.raises(CallRefused, match="INVALID_ARGUMENT") as refused:
            client.call("GetRandNums", (-3,))
        assert refused.value.name == "INVALID_ARGUMENT"
        with pytest.raises(CallRefused, match="RESOURCE_EXHAUSTED"):
            client.call("GetRandNums", (1 << 20,))  # a 4 MiB reply past the 1 MiB limit
        assert client.call("SayHello", ("on",)).values == ("Hello on",)


def test_largedata_messages_carry_a_tag_per_member_over_grpc_and_none_over_tagless(grpc_target):
    """The study's Fig. 9d in messages: random 32-bit values are 4 bytes tagless and mostly 5 as
    varints, plus a tag of 1-3 bytes each (fields 1..15, ..2047, ..8192)."""
    rng = np.random.default_rng(3)
    with GrpcStudyClient(grpc_target) as client:
        for k in (128, 8192):
            values = tuple(rng.integers(0, 1 << 31, k).tolist())
            reply = client.call(f"SendRcvLargeData{k}", values)
            tagless = HEADER.size + 4 * k
            per_member = (reply.bytes_up - GRPC_PREFIX - 4 * k) / k
            assert reply.bytes_up == reply.bytes_down
            assert per_member >= (1.9 if k == 128 else 3.5), per_member  # tags and varints' 5th bytes
            assert reply.bytes_up - tagless >= 2 * k
