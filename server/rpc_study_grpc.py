"""The lightweight-RPC study's service over gRPC (`rpcstudy.v1.Study`), beside `offload.v1.Offload`.

The same four operations as the tagless server's (`server.rpc_study_ops`), written as a gRPC service
is: on protobuf messages (`contracts.rpc_study_proto`, built from the same schema, so a call carries
the same values either way). Like `server.grpc_service`'s Execute, a method takes the request's
serialized bytes, so that parsing is the timed `decode` stage; `compute` builds the reply message,
`encode` serializes it, each timed as every server's stages are (`server.timing.StageClock`), and the
three go back in the trailing metadata `server-timing`, as the tagless server's trailer carries them.
Refusals: a request that does not parse INVALID_ARGUMENT, a GetRandNums count below 0
INVALID_ARGUMENT, and RESOURCE_EXHAUSTED for one whose reply could pass the body limit (5 bytes a
value, a varint's most) or a SayHello name past `server.rpc_study_ops.MAX_NAME`; the server goes on.
"""

from __future__ import annotations

import grpc
import numpy as np
from google.protobuf.message import DecodeError

from contracts.limits import Limits
from contracts.rpc_study_proto import SERVICE, messages
from contracts.tagless import Status, TaglessError, study
from server.rpc_study_ops import MAX_NAME, RAND_MAX
from server.timing import StageClock

CODES = {
    Status.BAD_FRAME: grpc.StatusCode.INVALID_ARGUMENT,
    Status.TOO_LARGE: grpc.StatusCode.RESOURCE_EXHAUSTED,
}
_rng = np.random.default_rng()
VARINT_MAX = 5  # bytes of a value in [0, 2^31 - 1] as a varint
CHUNK = 1 << 16


def compute(name: str, request, reply_type: type, max_reply: int):
    """The reply message to `request` of method `name`, built as a gRPC servicer builds it."""
    if name == "SayHello":
        return reply_type(message=f"Hello {request.name}")
    if name == "Average":
        values = np.asarray(request.values, dtype=np.int32)
        return reply_type(value=float(values.mean(dtype=np.float64)) if len(values) else 0.0)
    if name == "GetRandNums":
        if request.n < 0:
            raise TaglessError(Status.BAD_FRAME, f"GetRandNums: a count of {request.n}")
        if VARINT_MAX * request.n + 10 > max_reply:  # a packed field: its tag, its length, the varints
            raise TaglessError(Status.TOO_LARGE, f"GetRandNums: {request.n} values pass the reply limit")
        reply = reply_type()
        for start in range(0, request.n, CHUNK):  # a chunk at a time: no list of n Python integers
            n = min(CHUNK, request.n - start)
            reply.values.extend(_rng.integers(0, RAND_MAX, size=n, endpoint=True, dtype=np.int32))
        return reply
    return request  # SendRcvLargeDataK: the message echoed


def handler(name: str, request_type: type, reply_type: type, limits: Limits):
    def call(body: bytes, context: grpc.ServicerContext) -> bytes:
        clock = StageClock(thread_clock=True)  # as the tagless server's: the call's thread alone
        try:
            if name == "SayHello" and len(body) > MAX_NAME + 8:  # its tag and length, then the name
                raise TaglessError(Status.TOO_LARGE, f"SayHello: a name past {MAX_NAME} bytes")
            with clock.stage("decode"):
                request = request_type.FromString(body)
            with clock.stage("compute"):
                reply = compute(name, request, reply_type, limits.max_body)
            with clock.stage("encode"):
                out = reply.SerializeToString()
            return out
        except DecodeError as exc:
            code, message = grpc.StatusCode.INVALID_ARGUMENT, f"{name}: the request does not parse: {exc}"
        except TaglessError as exc:
            code, message = CODES[exc.status], str(exc)
        finally:
            context.set_trailing_metadata((("server-timing", clock.header()),))
        context.abort(code, message)

    return grpc.unary_unary_rpc_method_handler(call)  # bytes in, bytes out: parsing is a stage


def handlers(limits: Limits) -> grpc.GenericRpcHandler:
    """The study's methods, for `grpc.Server.add_generic_rpc_handlers`."""
    classes = messages()
    return grpc.method_handlers_generic_handler(
        SERVICE,
        {
            m.name: handler(m.name, classes[m.request.name], classes[m.reply.name], limits)
            for m in study().methods.values()
        },
    )
