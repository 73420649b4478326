"""The protobuf codec and its generated code: exact wire fields, every refusal, and regeneration."""

from __future__ import annotations

import filecmp
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from client.calibration_work import works
from contracts import offload_pb2 as pb
from contracts.codecs import CODECS, CodecError, get_codec
from contracts.errors import UserError
from contracts.stages import method_codec
from testbed.devices import load_device
from testbed.overrides import override

REPO = Path(__file__).resolve().parents[2]
CODEC = get_codec("protobuf")
GENERATED = ("contracts/offload_pb2.py", "contracts/offload_pb2_grpc.py")


def test_registered_with_its_content_type():
    assert CODECS["protobuf"] is CODEC
    _, headers = CODEC.encode_request([np.eye(2)])
    assert headers == {"Content-Type": "application/x-protobuf"}


def test_floats_travel_in_values_and_integers_in_ints_row_major():
    f = np.array([[1.5, -0.0, 1e308], [5e-324, np.nan, -np.inf]])
    msg = pb.OpRequest.FromString(CODEC.encode_op_request("log", [f]))
    (m,) = msg.operands
    assert (msg.op, m.rows, m.cols, m.dtype, list(m.ints)) == ("log", 2, 3, "float64", [])
    assert np.array_equal(np.array(m.values), f.ravel(), equal_nan=True)
    i = np.array([[np.iinfo(np.int64).min, 0], [-1, np.iinfo(np.int64).max]], dtype=np.int64)
    (m,) = pb.OpRequest.FromString(CODEC.encode_op_request("mul", [i])).operands
    assert (m.dtype, list(m.values), list(m.ints)) == ("int64", [], i.ravel().tolist())


@pytest.mark.parametrize("dtype", ["float64", "int32", "int64"])
@pytest.mark.parametrize("shape", [(1, 1), (1, 7), (7, 1), (3, 5)])
def test_round_trip_keeps_shape_dtype_and_values(dtype, shape):
    rng = np.random.default_rng(1)
    if dtype == "float64":
        a = rng.standard_normal(shape)
    else:
        info = np.iinfo(dtype)
        a = rng.integers(info.min, info.max, shape, dtype=dtype, endpoint=True)
        a.flat[0] = info.min
    body, headers = CODEC.encode_request([a, a.T])
    op, (x, y) = CODEC.decode_op_request(body, headers)
    assert op == ""
    assert (
        x.dtype == y.dtype == np.dtype(dtype).newbyteorder("<")
        and x.shape == shape
        and y.shape == shape[::-1]
    )
    assert np.array_equal(x, a) and np.array_equal(y, a.T)
    out, headers = CODEC.encode_response(a)
    r = CODEC.decode_response(out, headers)
    assert r.dtype == a.dtype and np.array_equal(r, a)


def test_an_absent_dtype_means_float64():
    body = pb.OpRequest(operands=[pb.Matrix(rows=1, cols=2, values=[1.0, 2.0])]).SerializeToString()
    (a,) = CODEC.decode_request(body, {})
    assert a.dtype == np.float64 and a.tolist() == [[1.0, 2.0]]


def _req(*matrices: pb.Matrix) -> bytes:
    return pb.OpRequest(op="mul", operands=list(matrices)).SerializeToString()


@pytest.mark.parametrize(
    ("body", "error"),
    [
        (b"\xff\xff\xff", "malformed protobuf"),
        (b"\x12\x05\x08", "malformed protobuf"),  # a truncated operand
        (_req(pb.Matrix(rows=2, cols=2, values=[1.0, 2.0, 3.0])), "entry count mismatch"),
        (_req(pb.Matrix(rows=0, cols=2)), "bad shape"),
        (_req(pb.Matrix(rows=1, cols=1, dtype="float32", values=[1.0])), "bad dtype"),
        (_req(pb.Matrix(rows=1, cols=1, dtype="int32", values=[1.0])), "malformed body"),
        (_req(pb.Matrix(rows=1, cols=1, values=[1.0], ints=[1])), "malformed body"),
        (_req(pb.Matrix(rows=1, cols=1, dtype="int32", ints=[1 << 31])), "integer out of range"),
        (_req(*[pb.Matrix(rows=1, cols=1, values=[1.0])] * 17), "too many operands"),
        (_req(pb.Matrix(rows=4_000_000_000, cols=4_000_000_000, values=[1.0])), "entry count mismatch"),
    ],
)
def test_decoder_refuses(body, error):
    with pytest.raises(CodecError) as exc:
        CODEC.decode_request(body, {})
    assert exc.value.error == error


