"""The server's limits against a real `python -m server` on loopback: slow and idle clients do not stop
it from answering others, a body that does not arrive gets 408, every request that would cost more than
the limits is refused before it is computed, and the worker's memory stays within the documented bound
(docs/server.md, "Server limits")."""

from __future__ import annotations

import json
import select
import socket
import time
import zlib
from urllib.parse import urlsplit

import msgpack
import numpy as np
import pytest
import requests

from benchmarks.loopback import LoopbackServer
from benchmarks.memory import reset_peak, vm_kib
from contracts.limits import MIB
from contracts.stages import parse_server_timing
from tests.servers import assert_healthy

PEAK_PER_REQUEST = 8  # x --max-body-mb above the idle worker: the bound docs/server.md documents


def connect(url: str) -> socket.socket:
    parts = urlsplit(url)
    return socket.create_connection((parts.hostname, parts.port), timeout=10)


def request_head(length: int | None, path: str = "/v1/ops/mul", **headers: str) -> bytes:
    lines = [f"POST {path} HTTP/1.1", "Host: test", *(f"{k}: {v}" for k, v in headers.items())]
    if length is not None:
        lines.append(f"Content-Length: {length}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def read_response(sock: socket.socket, timeout: float = 30.0) -> tuple[int, dict]:
    """Status and JSON body of the response the server sends before closing the connection."""
    sock.settimeout(timeout)
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split()[1]), json.loads(body)


def closed_by_server(sock: socket.socket, timeout: float) -> bool:
    sock.settimeout(timeout)
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


def still_waiting(sock: socket.socket) -> bool:
    """Open, and nothing received: the server holds the connection (and for a partial request, a thread)."""
    readable, _, _ = select.select([sock], [], [], 0)
    return not readable


def health_time(url: str) -> float:
    start = time.monotonic()
    resp = requests.get(f"{url}/v1/health", timeout=10)
    assert resp.status_code == 200 and resp.json()["status"] == "ok"
    return time.monotonic() - start


# ------------------------------------------------------------------ slow and idle clients
def test_health_answers_while_slow_clients_are_held(server):
    """Idle connections, headers and bodies that never finish, each several times; the server's 8
    threads minus the 6 partial requests leave room for others, idle connections take none."""
    held = []
    try:
        for _ in range(3):
            held.append(connect(server.url))  # idle: not a byte
            s = connect(server.url)
            s.sendall(b"POST /v1/ops/mul HTTP/1.1\r\nHost: test\r\nX-Co")  # headers never finish
            held.append(s)
            s = connect(server.url)
            s.sendall(request_head(1 << 20, **{"X-Codec": "raw", "X-Shape": "256x256,256x256"}) + bytes(1000))
            held.append(s)  # a body that never finishes
        time.sleep(0.5)  # every partial request is in the server's hands
        times = [health_time(server.url) for _ in range(5)]
        assert max(times) < 1.0, times
        assert_healthy(server.url)  # an operation too, not only /v1/health
        huge = connect(server.url)  # 100 GB announced, nothing sent: refused at once, not waited for
        huge.sendall(request_head(10**11, **{"X-Codec": "raw", "X-Shape": "1x1,1x1"}))
        status, body = read_response(huge)
        assert (status, body["error"]) == (413, "body too large") and "--max-body-mb" in body["detail"]
        huge.close()
        assert all(still_waiting(s) for s in held)  # they really were held all along
        assert max(health_time(server.url) for _ in range(3)) < 1.0
    finally:
        for s in held:
            s.close()
    assert_healthy(server.url)


def test_a_stalled_body_gets_408_and_frees_its_thread(strict_server):
    s = connect(strict_server.url)
    s.sendall(request_head(1000, **{"X-Codec": "raw", "X-Shape": "5x5,5x5"}) + bytes(10))
    status, body = read_response(s)
    assert (status, body["error"]) == (408, "request timeout")
    assert "--read-timeout" in body["detail"] and "nothing received" in body["detail"]
    s.close()
    assert_healthy(strict_server.url)


def test_a_trickled_body_gets_408_when_overdue(strict_server):
    """One byte every 0.3 s never trips the 1 s read timeout, but the whole body is due within 3 s."""
    s = connect(strict_server.url)
    s.sendall(request_head(1000, **{"X-Codec": "raw", "X-Shape": "5x5,5x5"}))
    start = time.monotonic()
    while not select.select([s], [], [], 0.3)[0]:
        s.sendall(b"\0")
        assert time.monotonic() - start < 30, "no answer to a body trickled for 30 s"
    status, body = read_response(s)
    assert (status, body["error"]) == (408, "request timeout") and "overdue" in body["detail"]
    s.close()


