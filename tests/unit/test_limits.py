"""The server's limits as plain functions: what a request costs from its shapes, each codec's bounds
checked against its real output, the refusals and their messages, and the worker's deadline socket."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from contracts.codecs import CODECS, JSON_CHARS, get_codec
from contracts.limits import MIB, LimitError, Limits, check_body, check_request, request_cost
from contracts.ops import DTYPES, INT_MUL_WEIGHT, OPS
from contracts.wire import body_bytes
from server.__main__ import main as server_main
from server.gunicorn_worker import DeadlineSocket, ReadTimeout
from server.wsgi import ServerConfig

DEFAULT = Limits.from_mb(256)
SMALL = Limits.from_mb(1)
F8 = np.dtype("float64")


def extreme(dtype: str, shape: tuple[int, int]) -> np.ndarray:
    """The matrix with the longest text per element in JSON."""
    if dtype == "float64":
        return np.full(shape, -2.2250738585072014e-308)
    return np.full(shape, np.iinfo(dtype).min, dtype=dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("codec", list(CODECS))
@pytest.mark.parametrize("shape", [(1, 1), (3, 7), (40, 1), (1, 40)])
def test_response_bound_holds_for_the_real_encoding(codec, dtype, shape):
    c = get_codec(codec)
    rng = np.random.default_rng(0)
    for a in (extreme(dtype, shape), (rng.random(shape) * 1e6).astype(dtype)):
        body, _ = c.encode_response(a)
        assert len(body_bytes(body)) <= c.max_response_bytes(shape, np.dtype(dtype))


def test_json_bound_is_tight_enough_to_be_the_limit():
    """Within 15% of the real worst case: a looser factor would refuse results that fit."""
    shape = (50, 50)
    for dtype in DTYPES:
        real = len(get_codec("json").encode_response(extreme(dtype, shape))[0])
        bound = get_codec("json").max_response_bytes(shape, np.dtype(dtype))
        assert real > 0.85 * bound, (dtype, real, bound, JSON_CHARS[dtype])


def test_costs_of_the_ops():
    mul = request_cost("mul", F8, [(16384, 1), (1, 16384)], get_codec("raw"))
    assert (mul.operand_bytes, mul.response_bytes) == (2 * 16384 * 8, 16384**2 * 8 + 256)
    assert mul.work == 16384**2
    int_mul = request_cost("mul", np.dtype("int64"), [(10, 20), (20, 30)], get_codec("raw"))
    assert int_mul.work == 10 * 20 * 30 * INT_MUL_WEIGHT
    inv = request_cost("inv", np.dtype("int32"), [(100, 100)], get_codec("raw"))
    assert inv.response_bytes == 100 * 100 * 8 + 256  # inv of integers is float64
    assert request_cost("mul", F8, [(2, 2)], get_codec("raw")) is None  # execute says what is wrong
    assert set(OPS) == {"mul", "inv", "log"}  # a new op needs its cost here (default: element-wise)


def test_limits_derived_from_the_body_limit():
    assert DEFAULT.max_body == 256 * MIB and DEFAULT.max_work == pytest.approx(4096**3)
    assert SMALL.max_work == pytest.approx(256**3)
    with pytest.raises(ValueError):
        Limits(0)


@pytest.mark.parametrize(
    ("op", "dtype", "shapes", "codec", "limits", "error"),
    [
        ("mul", "float64", [(16384, 1), (1, 16384)], "raw", DEFAULT, "result too large"),
        ("mul", "float64", [(4096, 1), (1, 4096)], "json", DEFAULT, "result too large"),
        ("mul", "float64", [(8192, 8192), (8192, 8192)], "raw-zlib", DEFAULT, "operands too large"),
        ("mul", "float64", [(8192, 8192), (8192, 8192)], "raw-zlib", SMALL, "operands too large"),
        ("mul", "int64", [(2000, 2000), (2000, 2000)], "raw", DEFAULT, "too much work"),
        ("mul", "float64", [(4000, 1), (1, 4000)], "msgpack", DEFAULT, None),
        ("mul", "float64", [(4096, 4096), (4096, 4096)], "raw", DEFAULT, None),  # exactly at every limit
        ("mul", "float64", [(4097, 4096), (4096, 4096)], "raw", DEFAULT, "operands too large"),
        ("mul", "float64", [(5792, 2896), (2896, 5792)], "raw", DEFAULT, "too much work"),
        ("inv", "float64", [(5000, 5000)], "raw", DEFAULT, "too much work"),
        ("inv", "float64", [(3200, 3200)], "raw", DEFAULT, None),
        ("log", "float64", [(3300, 3300)], "json", DEFAULT, "result too large"),
        ("log", "float64", [(3300, 3300)], "orjson", DEFAULT, "result too large"),
        ("log", "float64", [(3300, 3300)], "raw", DEFAULT, None),
        ("mul", "float64", [(300, 300), (300, 300)], "raw", SMALL, "operands too large"),
        ("mul", "int32", [(300, 300), (300, 300)], "raw", SMALL, "too much work"),
    ],
)
def test_check_request(op, dtype, shapes, codec, limits, error):
    if error is None:
        check_request(op, np.dtype(dtype), shapes, get_codec(codec), limits)
        return
    with pytest.raises(LimitError) as exc:
        check_request(op, np.dtype(dtype), shapes, get_codec(codec), limits)
    assert exc.value.error == error
    assert "python -m server --max-body-mb" in exc.value.detail


def test_the_message_names_a_limit_that_lets_the_request_through():
    shapes = [(16384, 1), (1, 16384)]
    with pytest.raises(LimitError) as exc:
        check_request("mul", F8, shapes, get_codec("raw"), DEFAULT)
    needed = int(exc.value.detail.split("--max-body-mb ")[1].split()[0])
    check_request("mul", F8, shapes, get_codec("raw"), Limits.from_mb(needed))


REPO = Path(__file__).resolve().parents[2]


def json_column(n: int) -> bytes:
    return b'{"operands":[[' + b",".join([b"[0]"] * n) + b"],[[" + b",".join([b"0"] * n) + b"]]]}"


DECODE_RSS = """
import sys
from pathlib import Path
from contracts.codecs import get_codec
codec = get_codec(sys.argv[1])
body = sys.stdin.buffer.read()
status = Path("/proc/self/status")
def kib(field):
    return int(status.read_text().split(field + ":")[1].split()[0])