def test_response_decoder_refuses_a_reply_without_result():
    with pytest.raises(CodecError, match="no result"):
        CODEC.decode_response(pb.OpReply().SerializeToString(), {})
    with pytest.raises(CodecError, match="malformed protobuf"):
        CODEC.decode_response(b"\x0a\xff", {})


def test_other_codecs_name_no_op_in_the_body():
    body, headers = get_codec("raw").encode_request([np.eye(2)])
    op, (a,) = get_codec("raw").decode_op_request(body.tobytes(), headers)
    assert op == "" and np.array_equal(a, np.eye(2))


def test_generated_code_is_exactly_what_protoc_writes(tmp_path):
    """Regenerating with the official compiler gives the committed files byte for byte."""
    subprocess.run(
        ["bash", str(REPO / "scripts/gen-proto.sh"), str(tmp_path)],
        check=True,
        env={"PYTHON": sys.executable, "PATH": "/usr/bin:/bin"},
    )
    for name in GENERATED:
        assert filecmp.cmp(tmp_path / name, REPO / name, shallow=False), (
            f"{name} differs from protoc's output"
        )


def test_the_stub_imports_the_messages_as_a_package():
    text = (REPO / GENERATED[1]).read_text()
    assert "from contracts import offload_pb2" in text
    assert pb.DESCRIPTOR.services_by_name["Offload"].full_name == "offload.v1.Offload"


# ------------------------------------------------------------------ grpc: a method marshalled as protobuf
def test_protobuf_and_grpc_are_methods_of_an_experiment():
    flags = {"ops": "mul", "sizes": "64", "rates": "20", "methods": "json,raw,protobuf,grpc", "reps": 2}
    assert override(None, flags).methods == ("json", "raw", "protobuf", "grpc")
    with pytest.raises(UserError, match="grpcc"):
        override(None, {**flags, "methods": "grpcc"})


def test_a_device_times_grpc_with_its_protobuf_figures(tmp_path):
    device = load_device("paper-p4")
    assert device.marshal_s("grpc", "encode", 8e6) == device.marshal_s("protobuf", "encode", 8e6) > 0
    without = tmp_path / "dev.yaml"
    without.write_text("kernels: {mul: 1.0}\nmarshalling:\n  json: {encode: 1, decode: 1}\n")
    assert load_device(without).missing(["mul"], ["json", "grpc", "protobuf", "local"]) == [
        "marshalling.protobuf"
    ]


def test_calibration_times_grpc_as_the_protobuf_codec():
    kinds = {(kind, codec) for kind, codec, _, _ in works("mul", 8, "float64", 1, ["grpc"])}
    assert kinds == {("kernel", None), ("encode", "grpc"), ("decode", "grpc")}
    assert {m: method_codec(m) for m in ("grpc", "protobuf", "json")} == {
        "grpc": "protobuf",
        "protobuf": "protobuf",
        "json": "json",
    }


@pytest.mark.parametrize("dtype", ["float64", "int32", "int64"])
def test_max_response_bytes_bounds_the_real_reply(dtype):
    info = np.finfo(dtype) if dtype == "float64" else np.iinfo(dtype)
    worst = np.full((7, 5), info.min, dtype=dtype)  # the longest varints
    out, _ = CODEC.encode_response(worst)
    assert len(out) <= CODEC.max_response_bytes((7, 5), np.dtype(dtype))
