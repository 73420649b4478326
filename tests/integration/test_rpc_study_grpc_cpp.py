"""The C++ gRPC server (server/cpp, `offload-server-cpp`) answers the lightweight-RPC study's service
`rpcstudy.v1.Study` beside `offload.v1.Offload/Execute`, as the Python gRPC server does
(server/rpc_study_grpc.py): every method's values, the decode, compute and encode stages in the
`server-timing` trailer, the refusals (a request that does not parse and a negative count
INVALID_ARGUMENT, a reply past --max-body-mb RESOURCE_EXHAUSTED) each followed by a good call, an
unknown study method UNIMPLEMENTED, and Execute still answering."""

from __future__ import annotations

import shutil
import subprocess

import grpc
import numpy as np
import pytest

from benchmarks.loopback import free_port, stop
from client.grpc_offload import GrpcOffloadClient, ready
from client.grpc_study_call import GrpcStudyClient
from client.offload import check_result, local
from client.tagless_call import CallRefused
from contracts.rpc_study_proto import method_path, to_proto
from contracts.stages import parse_server_timing
from tests.helpers import REPO

SOURCE = REPO / "server/cpp"
BINARY = SOURCE / "build/offload-server-cpp"
RAND_MAX = (1 << 31) - 1
SIZES = (128, 256, 512, 1024, 2048, 4096, 8192)
pytestmark = pytest.mark.skipif(
    not (shutil.which("make") and shutil.which("protoc")),
    reason="make, protoc and Debian's gRPC packages build server/cpp (scripts/setup.sh installs them)",
)


@pytest.fixture(scope="module")
def target(tmp_path_factory):
    subprocess.run(["make", "-C", str(SOURCE)], check=True, capture_output=True, timeout=600)
    port = free_port()
    log = tmp_path_factory.mktemp("cpp-grpc") / "server.log"
    with log.open("wb") as err:
        argv = [str(BINARY), "--bind", "127.0.0.1", "--port", str(port), "--max-body-mb", "1"]
        proc = subprocess.Popen(argv, start_new_session=True, stderr=err)
    address = f"127.0.0.1:{port}"
    try:
        assert ready(address, 30), f"the C++ gRPC server did not come up: {log.read_text()}"
        yield address
    finally:
        stop(proc)


def good_call(client: GrpcStudyClient) -> None:
    assert client.call("SayHello", ("again",)).values == ("Hello again",)


def test_every_method_answers_as_the_python_server(target):
    rng = np.random.default_rng(7)
    with GrpcStudyClient(target) as client:
        assert client.call("SayHello", ("world",)).values == ("Hello world",)
        assert client.call("SayHello", ("",)).values == ("Hello ",)
        assert client.call("SayHello", ("grüße, 世界",)).values == ("Hello grüße, 世界",)
        assert client.call("Average", (np.arange(10, dtype=np.int32),)).values == (4.5,)
        assert client.call("Average", ([],)).values == (0.0,)
        values = rng.integers(-(1 << 31), 1 << 31, 20000, dtype=np.int64).astype(np.int32)
        (mean,) = client.call("Average", (values,)).values
        assert mean == float(values.mean(dtype=np.float64))
        assert client.call("GetRandNums", (0,)).values == ([],)
        (numbers,) = client.call("GetRandNums", (5000,)).values
        assert len(numbers) == 5000 and min(numbers) >= 0 and max(numbers) <= RAND_MAX
        assert len(set(numbers)) > 4900  # drawn, not a constant
        n = ((1 << 20) - 10) // 5  # the most whose reply stays within 1 MiB at a varint's 5 bytes a value
        (limit,) = client.call("GetRandNums", (n,)).values
        assert len(limit) == n
        for k in SIZES:
            sent = rng.integers(-(1 << 31), 1 << 31, k).tolist()
            sent[::7] = [0] * len(sent[::7])  # zeros are omitted on the wire and still come back
            assert client.call(f"SendRcvLargeData{k}", tuple(sent)).values == tuple(sent)


