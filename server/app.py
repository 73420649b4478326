"""The Flask application (the `wsgi` stack): one endpoint per whitelisted operation, timed in three
stages; the request itself is `server.handler`'s, shared with the `cgi` stack.

A request runs decode -> compute -> encode, each timed into `Server-Timing`. Reading the body is not
a stage: it is network time, and the client counts it as communication. Every failure becomes a JSON
`{"error", "detail"}` with its status and the stage times so far, and the worker keeps serving.

What a request may cost is checked against `contracts.limits` before anything is allocated: from the
headers when they declare the operands (raw codecs: before the body is read), and from the decoded
operands' shapes before computing. Requests decode, compute and encode one at a time (a lock; `--work-slots
W`: W at a time, the server of several clients), so trials never share a CPU and only that many requests
hold more than their body (docs/server.md, "Server limits").
"""

from __future__ import annotations

import io
import threading
from pathlib import Path

from flask import Flask, Request, Response, current_app, request
from werkzeug.exceptions import HTTPException

from contracts.device import DeviceProfile
from contracts.limits import Limits
from contracts.transfer import PART_HEADER, TRANSFER_HEADER, parse_part
from server import handler
from server.datasets import add_routes as add_dataset_routes
from server.handler import BodyTooLarge, Reply, error_reply
from server.parts import Rendezvous
from server.timing import StageClock

READ_CHUNK = 1 << 20
DRAIN_CHUNK = 1 << 16
DRAIN_LIMIT = 1 << 30  # bodies up to this much over the limit still get to read their 413


def error_response(status: int, error: str, detail: str = "", clock: StageClock | None = None) -> Response:
    return to_response(error_reply(status, error, detail, clock))


def to_response(reply: Reply) -> Response:
    return Response(reply.body, status=reply.status, headers=reply.headers)


def drain(req: Request, limit: int = DRAIN_LIMIT) -> None:
    """Read and drop what is left of a body we refuse, up to `limit` bytes.

    Closing a socket with unread data makes the kernel send RST, and the client may then lose our
    error response while it is still sending; reading the rest lets it see the 413/404/415. A body
    declared longer than `limit` is not waited for, and a client that goes silent (the worker's read
    timeout) gets its answer anyway.
    """
    if (req.content_length or 0) > limit:
        return
    stream = req.environ.get("wsgi.input")
    left = limit
    try:
        while stream is not None and left > 0:
            chunk = stream.read(min(DRAIN_CHUNK, left))
            if not chunk:
                break
            left -= len(chunk)
    except OSError:
        pass


def read_body(req: Request, max_body: int) -> bytes:
    """The whole body, or RequestEntityTooLarge if it is over `max_body`.

    Read in chunks into one growing buffer (no second copy at the end), never more than `max_body`
    plus one byte, whatever Content-Length or chunked encoding says. A client that stops sending makes
    the worker's socket raise TimeoutError (server.gunicorn_worker), which the caller answers with 408.
    """
    length = req.content_length
    if length is not None and length > max_body:
        raise BodyTooLarge()
    stream = req.environ["wsgi.input"]
    want = length if length is not None else max_body + 1
    buf = io.BytesIO()
    while buf.tell() < want:
        chunk = stream.read(min(READ_CHUNK, want - buf.tell()))
        if not chunk:
            break
        buf.write(chunk)
    if buf.tell() > max_body:
        raise BodyTooLarge()
    return buf.getvalue()


