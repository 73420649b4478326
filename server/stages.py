"""One request's three timed stages, decode -> compute -> encode, shared by the HTTP and gRPC paths.

Both transports call `run_stages`, so a request is checked, computed and marshalled by the same code
whichever way it arrived, and refused for the same reasons (`CodecError`, `OpError`, `UnknownOp`).
"""

from __future__ import annotations

from collections.abc import Mapping

from contracts.ops import execute, get_op
from contracts.wire import Codec, CodecError, Headers
from server.timing import StageClock


def run_stages(
    codec: Codec, body: bytes, headers: Mapping[str, str], clock: StageClock, op: str | None = None
) -> tuple[str, bytes, Headers]:
    """The operation run, the encoded result and its headers.

    `op` is the URL's operation (HTTP); a body that names one too must name the same. With no `op`
    (gRPC) the body's is the operation, checked against the table after decoding.
    """
    with clock.stage("decode"):
        named, operands = codec.decode_op_request(body, headers)
    if op is None:
        op = get_op(named).name
    elif named and named != op:
        raise CodecError("operation mismatch", f"the body names {named!r}, the URL {op!r}")
    with clock.stage("compute"):
        result = execute(op, operands)
    with clock.stage("encode"):
        out, out_headers = codec.encode_response(result)
    return op, out, out_headers