def test_replies_are_the_bytes_protobufs_own_serializer_writes(target):
    rng = np.random.default_rng(3)
    channel = grpc.insecure_channel(target)
    try:
        for k in SIZES:
            sent = rng.integers(-(1 << 31), 1 << 31, k).tolist()
            sent[1::5] = [0] * len(sent[1::5])
            body = to_proto(f"LargeData{k}", tuple(sent)).SerializeToString()
            assert channel.unary_unary(method_path(f"SendRcvLargeData{k}"))(body, timeout=30) == body
        body = to_proto("Hello", ("world",)).SerializeToString()
        expected = to_proto("Greeting", ("Hello world",)).SerializeToString()
        assert channel.unary_unary(method_path("SayHello"))(body, timeout=30) == expected
        body = to_proto("Numbers", ([1, 2, 3, 4],)).SerializeToString()
        expected = to_proto("Mean", (2.5,)).SerializeToString()
        assert channel.unary_unary(method_path("Average"))(body, timeout=30) == expected
    finally:
        channel.close()


def test_each_call_reports_decode_compute_and_encode(target):
    for persistent in (True, False):
        with GrpcStudyClient(target, persistent=persistent) as client:
            for method, values in (
                ("SayHello", ("world",)),
                ("Average", (np.arange(50000, dtype=np.int32),)),
                ("GetRandNums", (1000,)),
                ("SendRcvLargeData8192", tuple(range(8192))),
            ):
                t = client.call(method, values, timing=True).timing
                assert min(t.decode_wall, t.compute_wall, t.encode_wall) >= 0
                assert max(t.decode_wall, t.compute_wall, t.encode_wall) < 1
                assert min(t.decode_cpu, t.compute_cpu, t.encode_cpu) >= 0
    channel = grpc.insecure_channel(target)
    _, call = channel.unary_unary(method_path("SendRcvLargeData8192")).with_call(b"", timeout=30)
    header = dict(call.trailing_metadata())["server-timing"]
    assert [s.split(";")[0] for s in header.split(", ")] == ["decode", "compute", "encode"]
    assert set(parse_server_timing(header, "dur")) == set(parse_server_timing(header, "cpu"))
    channel.close()


def test_refusals_are_statuses_and_a_good_call_follows_each(target):
    with GrpcStudyClient(target) as client:
        with pytest.raises(CallRefused, match="INVALID_ARGUMENT") as refused:
            client.call("GetRandNums", (-3,))
        assert refused.value.name == "INVALID_ARGUMENT"
        good_call(client)
        with pytest.raises(CallRefused, match="RESOURCE_EXHAUSTED") as refused:
            client.call("GetRandNums", (((1 << 20) - 10) // 5 + 1,))  # one value past the 1 MiB limit
        assert refused.value.name == "RESOURCE_EXHAUSTED"
        good_call(client)
    channel = grpc.insecure_channel(target)
    try:
        for method, body in (
            ("SayHello", b"\x0a\x05ab"),  # a string cut short
            ("SayHello", b"\x0a\x02\xff\xfe"),  # not UTF-8: proto3 refuses it
            ("Average", b"\x0a\x03\x01"),  # a packed list cut short
            ("GetRandNums", b"\x08"),  # a varint missing
            ("SendRcvLargeData128", b"\x00\x01"),  # tag 0
            ("SendRcvLargeData8192", b"\x80"),  # a tag cut short
        ):
            with pytest.raises(grpc.RpcError) as refused:
                channel.unary_unary(method_path(method)).with_call(body, timeout=30)
            assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT, method
            assert "does not parse" in refused.value.details()
            header = dict(refused.value.trailing_metadata())["server-timing"]
            assert header.startswith("decode;dur=")
            with GrpcStudyClient(target) as client:
                good_call(client)
        with pytest.raises(grpc.RpcError) as refused:
            channel.unary_unary("/rpcstudy.v1.Study/NoSuchMethod")(b"", timeout=30)
        assert refused.value.code() == grpc.StatusCode.UNIMPLEMENTED
        # unknown fields are skipped, as a generated parser skips them
        reply = channel.unary_unary(method_path("SayHello"))(b"\x10\x05\x0a\x01x\x1a\x00", timeout=30)
        assert reply == b"\x0a\x07Hello x"
    finally:
        channel.close()


def test_execute_still_answers_beside_the_study(target):
    operands = [np.arange(1.0, 5.0).reshape(2, 2), np.eye(2)]
    with GrpcOffloadClient(target, timeout=30) as client:
        result, t = client.offload("mul", operands)
        check_result(result, local("mul", operands)[0])
        assert min(t.t_server_decode, t.t_server_compute, t.t_server_encode) > 0
    with GrpcStudyClient(target) as client:
        good_call(client)
