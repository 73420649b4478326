"""Codecs: property-based round trips for every codec, every refusal of the decoders, proof that no
path unpickles or evaluates, and the Server-Timing header."""

from __future__ import annotations

import ast
import builtins
import json
import pickle
import zlib
from pathlib import Path

import msgpack
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from contracts.codecs import (
    CODECS,
    DEFAULT_CODEC,
    MAX_INFLATED_BYTES,
    Buffers,
    CodecError,
    UnknownCodec,
    body_bytes,
    get_codec,
)
from contracts.ops import DTYPES
from contracts.stages import parse_server_timing
from contracts.wire import parse_shapes
from server.timing import StageClock

REPO = Path(__file__).resolve().parents[2]
JSON_CODECS = ["json", "ujson", "orjson"]
BINARY_CODECS = [name for name in CODECS if name not in JSON_CODECS]
EDGE_FLOATS = [0.0, -0.0, -1.5, 1e308, -1.7976931348623157e308, 5e-324, -2.2250738585072014e-308, 0.1 + 0.2]


def elements(dtype: str, finite: bool):
    if dtype == "float64":
        return st.one_of(
            st.sampled_from(EDGE_FLOATS), st.floats(allow_nan=not finite, allow_infinity=not finite)
        )
    info = np.iinfo(dtype)
    return st.one_of(
        st.sampled_from([0, -1, int(info.min), int(info.max)]), st.integers(int(info.min), int(info.max))
    )


@st.composite
def matrices(draw, finite: bool = True, count: tuple[int, int] = (1, 3)):
    """1 to 3 matrices of one dtype, shapes from 1x1 up, square or not."""
    dtype = draw(st.sampled_from(DTYPES))
    n = draw(st.integers(*count))
    shapes = [(draw(st.integers(1, 6)), draw(st.integers(1, 6))) for _ in range(n)]
    return dtype, [draw(arrays(dtype, s, elements=elements(dtype, finite))) for s in shapes]


def same(a: np.ndarray, b: np.ndarray) -> bool:
    """Bit for bit: -0.0 keeps its sign, NaN its payload, the dtype its name."""
    return a.dtype.name == b.dtype.name and a.shape == b.shape and a.tobytes() == b.tobytes()


def wire(body) -> bytes:
    return body_bytes(body)


# ------------------------------------------------------------------ round trips
@pytest.mark.parametrize("name", list(CODECS))
@settings(max_examples=60, deadline=None)
@given(data=matrices())
def test_round_trip_finite(name, data):
    dtype, operands = data
    codec = CODECS[name]
    body, headers = codec.encode_request(operands)
    decoded = codec.decode_request(wire(body), headers)
    assert len(decoded) == len(operands) and all(map(same, decoded, operands))
    body, headers = codec.encode_response(operands[0])
    assert same(codec.decode_response(wire(body), headers), operands[0])


@pytest.mark.parametrize("name", BINARY_CODECS)
@settings(max_examples=40, deadline=None)
@given(data=matrices(finite=False))
def test_binary_codecs_carry_nan_and_inf(name, data):
    _, operands = data
    codec = CODECS[name]
    body, headers = codec.encode_request(operands)
    assert all(map(same, codec.decode_request(wire(body), headers), operands))
    body, headers = codec.encode_response(operands[-1])
    assert same(codec.decode_response(wire(body), headers), operands[-1])


@pytest.mark.parametrize("name", JSON_CODECS)
@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_json_codecs_refuse_non_finite(name, bad):
    a = np.array([[1.0, bad]])
    codec = CODECS[name]
    with pytest.raises(CodecError, match="NaN or infinity"):
        codec.encode_request([a])
    with pytest.raises(CodecError, match="NaN or infinity"):
        codec.encode_response(a)


@pytest.mark.parametrize("name", JSON_CODECS)
@pytest.mark.parametrize("text", ["NaN", "Infinity", "-Infinity", "1e400"])
def test_json_codecs_refuse_non_finite_on_the_wire(name, text):
    body = f'{{"operands": [[[1.0, {text}]]]}}'.encode()
    with pytest.raises(CodecError):
        CODECS[name].decode_request(body, {})
    with pytest.raises(CodecError):
        CODECS[name].decode_response(f'{{"result": [[{text}]]}}'.encode(), {})


