"""Calls over the `tagless` transport: the client's side of `contracts.tagless`.

One `TaglessClient` per server; its connection policy is the other transports' (`persistent`: one
connection carries every call until `close`; else a connection per call, opened and closed inside
it, as a per-trial HTTP request pays its handshake). Each call returns the reply's values, the
server's stage times when asked (its trailer), and the bytes the call's frames put on the stream
(header, payload and trailer, both ways: what the study's packet sizes are made of, before TCP's
and IP's own).
"""

from __future__ import annotations

import socket
from collections.abc import Sequence
from dataclasses import dataclass

from contracts.tagless import (
    TIMING,
    Frame,
    Method,
    Schema,
    Status,
    TaglessError,
    Timing,
    error_message,
    read_frame,
    study,
)

MAX_REPLY = 1 << 30  # the largest reply a client takes (the server's own limit is lower)


def ready(target: str, timeout: float) -> bool:
    """Whether the tagless server at `target` (HOST:PORT) answers a SayHello within `timeout` seconds."""
    import time

    host, port = target.rsplit(":", 1)
    deadline = time.monotonic() + timeout
    while True:
        try:
            with TaglessClient(host.strip("[]"), int(port), persistent=False, timeout=max(timeout, 0.5)) as c:
                return c.call("SayHello", ("testbed",)).values == ("Hello testbed",)
        except (OSError, CallRefused, TaglessError):  # TaglessError: something else answers there
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.1)


class CallRefused(Exception):
    """The server refused a call (a tagless error frame, or a gRPC status): `status` its code, by `name`."""

    def __init__(self, method: str, status: int, message: str, name: str | None = None) -> None:
        if name is None:  # a tagless status
            name = Status(status).name if status in Status._value2member_map_ else str(status)
        super().__init__(f"the server refused {method}: {name}: {message}")
        self.status = status
        self.name = name
        self.message = message


@dataclass(frozen=True)
class Reply:
    values: tuple
    timing: Timing | None
    bytes_up: int
    bytes_down: int


class TaglessClient:
    def __init__(
        self,
        host: str,
        port: int,
        persistent: bool = True,
        timeout: float = 60.0,
        schema: Schema | None = None,
    ) -> None:
        self.address = (host, port)
        self.persistent = persistent
        self.timeout = timeout
        self.schema = schema or study()
        self._sock: socket.socket | None = None
        self._reader = None
        self._next_id = 1

    def method(self, name: str) -> Method:
        return self.schema.method(name)

    def call(self, method: Method | str, values: Sequence, timing: bool = False) -> Reply:
        """One call of `method` with its request's `values`: its reply; CallRefused for an error frame."""
        if isinstance(method, str):
            method = self.method(method)
        request = Frame(
            self._next_id, method.id, method.request.encode(values), flags=TIMING if timing else 0
        )
        self._next_id = (self._next_id + 1) & 0xFFFFFFFF
        sock, reader = self._connection()
        try:
            sock.sendall(request.pack())
            reply = read_frame(reader.read, MAX_REPLY, request=False)
        except BaseException:
            self.close()
            raise
        finally:
            if not self.persistent:
                self.close()
        if reply is None or (reply.call_id != request.call_id and reply.status == Status.OK):
            self.close()  # the stream is gone or out of step: the next call opens another
            raise ConnectionError(
                f"the tagless server at {self.address} closed the connection or answered out of step "
                f"during {method.name}"
            )
        if reply.status != Status.OK:
            if reply.call_id != request.call_id or reply.status == Status.BUSY:  # the server closes it
                self.close()
            raise CallRefused(method.name, reply.status, error_message(reply))
        return Reply(
            method.reply.decode(reply.payload),
            Timing.unpack(reply.trailer) if reply.trailer else None,
            request.wire_bytes,
            reply.wire_bytes,
        )

    def _connection(self):
        if self._sock is None:
            sock = socket.create_connection(self.address, timeout=self.timeout)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self._sock, self._reader = sock, sock.makefile("rb")
        return self._sock, self._reader

    def close(self) -> None:
        if self._sock is not None:
            self._reader.close()
            self._sock.close()
            self._sock = self._reader = None

    def __enter__(self) -> TaglessClient:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
