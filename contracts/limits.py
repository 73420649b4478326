"""What one request may cost the server, checked from the operands' shapes before anything is allocated.

A small body can describe a large job: a 16384x1 @ 1x16384 product from 256 KiB, two 8192x8192
matrices from 1 MiB of zlib, a JSON response 25 bytes per element. So every size the server will hold
is bounded by the one configured limit, `--max-body-mb` (M), not only the body:

- the request body: at most M (checked while reading it);
- the operands once decoded (what `raw-zlib` inflates to, what JSON numbers become): at most M;
- the response body, from the codec's worst case per element (`Codec.max_response_bytes`): at most M,
  which also bounds the result, smaller than its encoding in every codec;
- what decoding builds on the way (`Codec.decode_overhead`: JSON's Python objects, 4x the text of
  a row of floats, 40x for a column of zeros): at most 5M, checked from the body before parsing;
- the work (multiply-adds, integer ones weighted, see `contracts.ops.Cost`): at most that of
  multiplying two square float64 matrices that together fill M in `raw` ((M/16)^1.5; 4096x4096 at
  the default 256 MiB, a few seconds).

`check_request` is a plain function of the op, the operands' dtype and shapes, the codec and the
limits, so every transport calls the same one: the HTTP server before reading a body whose headers
declare the shapes (`Codec.declared_operands`) and again after decoding any body, before computing.
What this bounds in memory is measured and documented in docs/server.md ("Server limits").
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from contracts.ops import get_op
from contracts.wire import Codec

MIB = 1 << 20
FIX = "python -m server --max-body-mb"
DECODE_OVERHEAD_FACTOR = 5


class LimitError(ValueError):
    """A request over the server's limits (the server answers 413); `detail` names the limit and its flag."""

    def __init__(self, error: str, detail: str) -> None:
        super().__init__(f"{error}: {detail}")
        self.error = error
        self.detail = detail


@dataclass(frozen=True)
class Limits:
    max_body: int  # bytes; bounds the body, the decoded operands, the response and (via max_work) time

    def __post_init__(self) -> None:
        if self.max_body < 1:
            raise ValueError(f"max_body must be positive, got {self.max_body}")

    @classmethod
    def from_mb(cls, max_body_mb: float) -> Limits:
        return cls(int(max_body_mb * MIB))

    @property
    def max_decode_overhead(self) -> int:
        """Room for a codec's intermediates: a JSON body of M with 19-character floats needs 4.2M."""
        return DECODE_OVERHEAD_FACTOR * self.max_body

    @property
    def max_work(self) -> float:
        """Multiply-adds of a float64 mul whose two square operands fill `max_body` as raw bytes."""
        return (self.max_body / 16) ** 1.5

    def as_dict(self) -> dict:
        return {
            "max_body_bytes": self.max_body,
            "max_operand_bytes": self.max_body,
            "max_response_bytes": self.max_body,
            "max_decode_overhead_bytes": self.max_decode_overhead,
            "max_work": self.max_work,
        }


@dataclass(frozen=True)
class RequestCost:
    operand_bytes: int
    response_bytes: int  # the codec's upper bound for the result's encoding
    work: float


def request_cost(
    op: str, dtype: np.dtype, shapes: Sequence[tuple[int, int]], codec: Codec
) -> RequestCost | None:
    """What the request will cost, or None if the operands do not fit the op at all (execute says why)."""
    entry = get_op(op)
    dtype = np.dtype(dtype)
    if len(shapes) != entry.arity:
        return None
    cost = entry.cost(shapes, dtype)
    return RequestCost(
        operand_bytes=sum(r * c for r, c in shapes) * dtype.itemsize,
        response_bytes=codec.max_response_bytes(cost.result_shape, cost.result_dtype),
        work=cost.work,
    )


def _mb(nbytes: float) -> str:
    return f"{math.ceil(nbytes / MIB)}"


def check_request(
    op: str, dtype: np.dtype, shapes: Sequence[tuple[int, int]], codec: Codec, limits: Limits
) -> None:
    """Raise LimitError if the request is over `limits`; the message says which limit and how to raise it."""
    cost = request_cost(op, dtype, shapes, codec)
    if cost is None:
        return
    what = f"{op} of {','.join(f'{r}x{c}' for r, c in shapes)} {np.dtype(dtype).name}"
    if cost.operand_bytes > limits.max_body:
        raise LimitError(
            "operands too large",
            f"{what}: the operands take {cost.operand_bytes} bytes decoded; the server holds at most "
            f"{limits.max_body} ({FIX} {_mb(cost.operand_bytes)} or more)",
        )
    if cost.response_bytes > limits.max_body:
        raise LimitError(
            "result too large",
            f"{what}: the {codec.name} response can take {cost.response_bytes} bytes; the server sends "
            f"at most {limits.max_body} ({FIX} {_mb(cost.response_bytes)} or more, or a binary codec)",
        )
    if cost.work > limits.max_work:
        needed = 16 * cost.work ** (2 / 3)  # the max_body whose max_work covers this
        raise LimitError(
            "too much work",
            f"{what}: {cost.work:.3g} multiply-adds; the server runs at most {limits.max_work:.3g} per "
            f"request ({FIX} {_mb(needed)} or more)",
        )


def check_body(codec: Codec, body: bytes, limits: Limits) -> None:
    """Raise LimitError if decoding `body` would build more than the limits allow (before decoding)."""
    overhead = codec.decode_overhead(body)
    if overhead > limits.max_decode_overhead:
        raise LimitError(
            "body too costly to decode",
            f"{codec.name}: decoding {len(body)} bytes can take {overhead} bytes on the way; the server "
            f"allows {limits.max_decode_overhead} ({FIX} {_mb(overhead / DECODE_OVERHEAD_FACTOR)} or "
            "more, or a binary codec)",
        )