idle = kib("VmRSS")
Path("/proc/self/clear_refs").write_text("5")
try:
    held = sum(a.nbytes for a in codec.decode_request(body, {}))
except Exception:
    held = 0
print((kib("VmHWM") - idle) * 1024 - held, codec.decode_overhead(body))
"""
N = 300_000
JSON_BODIES = {
    "column": json_column(N),
    "row of floats": b'{"operands":[[[' + b",".join([b"0.12345678901234567"] * N) + b"]]]}",
    "row of ints": b'{"operands":[[[' + b",".join([b"123456789012345678"] * N) + b']]],"dtype":"int64"}',
    "strings": b'{"operands":[[[' + b",".join([b'"ab"'] * N) + b"]]]}",
    "objects": b'{"operands":[[[' + b",".join([b'{"a":[1,2]}'] * (N // 4)) + b"]]]}",
}


@pytest.mark.parametrize("body", list(JSON_BODIES))
@pytest.mark.parametrize("codec", ["json", "ujson", "orjson"])
def test_json_decode_overhead_bounds_what_parsing_takes(codec, body):
    """Resident memory of a real decode in a fresh process (bodies of 300k values, a few MB)."""
    if not Path("/proc/self/clear_refs").exists():
        pytest.skip("needs Linux /proc")
    out = subprocess.run(
        [sys.executable, "-c", DECODE_RSS, codec],
        input=JSON_BODIES[body],
        capture_output=True,
        check=True,
        cwd=REPO,
        timeout=120,
    )
    taken, bound = map(int, out.stdout.split())
    assert taken <= bound, f"{codec} {body}: {taken / N:.0f} B per value, bound {bound / N:.0f}"


def test_check_body():
    bomb = json_column(200_000)  # 1.2 MB of text, about 50 MB of Python objects
    with pytest.raises(LimitError) as exc:
        check_body(get_codec("json"), bomb, Limits.from_mb(4))
    assert exc.value.error == "body too costly to decode" and "--max-body-mb" in exc.value.detail
    check_body(get_codec("json"), bomb, Limits.from_mb(16))
    check_body(get_codec("raw"), bytes(4 * MIB), Limits.from_mb(4))  # views of the body: nothing more
    legit, _ = get_codec("json").encode_request([np.random.default_rng(0).random((300, 300))] * 2)
    check_body(get_codec("json"), legit, Limits(len(legit)))  # a body at the limit with real floats


# ------------------------------------------------------------------ configuration and the worker's socket
def test_gunicorn_plan():
    opts = ServerConfig(threads=6, read_timeout=2.5).gunicorn_options()
    assert opts["worker_class"] == "server.gunicorn_worker.BoundedThreadWorker"
    assert (opts["threads"], opts["keepalive"], opts["timeout"]) == (6, 3, 900)


@pytest.mark.parametrize(
    "argv", [["--threads", "1"], ["--read-timeout", "0"], ["--timeout", "-1"], ["--workers", "0"]]
)
def test_cli_refuses(argv, capsys):
    with pytest.raises(SystemExit) as exc:
        server_main([*argv, "--dry-run"])
    assert exc.value.code == 2 and "must be" in capsys.readouterr().err


def deadline_pair(idle: float) -> tuple[DeadlineSocket, socket.socket]:
    a, b = socket.socketpair()
    return DeadlineSocket.adopt(a, idle), b


def test_deadline_socket_reads():
    sock, peer = deadline_pair(idle=0.2)
    with sock, peer:
        peer.sendall(b"abc")
        assert sock.recv(10) == b"abc"
        with pytest.raises(ReadTimeout, match="nothing received") as exc:
            sock.recv(10)
        assert isinstance(exc.value, TimeoutError)
        sock.deadline = time.monotonic() + 0.05  # the request's whole time, shorter than idle
        with pytest.raises(ReadTimeout, match="overdue"):
            sock.recv(10)
        with pytest.raises(ReadTimeout, match="overdue"):  # and at once once past it
            sock.recv(10)


def test_deadline_socket_gives_up_on_a_reader_that_stopped():
    sock, peer = deadline_pair(idle=0.2)
    with sock, peer, pytest.raises(BrokenPipeError, match="stopped reading"):
        sock.sendall(bytes(64 << 20))  # far more than the socket buffers hold