def test_json_wire_format_is_plain_json():
    body, headers = CODECS["json"].encode_request(
        [np.array([[1.0, -0.0]]), np.array([[2], [3]], dtype=float)]
    )
    assert json.loads(body) == {"operands": [[[1.0, -0.0]], [[2.0], [3.0]]], "dtype": "float64"}
    assert headers["Content-Type"] == "application/json"
    body, _ = CODECS["orjson"].encode_response(np.array([[7, 8]], dtype=np.int32))
    assert json.loads(body) == {"result": [[7, 8]], "dtype": "int32"}
    # without "dtype" a body means float64, so a curl user can send integers for a float matrix
    assert same(CODECS["ujson"].decode_request(b'{"operands": [[[1, 2]]]}', {})[0], np.array([[1.0, 2.0]]))


@pytest.mark.parametrize("name", JSON_CODECS)
def test_json_codecs_agree_on_big_integer_literals(name):
    body = b'{"operands": [[[100000000000000000000000000000, 1]]]}'
    assert same(CODECS[name].decode_request(body, {})[0], np.array([[1e29, 1.0]]))


def test_raw_sends_the_operands_own_memory():
    a, b = np.ones((3, 4)), np.zeros((4, 2))
    body, headers = CODECS["raw"].encode_request([a, b])
    assert isinstance(body, Buffers) and len(body) == a.nbytes + b.nbytes
    assert [np.shares_memory(np.frombuffer(p, np.float64), x) for p, x in zip(body, (a, b), strict=True)] == [
        True,
        True,
    ]
    assert headers == {"Content-Type": "application/octet-stream", "X-Dtype": "float64", "X-Shape": "3x4,4x2"}
    decoded = CODECS["raw"].decode_request(body.tobytes(), {"x-shape": "3x4,4x2", "x-dtype": "float64"})
    assert all(map(same, decoded, (a, b)))


def test_encoding_normalizes_layout_and_checks_dtypes():
    fortran = np.asfortranarray(np.arange(6.0).reshape(2, 3))
    for name in CODECS:
        body, headers = CODECS[name].encode_request([fortran])
        assert same(CODECS[name].decode_request(wire(body), headers)[0], np.ascontiguousarray(fortran))
        body, headers = CODECS[name].encode_request([np.ones((2, 2))], dtype="int32")
        assert CODECS[name].decode_request(wire(body), headers)[0].dtype == np.int32
    with pytest.raises(CodecError, match="mixed dtypes"):
        CODECS["raw"].encode_request([np.ones((1, 1)), np.ones((1, 1), dtype=np.int32)])
    with pytest.raises(CodecError, match="bad dtype"):
        CODECS["raw"].encode_request([np.ones((1, 1), dtype=np.float32)])
    with pytest.raises(CodecError, match="bad shape"):
        CODECS["msgpack"].encode_request([np.ones(3)])


def test_registry():
    assert {"json", "ujson", "orjson", "raw", "msgpack"} <= set(CODECS) and "pickle" not in CODECS
    assert get_codec(None) is CODECS[DEFAULT_CODEC] is CODECS["json"]
    with pytest.raises(UnknownCodec, match="unknown codec 'pickle'; known: json"):
        get_codec("pickle")


# ------------------------------------------------------------------ what the decoders refuse
OK = {"X-Dtype": "float64", "X-Shape": "2x2"}
PICKLE = pickle.dumps(np.ones((2, 2)))
EVIL = b"cos\nsystem\n(S'echo pwned'\ntR."  # what an attacker would send; must never reach an unpickler
BAD_JSON = [
    b"",
    b"not json",
    b"[1, 2]",
    b'{"operands": 5}',
    b'{"operands": [[[1, 2], [3]]]}',
    b'{"operands": [[["1", "2"]]]}',
    b'{"operands": [[[true, false]]]}',
    b'{"operands": [[[null]]]}',
    b'{"operands": [[[{"a": 1}]]]}',
    b'{"operands": [[[[1]]]]}',
    b'{"operands": [[[]]]}',
    b'{"operands": [[]]}',
    b'{"operands": [[1, 2]]}',
    b'{"operands": [[[1]]], "dtype": "object"}',
    b'{"operands": [[[1]]], "dtype": 5}',
    b'{"operands": [[[1.5]]], "dtype": "int32"}',
    b'{"operands": [[[3000000000]]], "dtype": "int32"}',
    b'{"operands": [[[9223372036854775808]]], "dtype": "int64"}',
    b'{"operands": [[[-9223372036854775809]]], "dtype": "int64"}',
    b'{"operands": [[[1' + b"0" * 400 + b"]]]}",
    b'{"operands": [[[1]]], "__class__": "os.system"}',
    b'{"operands": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
    b'{"operands": [' + b"[[1]]," * 20 + b"[[1]]]}",
    PICKLE,
    EVIL,
]


