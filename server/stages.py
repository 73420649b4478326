"""One request's three timed stages, decode -> compute -> encode, as both transports run them.

Both the HTTP path (`server.app`, under its one-request-at-a-time lock) and the gRPC path
(`server.grpc_service`) run them through `run_stages`: the same limits (`contracts.limits`) before
decoding and before computing, the same op table, the same codec code, and the body and operands
dropped as soon as they are no longer needed.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from contracts.limits import Limits, check_body, check_request
from contracts.ops import execute, get_op
from contracts.wire import Codec, CodecError, Headers
from server.timing import StageClock


def check_named_op(named: str | None, op: str | None) -> None:
    """A body that names an op (`named`) must name the URL's `op`, when there is one (HTTP; gRPC's
    body alone names it): a CodecError otherwise. For the matrix and the image ops alike."""
    if op and named and named != op:
        raise CodecError("operation mismatch", f"the body names {named!r}, the URL {op!r}")


def decode_operands(codec: Codec, body: bytes, headers: Mapping[str, str], op: str) -> list[np.ndarray]:
    """The operands of a request for the URL's `op`; a body that names an op too must name the same."""
    named, operands = codec.decode_op_request(body, headers)
    check_named_op(named, op)
    return operands


def run_stages(
    codec: Codec,
    body: list[bytes],
    headers: Mapping[str, str],
    clock: StageClock,
    limits: Limits,
    op: str | None = None,
) -> tuple[str, bytes, Headers]:
    """Decode, compute and encode one request: the op, the encoded result and its headers.

    `op` is the URL's (HTTP); without it the body names the op (gRPC). `body` is handed over in a
    list the function empties, so the body's memory is freed as soon as it is decoded (the caller
    keeps no reference; raw operands are views of it and keep what they need).
    """
    with clock.stage("decode") as stage:
        data = body.pop()
        check_body(codec, data, limits)
        if op is None:
            named, operands = codec.decode_op_request(data, headers)
            op = get_op(named).name
            stage.repeatable(lambda d=data: codec.decode_op_request(d, headers))
        else:
            operands = decode_operands(codec, data, headers, op)
            stage.repeatable(lambda d=data, o=op: decode_operands(codec, d, headers, o))
        del data  # JSON text is no longer needed once parsed (the stage drops its own reference)
        size = operands[0].shape[0] if operands and operands[0].ndim else 0
        stage.work(op, size, codec.name, sum(a.nbytes for a in operands))
    if operands:
        check_request(op, operands[0].dtype, [a.shape for a in operands], codec, limits)
    with clock.stage("compute") as stage:
        result = execute(op, operands)
        stage.work(op, size)
        stage.repeatable(lambda o=op, a=operands: execute(o, a))
    del operands
    with clock.stage("encode") as stage:
        out, out_headers = codec.encode_response(result)
        stage.work(op, size, codec.name, result.nbytes)
        stage.repeatable(lambda r=result: codec.encode_response(r))
    return op, out, out_headers
