"""Real offload servers for integration tests: `python -m server` in a subprocess on a free loopback port.

Each server runs in its own session (process group), so teardown can stop gunicorn's master and
workers together and then check that none of them is left. No root needed.
"""

from __future__ import annotations

import pytest

from benchmarks.loopback import stop
from contracts.processes import group_alive
from tests.servers import start_server


def _served(tmp_path_factory, *args: str, failing_op: bool = False):
    server = start_server(tmp_path_factory.mktemp("server"), *args, failing_op=failing_op)
    try:
        yield server
    finally:
        stop(server.proc)
        assert not group_alive(server.proc.pid), f"server processes left behind:\n{server.log_text()}"


@pytest.fixture(scope="session")
def server(tmp_path_factory):
    """The default server (gunicorn, one worker of 8 threads, 256 MiB body limit)."""
    yield from _served(tmp_path_factory)


@pytest.fixture(scope="module")
def small_server(tmp_path_factory):
    """A server that takes at most 1 MiB per request, for 413."""
    yield from _served(tmp_path_factory, "--max-body-mb", "1")


@pytest.fixture(scope="module")
def failing_server(tmp_path_factory):
    """A server with one extra operation, `boom`, that raises inside the worker."""
    yield from _served(tmp_path_factory, failing_op=True)


@pytest.fixture(scope="module")
def strict_server(tmp_path_factory):
    """A server that drops a client silent for 1 s and wants a whole body within 3 s, for 408."""
    yield from _served(tmp_path_factory, "--read-timeout", "1", "--timeout", "3")


@pytest.fixture(scope="module")
def memory_server(tmp_path_factory):
    """A fresh server with a 16 MiB limit, for its worker's memory high-water mark."""
    yield from _served(tmp_path_factory, "--max-body-mb", "16", "--no-access-log")