@pytest.mark.parametrize("sent", [b"", b"POST /v1/ops/mul HTTP/1.1\r\nHost: te"], ids=["idle", "headers"])
def test_silent_connections_are_closed(strict_server, sent):
    s = connect(strict_server.url)
    s.sendall(sent)
    assert closed_by_server(s, timeout=15)
    s.close()
    assert_healthy(strict_server.url)


# ------------------------------------------------------------------ requests that cost more than their body
def raw_request(shapes: str, body: bytes, codec: str = "raw", dtype: str = "float64") -> tuple:
    return body, {"X-Codec": codec, "X-Shape": shapes, "X-Dtype": dtype}


def json_request(operands: list, codec: str = "json", dtype: str = "float64") -> tuple:
    return json.dumps({"operands": operands, "dtype": dtype}).encode(), {"X-Codec": codec}


def zlib_zeros(nbytes: int) -> bytes:
    z, chunk = zlib.compressobj(9), bytes(1 << 24)
    out = [z.compress(chunk) for _ in range(nbytes // len(chunk))]
    return b"".join([*out, z.compress(bytes(nbytes % len(chunk))), z.flush()])


def column_json(n: int, outer: bool = True) -> bytes:
    """[[0],[0],...] and [[0,0,...]] (the outer product, or the other way round: a 1x1 result): 6 bytes
    of text per element pair, about 130 bytes of Python objects."""
    column = b"[" + b",".join([b"[0]"] * n) + b"]"
    row = b"[[" + b",".join([b"0"] * n) + b"]]"
    pair = (column, row) if outer else (row, column)
    return b'{"operands":[' + b",".join(pair) + b"]}"


BOMB = zlib_zeros(2 * 8192 * 8192 * 8)  # two 8192x8192 float64 zero matrices: 1 GiB from about 1 MiB
HOSTILE = {  # name: (op, body, headers, error on the default server, error with --max-body-mb 1)
    "raw outer product 16384": (
        "mul",
        *raw_request("16384x1,1x16384", bytes(2 * 16384 * 8)),
        "result too large",
        "result too large",
    ),
    "json outer product 4096": (
        "mul",
        *json_request([[[1.5]] * 4096, [[1.5] * 4096]]),
        "result too large",
        "result too large",
    ),
    "json outer product 16384": (
        "mul",
        *json_request([[[0.0]] * 16384, [[0.0] * 16384]]),
        "result too large",
        "result too large",
    ),
    "raw-zlib two 8192x8192 zeros": (
        "mul",
        *raw_request("8192x8192,8192x8192", BOMB, "raw-zlib"),
        "operands too large",
        "operands too large",
    ),
    "raw-zlib int64 mul 2000": (
        "mul",
        *raw_request("2000x2000,2000x2000", zlib_zeros(2 * 2000 * 2000 * 8), "raw-zlib", "int64"),
        "too much work",
        "operands too large",
    ),
    "raw inv 5000 (declared)": (
        "inv",
        *raw_request("5000x5000", bytes(8)),
        "too much work",
        "operands too large",
    ),
    "json column of 100k zeros": (
        "mul",
        column_json(100_000),
        {"X-Codec": "orjson"},
        "result too large",
        "body too costly to decode",
    ),
    "json column of 8M zeros": (
        "mul",
        column_json(8_000_000),
        {"X-Codec": "json"},
        "body too costly to decode",
        "body too large",
    ),
    "msgpack outer product 16384": (
        "mul",
        msgpack.packb(
            {
                "dtype": "float64",
                "operands": [
                    {"shape": [16384, 1], "data": bytes(16384 * 8)},
                    {"shape": [1, 16384], "data": bytes(16384 * 8)},
                ],
            }
        ),
        {"X-Codec": "msgpack"},
        "result too large",
        "result too large",
    ),
}


def check_refused(server: LoopbackServer, name: str, small: bool) -> requests.Response:
    op, body, headers, error, small_error = HOSTILE[name]
    resp = requests.post(f"{server.url}/v1/ops/{op}", data=body, headers=headers, timeout=120)
    assert resp.status_code == 413, resp.text
    assert resp.json()["error"] == (small_error if small else error)
    assert "--max-body-mb" in resp.json()["detail"]
    assert "compute" not in parse_server_timing(resp.headers.get("Server-Timing", ""))  # refused before
    return resp


@pytest.mark.parametrize("name", list(HOSTILE))
def test_hostile_request_refused(server, name):
    resp = check_refused(server, name, small=False)
    if HOSTILE[name][2].get("X-Shape"):  # declared in the headers: refused before decoding anything
        assert "Server-Timing" not in resp.headers
    assert_healthy(server.url)


@pytest.mark.parametrize("name", list(HOSTILE))
def test_hostile_request_refused_with_a_small_limit(small_server, name):
    check_refused(small_server, name, small=True)
    assert_healthy(small_server.url)


def test_limits_in_health(server):
    limits = requests.get(f"{server.url}/v1/health", timeout=10).json()["limits"]
    assert limits["max_body_bytes"] == 256 * MIB and limits["max_work"] == pytest.approx(4096**3)
    assert (limits["read_timeout_s"], limits["timeout_s"]) == (20.0, 900.0)


# ------------------------------------------------------------------ the memory bound
def worst_allowed(max_body: int) -> dict:
    """The most expensive requests still under the limits, per codec, for a body limit of `max_body`."""
    rng = np.random.default_rng(1)
    r_json = int((max_body / 12) ** 0.5) - 2  # int32 JSON outer product: Python ints 9x the result
    r_raw = int((max_body / 8) ** 0.5) - 2
    s = int((max_body / 16) ** 0.5)
    n_inv = int(((max_body / 16) ** 1.5 / 2) ** (1 / 3)) - 1
    a_inv = rng.random((n_inv, n_inv)) + n_inv * np.eye(n_inv)
    s_json = int((max_body / 42) ** 0.5)
    a_json = rng.random((s_json, s_json))
    col = rng.random((r_raw, 1))
    return {
        "json int32 outer": (
            "mul",
            *json_request(
                [
                    rng.integers(2**15, 2**16, (r_json, 1)).tolist(),
                    rng.integers(2**14, 2**15, (1, r_json)).tolist(),
                ],
                dtype="int32",
            ),
        ),
        "json mul": ("mul", *json_request([a_json.tolist(), a_json.tolist()])),
        "json inv": ("inv", *json_request([a_inv.tolist()])),
        "json column": ("mul", column_json(int(5 * max_body / 254 * 0.95), outer=False), {"X-Codec": "json"}),
        "raw outer": ("mul", *raw_request(f"{r_raw}x1,1x{r_raw}", col.tobytes() * 2)),
        "raw mul": ("mul", *raw_request(f"{s}x{s},{s}x{s}", rng.random((2, s, s)).tobytes())),
        "raw-zlib outer": (
            "mul",
            *raw_request(f"{r_raw}x1,1x{r_raw}", zlib.compress(col.tobytes() * 2), "raw-zlib"),
        ),
        "msgpack outer": (
            "mul",
            msgpack.packb(
                {
                    "dtype": "float64",
                    "operands": [
                        {"shape": [r_raw, 1], "data": col.tobytes()},
                        {"shape": [1, r_raw], "data": col.tobytes()},
                    ],
                }
            ),
            {"X-Codec": "msgpack"},
        ),
    }


def test_memory_stays_within_the_documented_bound(memory_server):
    """The worker's high-water mark over every hostile request and the costliest allowed ones, one
    after the other on one worker: at most PEAK_PER_REQUEST x --max-body-mb above its idle RSS."""
    max_body = 16 * MIB
    (worker,) = memory_server.worker_pids()
    health_time(memory_server.url)
    idle = vm_kib(worker, "VmRSS") * 1024
    if not reset_peak(worker):
        pytest.skip("this kernel does not let the high-water mark be reset")
    for name in HOSTILE:
        op, body, headers, *_ = HOSTILE[name]
        resp = requests.post(f"{memory_server.url}/v1/ops/{op}", data=body, headers=headers, timeout=120)
        assert resp.status_code == 413, (name, resp.text)
    hostile_peak = vm_kib(worker, "VmHWM") * 1024 - idle
    assert hostile_peak < 2 * max_body, f"hostile requests: {hostile_peak / max_body:.2f}x"
    peaks = {}
    for name, (op, body, headers) in worst_allowed(max_body).items():
        resp = requests.post(f"{memory_server.url}/v1/ops/{op}", data=body, headers=headers, timeout=300)
        assert resp.status_code == 200, (name, resp.text)
        peaks[name] = round((vm_kib(worker, "VmHWM") * 1024 - idle) / max_body, 2)
    assert max(peaks.values()) <= PEAK_PER_REQUEST, peaks
    assert_healthy(memory_server.url)
