"""End to end against a real `python -m server` (gunicorn + Flask) on loopback: the wire contract as
curl and the client see it, every error status, and that the server keeps serving after each."""

from __future__ import annotations

import json
import pickle
import shutil
import subprocess
import sys
import zlib

import numpy as np
import pytest
import requests

import testbed
from client.__main__ import main as client_main
from client.offload import OffloadClient, OffloadError, check_result, local, make_operands
from contracts.codecs import CODECS
from contracts.errors import UserError
from contracts.ops import OPS
from contracts.stages import parse_server_timing
from tests.helpers import REPO
from tests.servers import EXPECTED, A, B, assert_healthy, post


def test_health(server):
    info = requests.get(f"{server.url}/v1/health", timeout=10).json()
    assert info["version"] == testbed.__version__
    assert set(info["operations"]) == set(OPS) and info["operations"]["mul"]["arity"] == 2
    assert info["codecs"] == list(CODECS)


# ------------------------------------------------------------------ the wire contract, as curl sees it
@pytest.mark.parametrize("op", ["mul", "inv", "log"])
def test_json_body_default_codec(server, op):
    operands = [A, B] if op == "mul" else [A]
    resp = post(server.url, op, json.dumps({"operands": [m.tolist() for m in operands]}).encode(), codec=None)
    assert resp.status_code == 200 and resp.headers["Content-Type"] == "application/json"
    assert resp.headers["X-Codec"] == "json"
    np.testing.assert_allclose(resp.json()["result"], EXPECTED[op], rtol=1e-12)
    timing = parse_server_timing(resp.headers["Server-Timing"])
    assert set(timing) == {"queue", "decode", "compute", "encode"}  # the wait for the work slot first
    assert timing["queue"] < 0.05  # one client: nothing to wait for


@pytest.mark.parametrize("op", ["mul", "inv", "log"])
def test_raw_body(server, op):
    operands = [A, B] if op == "mul" else [A]
    resp = post(
        server.url,
        op,
        b"".join(m.tobytes() for m in operands),
        codec="raw",
        **{
            "Content-Type": "application/octet-stream",
            "X-Dtype": "float64",
            "X-Shape": ",".join("2x2" for _ in operands),
        },
    )
    assert resp.status_code == 200
    assert (resp.headers["X-Dtype"], resp.headers["X-Shape"]) == ("float64", "2x2")
    np.testing.assert_allclose(np.frombuffer(resp.content, "<f8").reshape(2, 2), EXPECTED[op], rtol=1e-12)


def test_int_dtypes_on_the_wire(server):
    resp = post(
        server.url, "mul", json.dumps({"operands": [[[1, 2]], [[3], [4]]], "dtype": "int32"}).encode()
    )
    assert resp.json() == {"result": [[11]], "dtype": "int32"}
    resp = post(
        server.url,
        "log",
        np.array([[1, 1]], "<i8").tobytes(),
        codec="raw",
        **{"X-Dtype": "int64", "X-Shape": "1x2"},
    )
    assert resp.headers["X-Dtype"] == "float64" and resp.content == np.zeros(2).tobytes()


@pytest.mark.skipif(shutil.which("curl") is None, reason="curl not installed")
def test_curl(server, tmp_path):
    """docs/server.md's promise: plain curl, with a JSON body and with raw bytes from a file."""
    out = subprocess.run(
        ["curl", "-sS", "-d", '{"operands": [[[1,2],[3,4]]]}', f"{server.url}/v1/ops/inv"],
        capture_output=True,
        check=True,
        timeout=30,
    )
    np.testing.assert_allclose(json.loads(out.stdout)["result"], EXPECTED["inv"])
    (tmp_path / "ab.bin").write_bytes(A.tobytes() + B.tobytes())
    out = subprocess.run(
        [
            "curl",
            "-sS",
            "-H",
            "X-Codec: raw",
            "-H",
            "X-Shape: 2x2,2x2",
            "--data-binary",
            f"@{tmp_path / 'ab.bin'}",
            f"{server.url}/v1/ops/mul",
        ],
        capture_output=True,
        check=True,
        timeout=30,
    )
    assert out.stdout == EXPECTED["mul"].tobytes()


# ------------------------------------------------------------------ offloaded == local, every op x codec
@pytest.mark.parametrize("codec", list(CODECS))
@pytest.mark.parametrize("op", list(OPS))
def test_offload_matches_local(server, op, codec):
    operands = make_operands(op, 24, "float64", np.random.default_rng(7))
    with OffloadClient(server.url) as client:
        remote, stages = client.offload(op, operands, codec)
    check_result(remote, local(op, operands)[0])
    assert stages.t_total == pytest.approx(stages.t_client_encode + stages.t_request + stages.t_client_decode)
    server_time = stages.t_server_decode + stages.t_server_compute + stages.t_server_encode
    assert stages.t_comm == pytest.approx(stages.t_request - server_time - stages.t_server_queue)
    assert 0 < server_time < stages.t_request and stages.t_server_compute > 0
    assert stages.bytes_up > 0 and stages.bytes_down > 0


