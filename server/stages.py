"""One request's three timed stages, decode -> compute -> encode, as both transports run them.

The HTTP path (`server.app`) runs them inline, under its one-request-at-a-time lock, dropping the
body and the operands as soon as they are no longer needed; it calls `decode_operands` here for the
one check that depends on the transport (a protobuf body that names its op). The gRPC path
(`server.grpc_service`) runs the same steps through `run_stages`: the same limits (`contracts.limits`)
before decoding and before computing, the same op table, the same codec code.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from contracts.limits import Limits, check_body, check_request
from contracts.ops import execute, get_op
from contracts.wire import Codec, CodecError, Headers
from server.timing import StageClock


def decode_operands(codec: Codec, body: bytes, headers: Mapping[str, str], op: str) -> list[np.ndarray]:
    """The operands of a request for the URL's `op`; a body that names an op too must name the same."""
    named, operands = codec.decode_op_request(body, headers)
    if named and named != op:
        raise CodecError("operation mismatch", f"the body names {named!r}, the URL {op!r}")
    return operands


def run_stages(
    codec: Codec, body: bytes, headers: Mapping[str, str], clock: StageClock, limits: Limits
) -> tuple[str, bytes, Headers]:
    """A request whose body names its op (gRPC): the op, the encoded result and its headers."""
    with clock.stage("decode"):
        check_body(codec, body, limits)
        named, operands = codec.decode_op_request(body, headers)
    op = get_op(named).name
    if operands:
        check_request(op, operands[0].dtype, [a.shape for a in operands], codec, limits)
    with clock.stage("compute"):
        result = execute(op, operands)
    del operands
    with clock.stage("encode"):
        out, out_headers = codec.encode_response(result)
    return op, out, out_headers
