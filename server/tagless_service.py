"""The `tagless` transport's Python server: the lightweight-RPC study's service on a port of its own.

Frames as `contracts.tagless` writes them, over TCP, a connection's calls one after another (the
client's connection policy decides whether a connection carries one call or all of a trial's). Each
call: decode the request's payload, run the operation (`server.rpc_study_ops`), encode the reply;
with `TIMING` in the request's flags, the three stages' wall and CPU seconds go back as the reply's
trailer, as `Server-Timing` does for HTTP.

**Refusals, and the server goes on.** A payload that does not decode is answered `BAD_FRAME`, an
unknown method `UNKNOWN_METHOD`, a reply that would pass the body limit (a GetRandNums count, a
SayHello name past `MAX_NAME`) `TOO_LARGE`, and the connection stays usable (the frame's length kept
it in step). A header that cannot be a request (a status, a trailer, cut short) is answered
`BAD_FRAME`, and a payload past the body limit `TOO_LARGE` before any of it is read; then the
connection is closed, since its stream is out of step. A bug is answered `INTERNAL` and logged with
its traceback.

**Bounds.** The bytes held for calls at once, their request payloads and their replies until sent,
are at most `--max-body-mb` (the HTTP server's body limit, `contracts.limits`; one call alone may
hold its request and its reply, each within the limit): a call waits for room before it reads a payload or builds a reply (the reply's size is known from its request,
`server.rpc_study_ops.reply_bytes`), at most `BUDGET_WAIT_S`; then it is answered `BUSY` and its
connection closed, so no peer holds the others up for longer. Python's objects for a call come on
top: a LargeData message's members as integers, at most about 9 times its bytes (8192 members). A
payload must arrive within `PAYLOAD_S` of its header, however slowly it trickles. At most
`MAX_CONNECTIONS` connections at once (more are closed as they arrive); one silent for `IDLE_S` is
closed. Calls run one at a time, like the other servers' (trials never share a CPU), each stage
timed as the other servers' are (`server.timing.StageClock`), on the calling thread's CPU clock.

`python -m server --tagless-port N` runs this next to the HTTP server (as the gRPC servers run); the
child stops when its parent goes away.
"""

from __future__ import annotations

import logging
import socket
import socketserver
import sys
import threading
import time

from contracts.limits import Limits
from contracts.tagless import TIMING, Frame, Status, TaglessError, Timing, error_frame, read_frame, study
from server.lifetime import transport_parser, until_stopped
from server.rpc_study_ops import MAX_NAME, answer, reply_bytes
from server.timing import StageClock

log = logging.getLogger("offload-tagless")
MAX_CONNECTIONS = 64
IDLE_S = 120.0  # a connection silent this long is closed: it holds a thread
PAYLOAD_S = 300.0  # a payload must arrive within this long of its header, however it trickles
BUDGET_WAIT_S = 30.0  # a call waits at most this long for room in the budget, then is answered BUSY
MAX_BODY_MB = 4095.0  # a frame's lengths are 32-bit


class Budget:
    """Bytes held at once for calls (their request payloads, and their replies until sent), at most
    `limit`: a call waits for room before it reads or builds them, at most `BUDGET_WAIT_S`."""

    def __init__(self, limit: int, wait_s: float | None = None) -> None:
        self.limit, self.held = limit, 0
        self.wait_s = BUDGET_WAIT_S if wait_s is None else wait_s
        self._cond = threading.Condition()

    def take(self, n: int, own: int = 0) -> None:
        """Hold `n` more bytes for a caller that holds `own` already; TaglessError (BUSY) when there is
        no room for them in time. A call never waits for its own bytes: with nothing else held, it may
        hold its request and its reply (each at most the limit)."""
        with self._cond:
            room = lambda: self.held + n <= self.limit or self.held == own  # noqa: E731
            if not self._cond.wait_for(room, timeout=self.wait_s):
                raise TaglessError(
                    Status.BUSY, "the server holds its limit of payload bytes in other calls; try again"
                )
            self.held += n

    def give(self, n: int) -> None:
        with self._cond:
            self.held -= n
            self._cond.notify_all()


class Held:
    """The bytes one connection holds of the service's budget, given back at once when it is done."""

    def __init__(self, budget: Budget) -> None:
        self.budget, self.n = budget, 0

    def take(self, n: int) -> None:
        self.budget.take(n, own=self.n)
        self.n += n

    def give_all(self) -> None:
        self.budget.give(self.n)
        self.n = 0


