"""The gunicorn worker: threads for slow clients, deadlines on every read, one request per connection.

gunicorn's `gthread` worker keeps idle connections on a poller, but once a client has sent a first
byte a thread reads its headers and body with blocking calls and no timeout: a client that stops
sending holds that thread for good, and with gunicorn's sync worker (what this server ran before) the
only thread. This worker adds, per connection:

- an idle connection (nothing sent yet) goes back to the poller at once instead of holding a thread
  for gunicorn's 5 s wait, and is closed after `read_timeout` (gunicorn's `keepalive` setting);
- headers must arrive within `read_timeout`, the whole body within `timeout` of the headers, and no
  read waits more than `read_timeout` for the next byte: a read past either raises `ReadTimeout`
  (a `TimeoutError`; the application answers 408, gunicorn closes the connection quietly);
- a response the client stops reading for `read_timeout` is abandoned;
- the closing linger (drain, FIN) runs in the request's thread, bounded, not in the main loop that
  accepts connections and answers /v1/health;
- one malloc arena, as the single-threaded sync worker had: requests compute one at a time anyway,
  and memory one request freed then serves the next instead of staying in another thread's arena
  (with an arena per thread, the worker's RSS grew to several times one request's peak).

A connection is kept alive as the client asks: the sweep's `per-trial` connection policy sends
`Connection: close` with every request, so each trial pays its own TCP handshake (as the paper's CGI
requests did); `persistent` keeps one connection, idle between trials on the poller and closed after
`read_timeout` of silence. TLS is not supported here (gunicorn would wrap the socket after this
worker adopted it).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import math
import socket
import time

from gunicorn import util
from gunicorn.http.errors import NoMoreData
from gunicorn.workers.gthread import _DEFER, TConn, ThreadWorker

M_ARENA_MAX = -8  # glibc mallopt parameter
FIRST_BYTE_WAIT = 0.01  # s a new connection may hold a thread waiting for its first byte
CLOSE_LINGER = 0.5  # s to drain what a closed client still sends, so our last response is not reset


class ReadTimeout(NoMoreData, TimeoutError):
    """The client went silent or the request is overdue; gunicorn treats it as a vanished client."""

    def __init__(self, what: str) -> None:
        super().__init__()
        self.what = what

    def __str__(self) -> str:
        return self.what


class DeadlineSocket(socket.socket):
    """A client socket whose reads wait at most `idle` for a byte and never past `deadline`."""

    idle: float
    deadline: float

    @classmethod
    def adopt(cls, sock: socket.socket, idle: float) -> DeadlineSocket:
        new = cls(sock.family, sock.type, sock.proto, fileno=sock.detach())
        new.idle, new.deadline = idle, math.inf
        return new

    def _wait(self) -> float:
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise ReadTimeout("the request is overdue")
        return min(self.idle, left)

    def recv(self, bufsize: int, flags: int = 0) -> bytes:
        wait = self._wait()
        self.settimeout(wait)
        try:
            return super().recv(bufsize, flags)
        except TimeoutError:
            what = f"nothing received for {wait:.3g} s" if wait >= self.idle else "the request is overdue"
            raise ReadTimeout(what) from None

    def sendall(self, data: bytes, flags: int = 0) -> None:
        """Like socket.sendall, but with `idle` per send rather than for the whole response."""
        self.settimeout(self.idle)
        view = memoryview(data).cast("B")
        try:
            while view:
                view = view[self.send(view, flags) :]
        except TimeoutError:  # gunicorn ignores a broken pipe quietly: the client is gone for us
            raise BrokenPipeError(errno.EPIPE, "the client stopped reading the response") from None


def one_malloc_arena() -> bool:
    """Ask glibc for one arena for all threads; False where the C library is not glibc."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        return bool(libc.mallopt(M_ARENA_MAX, 1))
    except (OSError, AttributeError):
        return False


class BoundedThreadWorker(ThreadWorker):
    """gunicorn's gthread worker with the deadlines above; timeouts come from the ServerConfig."""

    def init_process(self) -> None:
        one_malloc_arena()  # before the thread pool exists
        super().init_process()

    def handle(self, conn: TConn):
        config = self.app.config  # the server.wsgi.ServerConfig this gunicorn application runs
        if not isinstance(conn.sock, DeadlineSocket):
            conn.sock = DeadlineSocket.adopt(conn.sock, config.read_timeout)
        if not conn.initialized and not conn.data_ready and not conn.wait_for_data(FIRST_BYTE_WAIT):
            return _DEFER  # to the poller: an idle connection holds no thread
        conn.sock.deadline = time.monotonic() + config.read_timeout  # for the headers
        keep = super().handle(conn)
        if keep is False:  # linger here, bounded, rather than in the main loop (finish_request)
            conn.sock.deadline = time.monotonic() + CLOSE_LINGER
            util.close_graceful(conn.sock, timeout=CLOSE_LINGER)
        return keep

    def handle_request(self, req, conn: TConn) -> bool:
        conn.sock.deadline = time.monotonic() + self.app.config.timeout  # for the body
        keep = super().handle_request(req, conn)
        # a refused request's body is left unread (say 100 GB announced): close, never drain it
        unread = getattr(req.body.reader, "length", None)
        return keep and unread == 0