class _OpRequests:
    """What `POST /v1/ops/<op>` needs besides the request, made once per application: the limits, the
    work slots (`--work-slots`), the rendezvous of requests sent over several connections, the device
    every stage is paced to, and the timeouts its 408 names."""

    def __init__(
        self, limits: Limits, work_slots: int, pace: DeviceProfile | None, read_timeout: float, timeout: float
    ) -> None:
        self.limits, self.pace = limits, pace
        self.read_timeout, self.timeout = read_timeout, timeout
        self.slots = threading.BoundedSemaphore(work_slots)
        self.rendezvous = Rendezvous(limits.max_body, timeout)  # requests sent over several connections

    def run_op(self, op: str) -> Response:
        """The route: one request, or one part of a request sent over several connections."""
        clock = StageClock.asked(request.headers, self.pace)
        try:
            part = parse_part(request.headers.get(TRANSFER_HEADER), request.headers.get(PART_HEADER))
        except ValueError as exc:
            drain(request)
            return error_response(400, "bad part", str(exc))
        try:
            if part is None:
                reply = handler.handle_op(
                    op,
                    request.headers,
                    lambda: read_body(request, self.limits.max_body),
                    self.limits,
                    clock,
                    drain=lambda: drain(request),
                    one_at_a_time=self.slots,
                )
            else:
                reply = self.run_part(op, *part, clock)
        except TimeoutError as exc:
            return error_response(
                408,
                "request timeout",
                f"the body did not arrive in time ({exc}); the server waits {self.read_timeout:g} s for each "
                f"byte and {self.timeout:g} s for a whole body (python -m server --read-timeout, --timeout)",
            )
        except Exception as exc:  # a bug; the worker must keep serving, and the client still gets JSON
            current_app.logger.exception("POST /v1/ops/%s failed", op)
            return error_response(500, "internal error", f"{type(exc).__name__}: {exc}", clock)
        return to_response(reply)

    def run_part(self, op: str, tid: str, index: int, parts: int, clock: StageClock) -> Reply:
        """One part of a request sent over several connections (`server.parts`)."""
        max_body, rendezvous = self.limits.max_body, self.rendezvous
        try:
            data = read_body(request, max_body)
        except BodyTooLarge:
            drain(request)
            return handler.error_reply(413, "body too large", handler.too_large_detail(max_body))
        arrived = rendezvous.arrive(tid, index, parts, data)
        del data
        if isinstance(arrived, Reply):
            return arrived
        transfer, complete = arrived
        if complete:  # the last part in: the request runs here, on the parts joined in order
            body = rendezvous.take(transfer)
            try:
                reply = handler.handle_op(
                    op, request.headers, lambda: body, self.limits, clock, one_at_a_time=self.slots
                )
            except Exception:
                rendezvous.publish(
                    transfer, handler.error_reply(500, "internal error", "see the server's log")
                )
                raise
            del body
            rendezvous.publish(transfer, reply)
        return rendezvous.answer(transfer, index)


def create_app(
    max_body_mb: float = 256.0,
    read_timeout: float = 20.0,
    timeout: float = 900.0,
    work_slots: int = 1,
    pace: DeviceProfile | None = None,
    datasets: Path | None = None,
) -> Flask:
    """`work_slots`: requests that decode, compute and encode at once (the others wait, in `queue`);
    `pace`: the server device every stage lasts the time of (`server.timing.StageClock`); `datasets`:
    the directory of the energy study's datasets it serves (`server.datasets`; None: none)."""
    app = Flask("server")
    limits = Limits.from_mb(max_body_mb)
    app.config["MAX_CONTENT_LENGTH"] = limits.max_body

    @app.get("/v1/health")
    def health() -> Response:
        return to_response(
            handler.health(
                limits,
                "wsgi",
                work_slots=work_slots,
                pace=pace.name if pace else None,
                read_timeout_s=read_timeout,
                timeout_s=timeout,
            )
        )

    app.post("/v1/ops/<op>")(_OpRequests(limits, work_slots, pace, read_timeout, timeout).run_op)
    add_dataset_routes(app, datasets)
    _add_error_handlers(app)
    return app


def _add_error_handlers(app: Flask) -> None:
    """Every error, Flask's own included (404, 405, 413), answers as the operations' errors do: JSON
    `{"error", "detail"}` with its status."""

    @app.errorhandler(HTTPException)
    def http_error(exc: HTTPException) -> Response:
        resp = error_response(exc.code or 500, (exc.name or "error").lower(), exc.description or "")
        if getattr(exc, "valid_methods", None):
            resp.headers["Allow"] = ", ".join(exc.valid_methods)
        return resp

    @app.errorhandler(Exception)
    def internal_error(exc: Exception) -> Response:
        app.logger.exception("unhandled error")
        return error_response(500, "internal error", f"{type(exc).__name__}: {exc}")
