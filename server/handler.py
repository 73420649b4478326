"""One HTTP request to the offload server, whatever runs it: the Flask app under gunicorn (`wsgi`
stack, `server.app`) or a fresh process per request under lighttpd (`cgi` stack, `server.cgi`).

Both stacks hand this module the URL's op, the request headers and a way to read the body, and send
back the `Reply` it returns, so they share the op table, the codecs, the limits (`contracts.limits`),
the refusals (`server.refusals`) and the stage clock (`server.timing`): a request refused on one
stack is refused with the same status and JSON on the other. What differs stays with each stack: how
the body arrives (a socket with deadlines, or CGI's stdin) and how a refused body is drained.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass, field

from contracts import __version__
from contracts.codecs import CODEC_TEXT_HEADER, CODECS, get_codec
from contracts.image_wire import ImageWire
from contracts.images import IMAGE_OPS, is_image_op
from contracts.limits import Limits, check_request
from contracts.ops import OPS, get_op
from contracts.stages import COMPACT, DTYPES
from contracts.wire import Codec, CodecError
from server.image_stages import run_image_stages
from server.refusals import REFUSED, refusal_of
from server.stages import run_stages
from server.timing import StageClock

PID_HEADER = "X-Server-Pid"  # the process that handled the request: one per request on the cgi stack


class BodyTooLarge(Exception):
    """The body is over the server's limit (413); raised by a stack's body reader."""


@dataclass
class Reply:
    """What the stack sends back: status, headers (Content-Type among them) and body."""

    status: int
    body: bytes
    headers: dict[str, str] = field(default_factory=dict)


def error_reply(status: int, error: str, detail: str = "", clock: StageClock | None = None) -> Reply:
    """The JSON error every refusal gets, with the stage times so far."""
    headers = {"Content-Type": "application/json", PID_HEADER: str(os.getpid())}
    if clock is not None and clock.ms:
        headers["Server-Timing"] = clock.header()
    return Reply(status, json.dumps({"error": error, "detail": detail}).encode(), headers)


def too_large_detail(max_body: int) -> str:
    return f"the server accepts at most {max_body} bytes (python -m server --max-body-mb)"


def refused_reply(exc: Exception, limits: Limits, clock: StageClock, drain: Callable[[], None]) -> Reply:
    """The JSON error of a refused request: one of server.refusals' (its status, error and detail) or
    a body over the limit (413). A body refused before it was read (from the URL or the headers, or
    too large) is drained first."""
    if isinstance(exc, BodyTooLarge):
        drain()
        return error_reply(413, "body too large", too_large_detail(limits.max_body))
    if "decode" not in clock.ms:  # refused before the body was read
        drain()
    refusal = refusal_of(exc)
    return error_reply(refusal.http, *refusal.error_and_detail(exc), clock)


def declared_check(op: str, codec: Codec, headers: Mapping[str, str], limits: Limits) -> None:
    """The limits, from headers that declare the operands; malformed ones are left to the decoder."""
    try:
        declared = codec.declared_operands(headers)
    except CodecError:
        return
    if declared is not None:
        check_request(op, *declared, codec, limits)


def health(
    limits: Limits, stack: str, work_slots: int = 1, pace: str | None = None, **timeouts: float
) -> Reply:
    """GET /v1/health: what this server runs and what one request may cost it (`work_slots` requests
    at once; `pace`: the device its stages last the time of)."""
    info = {
        "status": "ok",
        "version": __version__,
        "stack": stack,
        "work_slots": work_slots,
        "pace": pace,
        "operations": {name: {"arity": op.arity, "doc": op.doc} for name, op in OPS.items()},
        "image_operations": {name: list(outputs) for name, outputs in IMAGE_OPS.items()},
        "codecs": list(CODECS),
        "dtypes": list(DTYPES),
        "max_body_bytes": limits.max_body,
        "limits": {**limits.as_dict(), **timeouts},
    }
    return Reply(200, json.dumps(info).encode(), {"Content-Type": "application/json"})


def handle_op(
    op: str,
    headers: Mapping[str, str],
    read_body: Callable[[], bytes],
    limits: Limits,
    clock: StageClock,
    *,
    drain: Callable[[], None] = lambda: None,
    one_at_a_time: AbstractContextManager | None = None,
) -> Reply:
    """POST /v1/ops/<op>: check, read, decode, compute, encode; a refusal is a JSON error.

    `read_body` raises BodyTooLarge past the limit (and TimeoutError on the wsgi stack, answered by
    the caller, which knows its timeouts); `drain` reads what is left of a body refused before it was
    read; `one_at_a_time` (the server's work slots) holds the stages, so that at most that many
    requests work at once, and the wait for it is the `queue` entry of the request's timing. A bug (any other
    exception) is the caller's to answer with 500.
    """
    if is_image_op(op):
        return handle_image_op(op, headers, read_body, limits, clock, drain, one_at_a_time)
    try:
        get_op(op)
        # X-Codec-Text: the text of the reply (the era's, issue 45); the request decodes either way
        codec = get_codec(headers.get("X-Codec", "").strip().lower() or None, headers.get(CODEC_TEXT_HEADER))
        declared_check(op, codec, headers, limits)
        body = [read_body()]  # handed over: run_stages frees it once decoded
        with clock.queued(one_at_a_time):
            _, out, out_headers = run_stages(codec, body, headers, clock, limits, op)
    except (*REFUSED, BodyTooLarge) as exc:
        return refused_reply(exc, limits, clock, drain)
    reply_headers = {**out_headers, "X-Codec": codec.name, PID_HEADER: str(os.getpid())}
    if getattr(codec, "text", COMPACT) != COMPACT:  # what it wrote, so a client can tell
        reply_headers[CODEC_TEXT_HEADER] = codec.text
    reply_headers["Server-Timing"] = clock.header()
    return Reply(200, out, reply_headers)


def handle_image_op(
    op: str,
    headers: Mapping[str, str],
    read_body: Callable[[], bytes],
    limits: Limits,
    clock: StageClock,
    drain: Callable[[], None],
    one_at_a_time: AbstractContextManager | None,
) -> Reply:
    """POST /v1/ops/<image op>: the image in the body as `X-Codec` carries it (`contracts.image_wire`:
    raw, JSON with base64, protobuf), the filtered image or images back in the same format."""
    try:
        wire = ImageWire(headers.get("X-Codec", "").strip().lower() or "json")
        body = [read_body()]
        with clock.queued(one_at_a_time):
            _, out, out_headers = run_image_stages(wire, body, headers, clock, limits, op)
    except (*REFUSED, BodyTooLarge) as exc:
        return refused_reply(exc, limits, clock, drain)
    reply_headers = {**out_headers, "X-Codec": wire.name, PID_HEADER: str(os.getpid())}
    reply_headers["Server-Timing"] = clock.header()
    return Reply(200, out, reply_headers)
