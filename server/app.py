"""The Flask application: one endpoint per whitelisted operation, timed in three stages.

A request runs decode -> compute -> encode, each timed into `Server-Timing`. Reading the body is not
a stage: it is network time, and the client counts it as communication. Every failure becomes a JSON
`{"error", "detail"}` with its status and the stage times so far, and the worker keeps serving.

What a request may cost is checked against `contracts.limits` before anything is allocated: from the
headers when they declare the operands (raw codecs: before the body is read), and from the decoded
operands' shapes before computing. Requests decode, compute and encode one at a time (a lock), so
trials never share a CPU and only one request holds more than its body (docs/server.md, "Server limits").
"""

from __future__ import annotations

import io
import json
import threading
from collections.abc import Mapping

from flask import Flask, Request, Response, request
from werkzeug.exceptions import HTTPException, RequestEntityTooLarge

from contracts import __version__
from contracts.codecs import CODECS, get_codec
from contracts.limits import Limits, check_request
from contracts.ops import OPS, get_op
from contracts.trials import DTYPES
from contracts.wire import Codec, CodecError
from server.refusals import REFUSED, refusal_of
from server.stages import run_stages
from server.timing import StageClock

READ_CHUNK = 1 << 20
DRAIN_CHUNK = 1 << 16
DRAIN_LIMIT = 1 << 30  # bodies up to this much over the limit still get to read their 413


def error_response(status: int, error: str, detail: str = "", clock: StageClock | None = None) -> Response:
    resp = Response(
        json.dumps({"error": error, "detail": detail}), status=status, mimetype="application/json"
    )
    if clock is not None and clock.ms:
        resp.headers["Server-Timing"] = clock.header()
    return resp


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
        raise RequestEntityTooLarge()
    stream = req.environ["wsgi.input"]
    want = length if length is not None else max_body + 1
    buf = io.BytesIO()
    while buf.tell() < want:
        chunk = stream.read(min(READ_CHUNK, want - buf.tell()))
        if not chunk:
            break
        buf.write(chunk)
    if buf.tell() > max_body:
        raise RequestEntityTooLarge()
    return buf.getvalue()


def declared_check(op: str, codec: Codec, headers: Mapping[str, str], limits: Limits) -> None:
    """The limits, from headers that declare the operands; malformed ones are left to the decoder."""
    try:
        declared = codec.declared_operands(headers)
    except CodecError:
        return
    if declared is not None:
        check_request(op, *declared, codec, limits)


def create_app(max_body_mb: float = 256.0, read_timeout: float = 20.0, timeout: float = 900.0) -> Flask:
    app = Flask("server")
    limits = Limits.from_mb(max_body_mb)
    max_body = limits.max_body
    app.config["MAX_CONTENT_LENGTH"] = max_body
    one_at_a_time = threading.Lock()

    @app.get("/v1/health")
    def health() -> Response:
        ops = {name: {"arity": op.arity, "doc": op.doc} for name, op in OPS.items()}
        info = {
            "status": "ok",
            "version": __version__,
            "operations": ops,
            "codecs": list(CODECS),
            "dtypes": list(DTYPES),
            "max_body_bytes": max_body,
            "limits": {**limits.as_dict(), "read_timeout_s": read_timeout, "timeout_s": timeout},
        }
        return Response(json.dumps(info), mimetype="application/json")

    @app.post("/v1/ops/<op>")
    def run_op(op: str) -> Response:
        clock = StageClock()
        try:
            get_op(op)
            codec = get_codec(request.headers.get("X-Codec", "").strip().lower() or None)
            declared_check(op, codec, request.headers, limits)
            body = [read_body(request, max_body)]  # handed over: run_stages frees it once decoded
            with one_at_a_time:
                _, out, headers = run_stages(codec, body, request.headers, clock, limits, op)
        except REFUSED as exc:  # the status, error and detail of each: server.refusals
            if "decode" not in clock.ms:  # refused from the URL or headers, before the body was read
                drain(request)
            refusal = refusal_of(exc)
            return error_response(refusal.http, *refusal.error_and_detail(exc), clock)
        except RequestEntityTooLarge:
            drain(request)
            return error_response(
                413,
                "body too large",
                f"the server accepts at most {max_body} bytes (python -m server --max-body-mb)",
            )
        except TimeoutError as exc:
            return error_response(
                408,
                "request timeout",
                f"the body did not arrive in time ({exc}); the server waits {read_timeout:g} s for each "
                f"byte and {timeout:g} s for a whole body (python -m server --read-timeout, --timeout)",
            )
        except Exception as exc:  # a bug; the worker must keep serving, and the client still gets JSON
            app.logger.exception("POST /v1/ops/%s failed", op)
            return error_response(500, "internal error", f"{type(exc).__name__}: {exc}", clock)
        resp = Response(out, status=200, headers=headers)
        resp.headers["X-Codec"] = codec.name
        resp.headers["Server-Timing"] = clock.header()
        return resp

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

    return app
