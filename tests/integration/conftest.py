"""Real offload servers for integration tests: `python -m server` in a subprocess on a free loopback port.

Each server runs in its own session (process group), so teardown can stop gunicorn's master and
workers together and then check that none of them is left. No root needed.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
import requests

REPO = Path(__file__).resolve().parents[2]

# Starts the server like `python -m server`, after adding an operation that always fails: the only
# way to reach the catch-all 500 of a real server without putting a fault switch into the server.
FAILING_OP = """
import sys
from server.ops import OPS, Op
def boom(a):
    raise RuntimeError("deliberate test failure")
OPS["boom"] = Op("boom", 1, lambda operands: None, boom, "test only: always fails")
from server.__main__ import main
sys.exit(main(sys.argv[1:]))
"""


@dataclass
class RunningServer:
    url: str
    proc: subprocess.Popen
    log: Path

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def stop(proc: subprocess.Popen) -> None:
    """SIGTERM the server's process group, SIGKILL after a grace period; reap the master."""
    for sig, grace in ((signal.SIGTERM, 15.0), (signal.SIGKILL, 5.0)):
        if not group_alive(proc.pid):
            break
        os.killpg(proc.pid, sig)
        try:
            proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            continue
        deadline = time.monotonic() + grace  # the master is gone; give its workers a moment too
        while group_alive(proc.pid) and time.monotonic() < deadline:
            time.sleep(0.05)
    if proc.poll() is None:
        proc.wait(timeout=5)


def start_server(tmp: Path, *args: str, failing_op: bool = False, timeout: float = 30.0) -> RunningServer:
    port = free_port()
    log = tmp / f"server-{port}.log"
    head = [sys.executable, "-c", FAILING_OP] if failing_op else [sys.executable, "-m", "server"]
    argv = [*head, "--bind", "127.0.0.1", "--port", str(port), *args]
    with open(log, "wb") as out:
        proc = subprocess.Popen(argv, cwd=REPO, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    server = RunningServer(f"http://127.0.0.1:{port}", proc, log)
    deadline = time.monotonic() + timeout
    while True:
        try:
            if requests.get(f"{server.url}/v1/health", timeout=2).status_code == 200:
                return server
        except requests.ConnectionError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            stop(proc)
            raise RuntimeError(f"the server did not come up:\n{server.log_text()}")
        time.sleep(0.1)


def _served(tmp_path_factory, *args: str, failing_op: bool = False):
    server = start_server(tmp_path_factory.mktemp("server"), *args, failing_op=failing_op)
    try:
        yield server
    finally:
        stop(server.proc)
        assert not group_alive(server.proc.pid), f"server processes left behind:\n{server.log_text()}"


@pytest.fixture(scope="session")
def server(tmp_path_factory):
    """The default server (gunicorn, one sync worker, 256 MiB body limit)."""
    yield from _served(tmp_path_factory)


@pytest.fixture(scope="module")
def small_server(tmp_path_factory):
    """A server that takes at most 1 MiB per request, for 413."""
    yield from _served(tmp_path_factory, "--max-body-mb", "1")


@pytest.fixture(scope="module")
def failing_server(tmp_path_factory):
    """A server with one extra operation, `boom`, that raises inside the worker."""
    yield from _served(tmp_path_factory, failing_op=True)
