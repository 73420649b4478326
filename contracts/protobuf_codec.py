"""The `protobuf` codec: `contracts/offload.proto`'s OpRequest up and OpReply down.

The same messages travel over HTTP (`X-Codec: protobuf`) and over gRPC (`server.grpc_service`), and
both ends of both transports build and read them here, so a protobuf trial and a gRPC trial marshal
with exactly the same code. float64 matrices go in `values`, int32/int64 in `ints` (zigzag varints),
row-major. A message parsed by the official runtime is still untrusted: dimensions, dtype and the
number of entries are checked before any array is made, and nothing is evaluated.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
from google.protobuf.message import DecodeError

from contracts import offload_pb2 as pb
from contracts.image_wire import image_request, reply_images
from contracts.images import is_image_op
from contracts.wire import MAX_OPERANDS, Body, Codec, CodecError, Headers, prepare, resolve_dtype

SERVICE = pb.DESCRIPTOR.services_by_name["Offload"].full_name  # offload.v1.Offload
EXECUTE = f"/{SERVICE}/Execute"  # the gRPC method's path, as the generated stub calls it


def matrix_message(a: np.ndarray) -> pb.Matrix:
    rows, cols = a.shape
    entries = a.ravel().tolist()  # Python numbers: the runtime's fastest way in
    if a.dtype.kind == "f":
        return pb.Matrix(rows=rows, cols=cols, dtype=a.dtype.name, values=entries)
    return pb.Matrix(rows=rows, cols=cols, dtype=a.dtype.name, ints=entries)


def matrix_array(m: pb.Matrix, what: str) -> np.ndarray:
    """A Matrix message as an array, refusing one whose fields do not describe exactly one matrix."""
    dt = resolve_dtype(m.dtype or "float64")
    if m.rows < 1 or m.cols < 1:
        raise CodecError("bad shape", f"{what}: {m.rows}x{m.cols}; need positive rows and cols")
    entries, other = (m.values, m.ints) if dt.kind == "f" else (m.ints, m.values)
    field, other_field = ("values", "ints") if dt.kind == "f" else ("ints", "values")
    if len(other):
        raise CodecError("malformed body", f"{what}: {dt.name} entries go in {field}, not {other_field}")
    if len(entries) != m.rows * m.cols:
        raise CodecError(
            "entry count mismatch",
            f"{what} has {len(entries)} entries in {field}; {m.rows}x{m.cols} needs {m.rows * m.cols}",
        )
    a = np.asarray(entries)  # a copy out of the message, float64 or int64
    if dt.kind == "i":
        info = np.iinfo(dt)
        if a.min() < info.min or a.max() > info.max:
            raise CodecError("integer out of range", f"{what}: entries must fit {dt.name}")
    return a.astype(dt, copy=False).reshape(m.rows, m.cols)


def _parse(message: type, body: bytes, what: str):
    try:
        return message.FromString(bytes(body))
    except (DecodeError, RecursionError, ValueError) as exc:
        raise CodecError("malformed protobuf", f"{what} is not an {message.__name__}: {exc}") from None


class ProtobufCodec(Codec):
    """OpRequest {op, operands} up, OpReply {result} down; `op` may be empty on HTTP (the path says it)."""

    name = "protobuf"
    content_type = "application/x-protobuf"

    def encode_op_request(self, op: str, operands: Sequence[np.ndarray], dtype: str | None = None) -> bytes:
        if is_image_op(op):  # one image, encoded (contracts.image_wire)
            return image_request(op, operands[0])
        ops = prepare(operands, dtype)
        return pb.OpRequest(op=op, operands=[matrix_message(a) for a in ops]).SerializeToString()

    def decode_op_request(self, body: bytes, headers: Mapping[str, str]) -> tuple[str, list[np.ndarray]]:
        msg = _parse(pb.OpRequest, body, "request")
        if len(msg.operands) > MAX_OPERANDS:
            raise CodecError("too many operands", f"{len(msg.operands)} operands; at most {MAX_OPERANDS}")
        return msg.op, [matrix_array(m, f"operand {i}") for i, m in enumerate(msg.operands)]

    def encode_request(
        self, operands: Sequence[np.ndarray], dtype: str | None = None
    ) -> tuple[Body, Headers]:
        return self.encode_op_request("", operands, dtype), {"Content-Type": self.content_type}

    def decode_request(self, body: bytes, headers: Mapping[str, str]) -> list[np.ndarray]:
        return self.decode_op_request(body, headers)[1]

    def encode_response(self, result: np.ndarray) -> tuple[bytes, Headers]:
        reply = pb.OpReply(result=matrix_message(np.ascontiguousarray(result)))
        return reply.SerializeToString(), {"Content-Type": self.content_type}

    def max_response_bytes(self, shape: tuple[int, int], dtype: np.dtype) -> int:
        """An upper bound of the OpReply for a result (the server's limits check it before computing):
        8 bytes per float64, at most 10 per zigzag varint, plus the fields' tags and lengths."""
        per = 8 if np.dtype(dtype).kind == "f" else 10
        return shape[0] * shape[1] * per + 64

    def decode_response(self, body: bytes, headers: Mapping[str, str]) -> np.ndarray:
        msg = _parse(pb.OpReply, body, "response")
        if msg.images:  # an image op's reply: its images, decoded (a list of one or three)
            return reply_images(body)
        if not msg.HasField("result"):
            raise CodecError("malformed body", "the reply has no result")
        return matrix_array(msg.result, "result")