@pytest.mark.parametrize("name", JSON_CODECS)
@pytest.mark.parametrize("body", BAD_JSON, ids=range(len(BAD_JSON)))
def test_json_decoders_refuse(name, body):
    with pytest.raises(CodecError):
        CODECS[name].decode_request(body, {})


BAD_RAW = [  # (body, headers)
    (bytes(32), {"X-Dtype": "float64"}),
    (bytes(32), {"X-Dtype": "float64", "X-Shape": ""}),
    (bytes(32), {"X-Dtype": "object", "X-Shape": "2x2"}),
    (bytes(32), {"X-Dtype": "<f8", "X-Shape": "2x2"}),
    (bytes(32), {"X-Dtype": "float16", "X-Shape": "4x4"}),
    (bytes(32), {"X-Dtype": "float64", "X-Shape": "2x2x1"}),
    (bytes(32), {"X-Dtype": "float64", "X-Shape": "4"}),
    (bytes(32), {"X-Dtype": "float64", "X-Shape": "0x4"}),
    (bytes(32), {"X-Dtype": "float64", "X-Shape": "-2x-2"}),
    (bytes(32), {"X-Dtype": "float64", "X-Shape": "2x2,"}),
    (bytes(32), {"X-Dtype": "float64", "X-Shape": "1e0x4"}),
    (bytes(32), {"X-Dtype": "float64", "X-Shape": "\uff12x2"}),  # a full-width digit
    (bytes(32), {"X-Dtype": "float64", "X-Shape": ",".join(["1x1"] * 4) + ",2x2"}),
    (bytes(32), {"X-Dtype": "float64", "X-Shape": ",".join(["1x1"] * 17)}),
    (bytes(31), OK),
    (bytes(33), OK),
    (bytes(32), {"X-Dtype": "int32", "X-Shape": "2x2"}),
    (PICKLE, OK),
    (EVIL, OK),
]


@pytest.mark.parametrize("name", ["raw", "raw-zlib"])
@pytest.mark.parametrize(("body", "headers"), BAD_RAW, ids=range(len(BAD_RAW)))
def test_raw_decoders_refuse(name, body, headers):
    if name == "raw-zlib":
        body = zlib.compress(body)
    with pytest.raises(CodecError):
        CODECS[name].decode_request(body, headers)


@pytest.mark.parametrize(
    "body",
    [
        b"not zlib at all",
        zlib.compress(bytes(32)) + b"trailing",
        zlib.compress(bytes(32))[:-3],
        zlib.compress(bytes(50 << 20)),  # inflates to 50 MB; must stop after 33 bytes
    ],
)
def test_raw_zlib_refuses_bad_streams(body):
    with pytest.raises(CodecError):
        CODECS["raw-zlib"].decode_request(body, OK)


