"""Plain helpers for tests against a real offload server on loopback (the servers themselves are
fixtures in tests/integration/conftest.py)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import requests

from benchmarks.loopback import LoopbackServer, start

A = np.array([[1.0, 2.0], [3.0, 4.0]])
B = np.array([[5.0, 6.0], [7.0, 8.0]])
EXPECTED = {"mul": A @ B, "inv": np.linalg.inv(A), "log": np.log(A)}

# Starts the server like `python -m server`, after adding an operation that always fails: the only
# way to reach the catch-all 500 of a real server without putting a fault switch into the server.
FAILING_OP = """
import sys
from contracts.ops import OPS, Op
def boom(a):
    raise RuntimeError("deliberate test failure")
OPS["boom"] = Op("boom", 1, lambda operands: None, boom, "test only: always fails")
from server.__main__ import main
sys.exit(main(sys.argv[1:]))
"""


def start_server(tmp: Path, *args: str, failing_op: bool = False, timeout: float = 30.0) -> LoopbackServer:
    """`python -m server ARGS` on a free 127.0.0.1 port (with the `boom` operation when `failing_op`)."""
    head = [sys.executable, "-c", FAILING_OP] if failing_op else None
    return start(tmp, *args, head=head, timeout=timeout)


def post(url: str, op: str, body: bytes, codec: str | None = "json", **headers: str) -> requests.Response:
    if codec is not None:
        headers["X-Codec"] = codec
    return requests.post(f"{url}/v1/ops/{op}", data=body, headers=headers, timeout=30)


def assert_healthy(url: str) -> None:
    """The server answers its health check and a small multiplication."""
    health = requests.get(f"{url}/v1/health", timeout=10)
    assert health.status_code == 200 and health.json()["status"] == "ok"
    ok = post(url, "mul", json.dumps({"operands": [A.tolist(), B.tolist()]}).encode())
    assert ok.status_code == 200 and ok.json()["result"] == EXPECTED["mul"].tolist()
