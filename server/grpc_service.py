"""The gRPC transport: `offload.v1.Offload/Execute` (contracts/offload.proto) on its own port.

The handler takes the request's serialized bytes, not a parsed message: parsing is the server's
decode stage and must be timed like every codec's, so the generic handler is registered with no
deserializer and `server.stages.run_stages` decodes with the `protobuf` codec, exactly as the HTTP
path does for `X-Codec: protobuf`. Stage times go back in the trailing metadata `server-timing`, in
the `Server-Timing` header's format, on success and on failure. A refused request gets the code that
`server.refusals` pairs with HTTP's status for it: bad input INVALID_ARGUMENT, an unknown operation
UNIMPLEMENTED, a limit RESOURCE_EXHAUSTED (the body limit is the HTTP server's, enforced by gRPC's
own receive limit), and the server keeps serving. One request at a time, like the HTTP server's sync
worker: trials never share a CPU.

`python -m server --grpc-port M` runs this module as a child process next to gunicorn (gRPC's threads
do not survive gunicorn's fork); the child stops when its parent goes away.
"""

from __future__ import annotations

import logging
import sys
from concurrent import futures

import grpc

from contracts.codecs import get_codec
from contracts.image_wire import ImageWire, peek_op
from contracts.images import is_image_op
from contracts.limits import Limits
from contracts.protobuf_codec import EXECUTE, SERVICE
from server import rpc_study_grpc
from server.image_stages import run_image_stages
from server.lifetime import transport_parser, until_stopped
from server.refusals import REFUSED, refusal_of
from server.stages import run_stages
from server.timing import StageClock

log = logging.getLogger("offload-grpc")
CODEC = get_codec("protobuf")
IMAGES = ImageWire("protobuf")


def execute(body: bytes, context: grpc.ServicerContext, limits: Limits) -> bytes:
    """One Execute call: serialized OpRequest in, serialized OpReply out."""
    clock = StageClock.asked(dict(context.invocation_metadata() or ()))
    try:
        if is_image_op(peek_op(body)):  # an image op: its own stages (server.image_stages)
            return run_image_stages(IMAGES, [body], {}, clock, limits)[1]
        _, out, _ = run_stages(CODEC, [body], {}, clock, limits)
        return out
    except REFUSED as exc:  # the code of each: server.refusals
        code, message = grpc.StatusCode[refusal_of(exc).grpc], str(exc)
    except Exception as exc:  # a bug: logged with its traceback, answered, and the server goes on
        log.exception("Execute failed")
        code, message = grpc.StatusCode.INTERNAL, f"internal error: {type(exc).__name__}: {exc}"
    finally:
        if clock.ms:
            context.set_trailing_metadata((("server-timing", clock.header()),))
    context.abort(code, message)


def build(bind: str, port: int, max_body_mb: float) -> tuple[grpc.Server, int]:
    """A started server on bind:port (port 0: any free one, returned)."""
    limits = Limits.from_mb(max_body_mb)
    max_body = limits.max_body
    server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=1),
        options=[("grpc.max_receive_message_length", max_body), ("grpc.max_send_message_length", -1)],
    )
    handler = grpc.unary_unary_rpc_method_handler(  # bytes in, bytes out: decode is a stage
        lambda body, context: execute(body, context, limits)
    )
    server.add_generic_rpc_handlers(
        (
            grpc.method_handlers_generic_handler(SERVICE, {EXECUTE.rsplit("/", 1)[1]: handler}),
            rpc_study_grpc.handlers(limits),  # the lightweight-RPC study's service, beside it
        )
    )
    host = f"[{bind}]" if ":" in bind else bind
    bound = server.add_insecure_port(f"{host}:{port}")
    if not bound:
        raise OSError(f"cannot listen on {host}:{port} for gRPC")
    server.start()
    return server, bound


def serve(bind: str, port: int, max_body_mb: float, parent: int | None = None) -> None:
    """Serve until SIGTERM/SIGINT, or until `parent` (the HTTP server's master) is gone."""
    server, bound = build(bind, port, max_body_mb)
    log.info("gRPC %s on %s:%d", SERVICE, bind, bound)
    until_stopped(parent)
    server.stop(grace=2.0).wait()


def main(argv: list[str] | None = None) -> int:
    p = transport_parser("python -m server.grpc_service", __doc__.split("\n")[0])
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="[%(asctime)s] [grpc] %(levelname)s %(message)s")
    try:
        serve(args.bind, args.port, args.max_body_mb, args.parent)
    except OSError as exc:
        print(f"error: {exc} (fix: choose a free --grpc-port)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