def test_raw_zlib_refuses_to_inflate_past_its_cap():
    side = int((MAX_INFLATED_BYTES // 8) ** 0.5) + 1
    with pytest.raises(CodecError, match="too large"):
        CODECS["raw-zlib"].decode_request(zlib.compress(b"x"), {"X-Shape": f"{side}x{side}"})


def _mp(obj) -> bytes:
    return msgpack.packb(obj)


OK_ITEM = {"shape": [2, 2], "data": bytes(32)}
BAD_MSGPACK = [
    b"",
    b"\xc1",
    _mp([1, 2]),
    _mp({"dtype": "float64"}),
    _mp({"dtype": "float64", "operands": [OK_ITEM], "extra": 1}),
    _mp({"dtype": "object", "operands": [OK_ITEM]}),
    _mp({"dtype": "float64", "operands": OK_ITEM}),
    _mp({"dtype": "float64", "operands": [{"shape": [2, 2], "data": "x" * 32}]}),
    _mp({"dtype": "float64", "operands": [{"shape": [2, 2], "data": bytes(31)}]}),
    _mp({"dtype": "float64", "operands": [{"shape": [2, 2, 1], "data": bytes(32)}]}),
    _mp({"dtype": "float64", "operands": [{"shape": [True, 4], "data": bytes(32)}]}),
    _mp({"dtype": "float64", "operands": [{"shape": [4.0, 1], "data": bytes(32)}]}),
    _mp({"dtype": "float64", "operands": [{"shape": [2, 2], "data": msgpack.ExtType(1, PICKLE)}]}),
    _mp({"dtype": "float64", "operands": [OK_ITEM] * 17}),
    _mp({"dtype": "float64", "operands": [OK_ITEM]}) + b"\x00",
    _mp({1: 2}),
    PICKLE,
    EVIL,
]


@pytest.mark.parametrize("body", BAD_MSGPACK, ids=range(len(BAD_MSGPACK)))
def test_msgpack_decoder_refuses(body):
    with pytest.raises(CodecError):
        CODECS["msgpack"].decode_request(body, {})


@pytest.mark.parametrize("name", list(CODECS))
def test_response_decoders_refuse(name):
    codec = CODECS[name]
    body, headers = codec.encode_response(np.ones((2, 2)))
    with pytest.raises(CodecError):
        codec.decode_response(wire(body)[:-1], headers)
    if name.startswith("raw"):
        with pytest.raises(CodecError, match="one shape"):
            codec.decode_response(wire(body), {**headers, "X-Shape": "1x2,1x2"})


def test_parse_shapes():
    assert parse_shapes("800x800, 800x600") == [(800, 800), (800, 600)]
    assert parse_shapes("1x1") == [(1, 1)]


# ------------------------------------------------------------------ nothing is ever unpickled or evaluated
def _forbidden(*args, **kwargs):
    raise AssertionError("a codec tried to unpickle or evaluate its input")


def test_no_codec_path_unpickles_or_evaluates(monkeypatch):
    for target, name in [(pickle, "loads"), (pickle, "load"), (pickle, "Unpickler"), (np, "load"),
                         (np.lib.format, "read_array"), (builtins, "eval"), (builtins, "exec")]:  # fmt: skip
        monkeypatch.setattr(target, name, _forbidden)
    crafted = [
        PICKLE,
        EVIL,
        b"\x93NUMPY\x01\x00v\x00{'descr': '|O', 'fortran_order': False, 'shape': (1,), }",
    ]
    crafted += [
        _mp({"dtype": "float64", "operands": [{"shape": [2, 2], "data": msgpack.ExtType(1, PICKLE)}]})
    ]
    crafted += [json.dumps({"operands": [[[1.0]]], "dtype": "object"}).encode()]
    for codec in CODECS.values():
        body, headers = codec.encode_request([np.ones((2, 2)), np.ones((2, 2))])
        assert len(codec.decode_request(wire(body), headers)) == 2
        rbody, rheaders = codec.encode_response(np.ones((2, 2)))
        codec.decode_response(wire(rbody), rheaders)
        for payload in crafted + [zlib.compress(p) for p in crafted]:
            for hdrs in (
                {},
                {"X-Dtype": "float64", "X-Shape": "5x7"},
                {"X-Dtype": "object", "X-Shape": "1x1"},
            ):
                with pytest.raises(CodecError):
                    codec.decode_request(payload, hdrs)
                with pytest.raises(CodecError):
                    codec.decode_response(payload, hdrs)


def test_server_and_client_code_never_import_an_unpickler():
    """A static guard next to the runtime one: no pickle/marshal/shelve, no eval/exec, no np.load."""
    files = [
        *sorted((REPO / "server").glob("*.py")),
        REPO / "client" / "offload.py",
        REPO / "client" / "__main__.py",
    ]
    for path in files:
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Import | ast.ImportFrom):
                names = [a.name for a in node.names] + (
                    [node.module] if isinstance(node, ast.ImportFrom) else []
                )
                assert not {"pickle", "_pickle", "marshal", "shelve", "dill", "cloudpickle"} & set(names), (
                    path
                )
            if isinstance(node, ast.Call):
                func = ast.unparse(node.func)
                assert func not in {"eval", "exec", "np.load", "numpy.load", "pickle.loads"}, (path, func)
                assert "allow_pickle" not in ast.unparse(node), path


# ------------------------------------------------------------------ Server-Timing
def test_server_timing_round_trip():
    clock = StageClock()
    for stage in ("decode", "compute"):
        with clock.stage(stage):
            pass
    with pytest.raises(ValueError), clock.stage("encode"):
        raise ValueError  # a failed stage still reports its time
    header = clock.header()
    assert [m.split(";")[0] for m in header.split(", ")] == ["decode", "compute", "encode"]
    assert set(parse_server_timing(header)) == {"decode", "compute", "encode"}


def test_parse_server_timing():
    captured = "decode;dur=0.118, compute;dur=0.088, encode;dur=0.074"  # from a real response
    assert parse_server_timing(captured) == pytest.approx(
        {"decode": 0.118e-3, "compute": 0.088e-3, "encode": 0.074e-3}
    )
    assert parse_server_timing('cache;desc="hit", db;dur=53;desc=x, app ; dur = "47.2"') == pytest.approx(
        {"db": 0.053, "app": 0.0472}
    )
    assert parse_server_timing(None) == {} and parse_server_timing("") == {}
    assert parse_server_timing("x;dur=abc, ;dur=1, y;dur=1e3") == {"y": 1.0}
