"""An image op's three timed stages (`contracts.images`, `contracts.image_wire`), as both transports
run them: decode (the message, then the image, its size checked from its header first), compute (the
filter or filters, OpenCV) and encode (the filtered images in the request's format, then the message).
The same stage clock, CPU lock and refusals as the matrix ops' `server.stages.run_stages`.
"""

from __future__ import annotations

from collections.abc import Mapping

from contracts.image_wire import ImageWire
from contracts.images import apply
from contracts.limits import FIX, Limits
from contracts.wire import Headers
from server.stages import check_named_op
from server.timing import StageClock


def run_image_stages(
    wire: ImageWire,
    body: list[bytes],
    headers: Mapping[str, str],
    clock: StageClock,
    limits: Limits,
    op: str | None = None,
) -> tuple[str, bytes, Headers]:
    """Decode, filter and encode one request: the op, the encoded reply and its headers. `op` is the
    URL's (HTTP); without it the body names it (gRPC). `body` is handed over in a list it empties."""
    with clock.stage("decode") as stage:
        data = body.pop()
        named, fmt, img = wire.decode(data, headers, limits.max_body, FIX)
        check_named_op(named, op)
        op = op or named
        stage.repeatable(lambda d=data: wire.decode(d, headers, limits.max_body, FIX))
        del data
    with clock.stage("compute") as stage:
        outputs = apply(op, img)
        stage.repeatable(lambda o=op, i=img: apply(o, i))
    del img
    with clock.stage("encode") as stage:
        out, out_headers = wire.encode(outputs, fmt)
        stage.repeatable(lambda r=outputs, f=fmt: wire.encode(r, f))
    return op, out, out_headers