@pytest.mark.parametrize("dtype", ["int32", "int64"])
@pytest.mark.parametrize("codec", ["json", "orjson", "raw", "msgpack"])
def test_offload_integers(server, codec, dtype):
    with OffloadClient(server.url) as client:
        for op in OPS:
            operands = make_operands(op, 12, dtype, np.random.default_rng(3))
            remote, _ = client.offload(op, operands, codec)
            assert remote.dtype == (np.dtype(dtype) if op == "mul" else np.float64)
            check_result(remote, local(op, operands)[0])


def test_raw_bytes_counted_exactly(server):
    operands = make_operands("mul", 30, "float64", np.random.default_rng(1))
    with OffloadClient(server.url) as client:
        _, stages = client.offload("mul", operands, "raw")
    assert (stages.bytes_up, stages.bytes_down) == (2 * 30 * 30 * 8, 30 * 30 * 8)


def test_non_finite_travels_raw_but_not_json(server):
    a = np.array([[np.inf, -0.0], [np.nan, 1.0]])
    with OffloadClient(server.url) as client:
        remote, _ = client.offload("mul", [a, np.eye(2)], "raw")
        with np.errstate(invalid="ignore"):
            np.testing.assert_array_equal(remote, a @ np.eye(2))  # NaN == NaN here
        with pytest.raises(UserError, match="NaN or infinity"):
            client.offload("mul", [a, np.eye(2)], "orjson")
        with pytest.raises(OffloadError) as err:  # finite inputs, an overflowing product
            client.offload("mul", [np.full((1, 1), 1e300), np.full((1, 1), 1e300)], "json")
    assert (err.value.status, err.value.error) == (400, "non-finite values")


# ------------------------------------------------------------------ every bad input: status, JSON, still serving
RAW = {"X-Dtype": "float64"}
JSON_ERRORS = [  # (op, codec, body, headers, status, error)
    ("mul", "json", b'{"operands": [[[1, 2]]', {}, 400, "malformed JSON"),
    ("mul", "ujson", b"[1, 2]", {}, 400, "malformed body"),
    ("mul", "orjson", b'{"operands": [[[1, 2], [3]], [[1]]]}', {}, 400, "not a matrix"),
    ("mul", "json", b'{"operands": [[["1"]], [[2]]]}', {}, 400, "not numbers"),
    ("mul", "json", b'{"operands": [[[1]], [[2]]], "dtype": "object"}', {}, 400, "bad dtype"),
    ("mul", "json", b'{"operands": [[[1.5]], [[2]]], "dtype": "int64"}', {}, 400, "not integers"),
    ("mul", "json", b'{"operands": [[[1]], [[2]]], "code": "import os"}', {}, 400, "malformed body"),
    ("log", "json", b'{"operands": [[[1, NaN]]]}', {}, 400, "non-finite values"),
    ("mul", "json", b'{"operands": [[[1, 2]], [[1, 2]]]}', {}, 400, "shape mismatch"),
    ("mul", "json", b'{"operands": [[[1]]]}', {}, 400, "wrong number of operands"),
    ("inv", "json", b'{"operands": [[[1, 2, 3], [4, 5, 6]]]}', {}, 400, "not square"),
    ("inv", "json", b'{"operands": [[[1, 2], [2, 4]]]}', {}, 400, "singular matrix"),
    ("log", "json", b'{"operands": [[[1, 0]]]}', {}, 400, "log needs positive entries"),
    ("log", "msgpack", b"\xc1", {}, 400, "malformed msgpack"),
    ("log", "raw", A.tobytes(), {**RAW, "X-Shape": "2x3"}, 400, "byte count mismatch"),
    ("log", "raw", A.tobytes()[:-1], {**RAW, "X-Shape": "2x2"}, 400, "byte count mismatch"),
    ("log", "raw", A.tobytes(), RAW, 400, "missing X-Shape"),
    ("log", "raw", A.tobytes(), {"X-Dtype": "complex128", "X-Shape": "2x2"}, 400, "bad dtype"),
    ("log", "raw", A.tobytes(), {**RAW, "X-Shape": "2x2x1"}, 400, "bad X-Shape"),
    ("log", "raw", A.tobytes(), {**RAW, "X-Shape": "2x" + "9" * 5000}, 400, "bad X-Shape"),
    ("mul", "json", b'{"operands": [' + b",".join([b"[[1]]"] * 17) + b"]}", {}, 400, "too many operands"),
    ("mul", "json", b'{"operands": {"a": 1}}', {}, 400, "malformed body"),
    ("log", "raw", pickle.dumps(A), {**RAW, "X-Shape": "2x2"}, 400, "byte count mismatch"),
    ("log", "raw-zlib", A.tobytes(), {**RAW, "X-Shape": "2x2"}, 400, "malformed zlib data"),
    ("log", "raw-zlib", zlib.compress(bytes(10**6)), {**RAW, "X-Shape": "2x2"}, 400, "byte count mismatch"),
    ("exec", "json", b"{}", {}, 404, "unknown operation"),
    ("mul", "pickle", pickle.dumps([A, B]), {}, 415, "unknown codec"),
]