class Service:
    """The study's service behind one lock: `call` answers one request frame with its reply frame."""

    def __init__(self, max_body: int) -> None:
        self.max_body = max_body
        self.schema = study()
        self._one = threading.Lock()
        self.budget = Budget(max_body)

    def call(self, request: Frame, held: Held | None = None) -> Frame:
        """The reply frame; its payload's bytes are taken of `held`'s budget before it is built."""
        method = self.schema.methods.get(request.method_id)
        if method is None:
            return error_frame(
                request.call_id, request.method_id, Status.UNKNOWN_METHOD, f"no method {request.method_id}"
            )
        try:
            if method.name == "SayHello" and len(request.payload) > 4 + MAX_NAME:
                raise TaglessError(Status.TOO_LARGE, f"SayHello: a name past {MAX_NAME} bytes")
            with self._one:
                payload, timing = self._stages(method, request.payload, held or Held(Budget(self.max_body)))
        except TaglessError as exc:
            return error_frame(request.call_id, request.method_id, exc.status, str(exc))
        except Exception as exc:  # a bug: logged with its traceback, answered, and the server goes on
            log.exception("%s failed", method.name)
            return error_frame(
                request.call_id, request.method_id, Status.INTERNAL, f"internal error: {type(exc).__name__}"
            )
        trailer = timing.pack() if request.flags & TIMING else b""
        return Frame(request.call_id, request.method_id, payload, trailer=trailer)

    def _stages(self, method, payload: bytes, held: Held) -> tuple[bytes, Timing]:
        """The call's three stages, timed as every server times its stages (`server.timing.StageClock`,
        each under the host's CPU lock; every stage on the thread's CPU clock, as the C++ server's)."""
        clock = StageClock(thread_clock=True)
        with clock.stage("decode"):
            values = method.request.decode(payload)
        size = reply_bytes(method.name, values, len(payload))
        if size > self.max_body:
            raise TaglessError(Status.TOO_LARGE, f"{method.name}: a reply of {size} bytes passes the limit")
        held.take(size)
        with clock.stage("compute"):
            reply = answer(method.name, values, self.max_body)
        with clock.stage("encode"):
            out = method.reply.encode(reply)
        ms, cpu = clock.ms, clock.cpu_ms
        return out, Timing(*(v / 1000.0 for s in ("decode", "compute", "encode") for v in (ms[s], cpu[s])))


class Connection(socketserver.BaseRequestHandler):
    server: Server

    def handle(self) -> None:
        sock: socket.socket = self.request
        sock.settimeout(IDLE_S)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        service = self.server.service
        reader = sock.makefile("rb")
        held = Held(service.budget)
        deadline: list[float | None] = [None]  # the payload being read must be in by then

        def reserve(n: int) -> None:
            held.take(n)
            deadline[0] = time.monotonic() + PAYLOAD_S

        def read(n: int) -> bytes:
            if deadline[0] is None:  # a header: its wait is the connection's idle time
                return reader.read(n)
            parts, left = [], n
            while left:
                remaining = deadline[0] - time.monotonic()
                if remaining <= 0:
                    raise TimeoutError(f"a payload of {n} bytes took over {PAYLOAD_S:g} s")
                sock.settimeout(min(IDLE_S, remaining))  # silence counts against the deadline too
                part = reader.read1(min(left, 1 << 20))
                if not part:
                    break
                parts.append(part)
                left -= len(part)
            return b"".join(parts)

        try:
            while True:
                try:
                    request = read_frame(read, service.max_body, reserve=reserve)
                except TaglessError as exc:  # out of step, or no room: answer, then close
                    sock.sendall(error_frame(0, 0, exc.status, str(exc)).pack())
                    return
                deadline[0] = None
                sock.settimeout(IDLE_S)
                if request is None:
                    return
                reply = service.call(request, held)
                del request  # its payload is no longer held
                sock.sendall(reply.pack())
                held.give_all()
                if reply.status == Status.BUSY:
                    return
        except OSError:  # the peer went away, stayed silent past IDLE_S, or trickled past PAYLOAD_S
            return
        finally:
            held.give_all()
            reader.close()


class Server(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, bind: str, port: int, max_body: int) -> None:
        self.address_family = socket.AF_INET6 if ":" in bind else socket.AF_INET
        self.service = Service(max_body)
        self.slots = threading.BoundedSemaphore(MAX_CONNECTIONS)
        super().__init__((bind, port), Connection)

    def verify_request(self, request, client_address) -> bool:
        return self.slots.acquire(blocking=False)  # past MAX_CONNECTIONS: closed at once

    def process_request_thread(self, request, client_address) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self.slots.release()


def serve(bind: str, port: int, max_body_mb: float, parent: int | None = None) -> None:
    """Serve until SIGTERM/SIGINT, or until `parent` (the HTTP server's master) is gone."""
    server = Server(bind, port, Limits.from_mb(max_body_mb).max_body)
    log.info("tagless %s on %s:%d", server.service.schema.name, bind, server.server_address[1])
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.5}, daemon=True).start()
    until_stopped(parent)
    server.shutdown()
    server.server_close()


def main(argv: list[str] | None = None) -> int:
    p = transport_parser("python -m server.tagless_service", __doc__.split("\n")[0])
    args = p.parse_args(argv)
    if not 0 < args.max_body_mb <= MAX_BODY_MB:
        p.error(f"--max-body-mb {args.max_body_mb:g}: must be above 0 and at most {MAX_BODY_MB:g}")
    logging.basicConfig(level=logging.INFO, format="[%(asctime)s] [tagless] %(levelname)s %(message)s")
    try:
        serve(args.bind, args.port, args.max_body_mb, args.parent)
    except OSError as exc:
        print(
            f"error: cannot listen on {args.bind}:{args.port}: {exc} (fix: choose a free --tagless-port)",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
