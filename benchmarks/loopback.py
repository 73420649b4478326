"""A fresh offload server on loopback for one measurement: `python -m server` in its own session.

Like the integration tests' server: started on a free 127.0.0.1 port, waited for through
`/v1/health`, and stopped with its whole process group (gunicorn's master and worker), SIGTERM first.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import requests

from contracts.processes import stop_group

REPO = Path(__file__).resolve().parent.parent


def repo_env() -> dict[str, str]:
    """The environment of a child that imports the project's packages (benchmarks included) from here."""
    path = os.environ.get("PYTHONPATH")
    return {**os.environ, "PYTHONPATH": str(REPO) + (os.pathsep + path if path else "")}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class LoopbackServer:
    url: str
    proc: subprocess.Popen
    log: Path

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")

    def worker_pids(self) -> list[int]:
        """gunicorn's worker processes: the children of the master (our child)."""
        try:
            text = Path(f"/proc/{self.proc.pid}/task/{self.proc.pid}/children").read_text()
        except OSError:
            return []
        return [int(p) for p in text.split()]


def stop(proc: subprocess.Popen) -> None:
    """SIGTERM the server's process group, SIGKILL after a grace period; reap the master."""
    stop_group(proc.pid, grace=15.0)
    if proc.poll() is None:
        proc.wait(timeout=5)


def start(log_dir: Path, *args: str, head: list[str] | None = None, timeout: float = 60.0) -> LoopbackServer:
    """A server answering /v1/health on a free port; `head` replaces `python -m server` (tests)."""
    port = free_port()
    log = log_dir / f"server-{port}.log"
    argv = [*(head or [sys.executable, "-m", "server"]), "--bind", "127.0.0.1", "--port", str(port), *args]
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            argv, cwd=REPO, env=repo_env(), stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    server = LoopbackServer(f"http://127.0.0.1:{port}", proc, log)
    deadline = time.monotonic() + timeout
    while True:
        try:
            if requests.get(f"{server.url}/v1/health", timeout=2).status_code == 200:
                return server
        except requests.RequestException:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            stop(proc)
            raise RuntimeError(f"the loopback server did not come up:\n{server.log_text()[-2000:]}")
        time.sleep(0.1)


@contextmanager
def loopback_server(log_dir: Path, *args: str, timeout: float = 60.0) -> Iterator[LoopbackServer]:
    server = start(log_dir, *args, timeout=timeout)
    try:
        yield server
    finally:
        stop(server.proc)
