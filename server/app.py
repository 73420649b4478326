"""The Flask application: one endpoint per whitelisted operation, timed in three stages.

A request runs decode -> compute -> encode, each timed into `Server-Timing`. Reading the body is not
a stage: it is network time, and the client counts it as communication. Every failure becomes a JSON
`{"error", "detail"}` with its status and the stage times so far, and the worker keeps serving.
"""

from __future__ import annotations

import json

from flask import Flask, Request, Response, request
from werkzeug.exceptions import HTTPException, RequestEntityTooLarge

from contracts import __version__
from contracts.codecs import CODECS, UnknownCodec, get_codec
from contracts.ops import OPS, OpError, UnknownOp, get_op
from contracts.trials import DTYPES
from contracts.wire import CodecError
from server.stages import run_stages
from server.timing import StageClock

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
    error response while it is still sending; reading the rest lets it see the 413/404/415.
    """
    stream = req.environ.get("wsgi.input")
    left = limit
    while stream is not None and left > 0:
        chunk = stream.read(min(DRAIN_CHUNK, left))
        if not chunk:
            break
        left -= len(chunk)


def read_body(req: Request, max_body: int) -> bytes:
    """The whole body, or RequestEntityTooLarge if it is over `max_body`.

    Werkzeug raises early for a Content-Length over the limit, but cuts a chunked body off at the limit
    without complaint; one more byte from the server's own stream tells the two apart.
    """
    body = req.get_data(cache=False)
    if req.content_length is None and len(body) >= max_body and req.environ["wsgi.input"].read(1):
        raise RequestEntityTooLarge()
    return body


def create_app(max_body_mb: float = 256.0) -> Flask:
    app = Flask("server")
    max_body = int(max_body_mb * (1 << 20))
    app.config["MAX_CONTENT_LENGTH"] = max_body

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
        }
        return Response(json.dumps(info), mimetype="application/json")

    @app.post("/v1/ops/<op>")
    def run_op(op: str) -> Response:
        clock = StageClock()
        try:
            get_op(op)
            codec = get_codec(request.headers.get("X-Codec", "").strip().lower() or None)
            body = read_body(request, max_body)
            _, out, headers = run_stages(codec, body, request.headers, clock, op)
        except UnknownOp as exc:
            drain(request)
            return error_response(404, exc.error, exc.detail)
        except UnknownCodec as exc:
            drain(request)
            return error_response(415, "unknown codec", str(exc))
        except RequestEntityTooLarge:
            drain(request)
            return error_response(
                413,
                "body too large",
                f"the server accepts at most {max_body} bytes (python -m server --max-body-mb)",
            )
        except (CodecError, OpError) as exc:
            return error_response(400, exc.error, exc.detail, clock)
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
