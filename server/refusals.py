"""How the server refuses a request it will not run: one table, so both transports answer alike.

Each row is an exception that the request's checks or `server.stages.run_stages` raise, with its HTTP
status (`server.app`) and its gRPC status code (`server.grpc_service`). Adding a kind of refusal is one
row here. Rows are tried in order: a subclass, or a row for one `error` of an exception, comes before
the row it narrows.

The gRPC code is a `grpc.StatusCode` name, not the enum: the HTTP server's master forks gunicorn's
workers and must never import grpc (`server.__main__.children`).

What only one transport meets stays with it: a body over the limit or too slow to arrive (HTTP 413 and
408; gRPC's own receive limit answers RESOURCE_EXHAUSTED before the handler runs) and a bug (500,
INTERNAL).
"""

from __future__ import annotations

from dataclasses import dataclass

from contracts.codecs import UnknownCodec
from contracts.images import ImageError, ImageTooLarge
from contracts.limits import LimitError
from contracts.ops import OpError, UnknownOp
from contracts.wire import CodecError


@dataclass(frozen=True)
class Refusal:
    """One kind of refused request and what each transport answers.

    `error` narrows the row to the exceptions whose own `error` is this one; an exception that carries
    no `error` (UnknownCodec) is answered with the row's.
    """

    kind: type[Exception]
    http: int
    grpc: str  # a grpc.StatusCode name
    error: str | None = None

    def matches(self, exc: BaseException) -> bool:
        return isinstance(exc, self.kind) and self.error in (None, getattr(exc, "error", self.error))

    def error_and_detail(self, exc: Exception) -> tuple[str, str]:
        """The JSON answer's `error` and `detail`: the exception's own, or the row's name and its message."""
        return getattr(exc, "error", self.error), getattr(exc, "detail", str(exc))


REFUSALS: tuple[Refusal, ...] = (
    Refusal(UnknownOp, 404, "UNIMPLEMENTED"),  # an OpError
    Refusal(UnknownCodec, 415, "INVALID_ARGUMENT", "unknown codec"),  # HTTP's X-Codec; gRPC has one codec
    Refusal(LimitError, 413, "RESOURCE_EXHAUSTED"),
    Refusal(ImageTooLarge, 413, "RESOURCE_EXHAUSTED"),  # an ImageError: a decompression bomb
    Refusal(ImageError, 400, "INVALID_ARGUMENT"),  # a corrupt image, or not one
    # a limit on the operand count, raised while decoding; HTTP has always answered it as bad input
    Refusal(CodecError, 400, "RESOURCE_EXHAUSTED", "too many operands"),
    Refusal(CodecError, 400, "INVALID_ARGUMENT"),
    Refusal(OpError, 400, "INVALID_ARGUMENT"),
)
REFUSED: tuple[type[Exception], ...] = tuple(dict.fromkeys(r.kind for r in REFUSALS))  # for `except`


def refusal_of(exc: Exception) -> Refusal:
    """The first row for `exc`, one of the REFUSED exceptions."""
    for refusal in REFUSALS:
        if refusal.matches(exc):
            return refusal
    raise LookupError(f"no row of server.refusals.REFUSALS for {exc!r}")  # a bug in the table
