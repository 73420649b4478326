"""Real offload servers for integration tests: `python -m server` in a subprocess on a free loopback port.

Each server runs in its own session (process group), so teardown can stop gunicorn's master and
workers together and then check that none of them is left. No root needed.
"""

from __future__ import annotations

import socket
import threading

import pytest

from benchmarks.loopback import free_port, stop
from client.grpc_offload import ready
from contracts.processes import group_alive
from contracts.stages import GRPC_SERVERS
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


@pytest.fixture(scope="module", params=GRPC_SERVERS)
def served(request, tmp_path_factory):
    """A server with both transports, its gRPC server in each language (server.languages); gRPC's body
    limit is the HTTP server's (--max-body-mb 1)."""
    port = free_port()
    base = port - GRPC_SERVERS.index(request.param)  # its port is the gRPC port plus its index
    server = start_server(
        tmp_path_factory.mktemp(f"grpc-{request.param}"),
        *("--grpc-port", str(base), "--grpc-servers", request.param, "--max-body-mb", "1"),
    )
    target = f"127.0.0.1:{port}"
    try:
        assert ready(target, 30.0), server.log_text()
        yield server, target
    finally:
        stop(server.proc)
        assert not group_alive(server.proc.pid), f"server processes left behind:\n{server.log_text()}"


class CountingProxy:
    """A TCP relay on loopback that counts the connections made through it: how many TCP
    connections a client really opened, whatever its library says."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.accepted = 0
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return  # closed
            self.accepted += 1
            upstream = socket.create_connection(self.target)
            for a, b in ((conn, upstream), (upstream, conn)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    @staticmethod
    def _pipe(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(1 << 16):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def close(self) -> None:
        self.listener.close()


@pytest.fixture
def proxy():
    """`proxy(host, port)`: a CountingProxy in front of that address, closed after the test."""
    made: list[CountingProxy] = []

    def make(host: str, port: int) -> CountingProxy:
        made.append(CountingProxy((host, port)))
        return made[-1]

    yield make
    for p in made:
        p.close()