@pytest.mark.parametrize(
    ("op", "codec", "body", "headers", "status", "error"),
    JSON_ERRORS,
    ids=[f"{e[5]}-{e[1]}" for e in JSON_ERRORS],
)
def test_bad_input(server, op, codec, body, headers, status, error):
    resp = post(server.url, op, body, codec=codec, **headers)
    assert resp.status_code == status, resp.text
    assert resp.headers["Content-Type"] == "application/json"
    assert resp.json()["error"] == error and isinstance(resp.json()["detail"], str)
    if status == 400:  # decoding ran (and failed, or what came after it did)
        assert "decode" in parse_server_timing(resp.headers["Server-Timing"])
    assert_healthy(server.url)


def test_stage_times_of_an_op_that_fails_in_compute(server):
    resp = post(server.url, "log", json.dumps({"operands": [[[1, -1]]]}).encode())
    assert set(parse_server_timing(resp.headers["Server-Timing"])) == {"queue", "decode", "compute"}


@pytest.mark.parametrize(
    ("method", "path", "status"),
    [
        ("GET", "/v1/ops/mul", 405),
        ("POST", "/v1/health", 405),
        ("GET", "/v1/nothing", 404),
        ("DELETE", "/", 404),
    ],
)
def test_wrong_method_or_path(server, method, path, status):
    resp = requests.request(method, f"{server.url}{path}", timeout=10)
    assert resp.status_code == status and set(resp.json()) == {"error", "detail"}
    assert_healthy(server.url)


@pytest.mark.parametrize("chunked", [False, True])
def test_body_over_the_limit(small_server, chunked):
    big = bytes(3 << 20)
    body = iter([big[i : i + 65536] for i in range(0, len(big), 65536)]) if chunked else big
    resp = requests.post(
        f"{small_server.url}/v1/ops/mul",
        data=body,
        timeout=30,
        headers={"X-Codec": "raw", "X-Shape": "1x1,1x1"},
    )
    assert resp.status_code == 413 and resp.json()["error"] == "body too large"
    assert_healthy(small_server.url)
    ok = make_operands("mul", 100, "float64", np.random.default_rng(1))  # 160 KB: under the limit
    with OffloadClient(small_server.url) as client:
        client.offload("mul", ok, "raw")
        with pytest.raises(OffloadError) as err:
            client.offload("mul", make_operands("mul", 300, "float64", np.random.default_rng(1)), "raw")
    assert err.value.status == 413


def test_internal_error_is_json_and_the_worker_survives(failing_server):
    resp = post(failing_server.url, "boom", json.dumps({"operands": [[[1.0]]]}).encode())
    assert resp.status_code == 500
    assert resp.json() == {"error": "internal error", "detail": "RuntimeError: deliberate test failure"}
    assert {"decode", "compute"} <= set(parse_server_timing(resp.headers["Server-Timing"]))
    assert_healthy(failing_server.url)
    assert "deliberate test failure" in failing_server.log_text()  # the traceback is logged


# ------------------------------------------------------------------ client errors and the CLI
def test_client_errors(server):
    with OffloadClient(server.url) as client:
        with pytest.raises(UserError, match="unknown codec 'pickle'"):
            client.offload("mul", [A, B], "pickle")
        with pytest.raises(OffloadError) as err:
            client.offload("nope", [A], "raw")
    assert (err.value.status, err.value.error) == (404, "unknown operation")
    with (
        OffloadClient("http://127.0.0.1:9", timeout=5) as client,
        pytest.raises(UserError, match="cannot reach"),
    ):
        client.offload("mul", [A, B], "raw")


def test_cli_offload(server, capsys):
    argv = ["offload", "--url", server.url, "--op", "mul", "--size", "20", "--codec", "raw", "--check"]
    assert client_main([*argv, "--json"]) == 0
    record = json.loads(capsys.readouterr().out)
    assert record["check"] == "ok" and record["bytes_up"] == 2 * 20 * 20 * 8 and record["t_total"] > 0
    assert client_main(argv) == 0
    out = capsys.readouterr().out
    assert "server compute" in out and "communication" in out and "ok" in out


def test_cli_local_and_errors(capsys):
    assert client_main(["local", "--op", "inv", "--size", "10", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["t_total"] > 0
    assert client_main(["offload", "--url", "http://127.0.0.1:9", "--op", "mul", "--size", "2"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: cannot reach") and err.count("\n") == 1
    assert (
        client_main(["offload", "--url", "http://127.0.0.1:9", "--op", "mul", "--size", "2", "--codec", "x"])
        == 2
    )


def test_cli_health_subprocess(server):
    """What `testbed up` runs on the client host: health JSON on stdout, exit 0."""
    out = subprocess.run(
        [sys.executable, "-m", "client", "health", "--url", server.url, "--wait", "10"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["version"] == testbed.__version__
