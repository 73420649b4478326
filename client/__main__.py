"""`python -m client SUBCOMMAND`: offload one operation, time it locally, or ask the server's health.

Each subcommand is one `add_*` function that adds its parser and sets `func`; `main` only parses and
calls. The work lives in `client.offload`.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import replace

import numpy as np

from client.grpc_offload import GrpcOffloadClient
from client.offload import (
    OffloadClient,
    OffloadError,
    ResultMismatch,
    StageTimes,
    check_result,
    local,
    make_operands,
)
from client.rpc_calls import TRANSPORTS, client_for, request_values, run_batch, study_method
from contracts.codecs import CODECS, DEFAULT_CODEC
from contracts.errors import UserError
from contracts.grid import parse_sizes, size_label
from contracts.images import IMAGE_OPS, generate, is_image_op, load
from contracts.ops import OPS
from contracts.stages import DTYPES, GRPC

DEFAULT_URL = "http://127.0.0.1:8080"
DEFAULT_GRPC = "127.0.0.1:50051"


def _operand_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--op", required=True, choices=[*OPS, *IMAGE_OPS])
    p.add_argument(
        "--size", type=_size, required=True, help="matrix dimension (size x size), or an image's: 0.3MP"
    )
    p.add_argument("--image", help="image ops: an image file instead of a generated image")
    p.add_argument("--dtype", default="float64", choices=list(DTYPES))
    p.add_argument("--seed", type=int, default=1, help="seed of the random operands")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")


def _size(text: str) -> int:
    (size,) = parse_sizes(text, "--size")  # a matrix's n, or an image's pixels (contracts.grid)
    return size


def _operands(args: argparse.Namespace) -> list[np.ndarray]:
    if is_image_op(args.op):
        return [load(args.image) if args.image else generate(args.size, args.seed)]
    return make_operands(args.op, args.size, args.dtype, np.random.default_rng(args.seed))


def add_offload(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("offload", help="offload one operation and print its stage times")
    p.add_argument("--url", default=DEFAULT_URL, help=f"the server's base URL (default {DEFAULT_URL})")
    p.add_argument(
        "--codec", default=DEFAULT_CODEC, help=f"marshalling method: {', '.join(CODECS)}, or {GRPC}"
    )
    p.add_argument(
        "--grpc-target",
        default=DEFAULT_GRPC,
        metavar="HOST:PORT",
        help=f"the server's gRPC port, for --codec grpc (default {DEFAULT_GRPC})",
    )
    p.add_argument("--timeout", type=float, default=900.0, help="seconds to wait for the server")
    p.add_argument("--check", action="store_true", help="also run locally and compare the results")
    _operand_args(p)
    p.set_defaults(func=cmd_offload)


def add_local(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("local", help="run one operation here and print its completion time")
    _operand_args(p)
    p.set_defaults(func=cmd_local)


def add_health(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("health", help="print the server's health JSON")
    p.add_argument("--url", default=DEFAULT_URL)
    p.add_argument("--wait", type=float, default=0.0, metavar="SECONDS", help="keep trying this long")
    p.set_defaults(func=cmd_health)


def add_profile(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "profile", help="measure this machine as a device profile (run it on the real device, idle)"
    )
    p.add_argument("--name", required=True, help="the profile's name (lowercase, e.g. rpi4)")
    p.add_argument("--ops", default="mul", help="operations (default mul)")
    p.add_argument("--sizes", default="100,200,400,800", help="matrix sizes (default 100,200,400,800)")
    p.add_argument(
        "--codecs",
        default="json,ujson,raw",
        help=f"codecs (default json,ujson,raw; any of {', '.join(CODECS)})",
    )
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--out", help="write the profile here (default: standard output)")
    p.set_defaults(func=cmd_profile)


def cmd_profile(args: argparse.Namespace) -> int:
    import platform
    from datetime import UTC, datetime

    from client.measured_profile import measure_profile
    from client.profile_yaml import profile_yaml

    def names(text: str, known, what: str) -> list[str]:
        items = [x.strip() for x in text.split(",") if x.strip()]
        bad = [x for x in items if x not in known]
        if bad or not items:
            raise UserError(f"unknown {what} {', '.join(bad) or text!r}", f"use some of: {', '.join(known)}")
        return items

    try:
        sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    except ValueError:
        sizes = []
    if not sizes or min(sizes) < 2 or args.reps < 1:
        raise UserError(f"--sizes {args.sizes!r} must be matrix sizes of at least 2 (and --reps at least 1)")
    device = measure_profile(
        args.name, names(args.ops, OPS, "op"), sizes, names(args.codecs, CODECS, "codec"), args.reps
    )
    when = datetime.now(UTC).strftime("%Y-%m-%d")
    machine = f"{platform.node()}: {platform.machine()} {platform.processor() or ''}".strip()
    device = replace(device, description=f"measured on {machine}", source=f"python -m client profile, {when}")
    comment = f"Measured by `python -m client profile` on {machine}, {when}: CPU seconds of the trials' work.\nPython {platform.python_version()}, NumPy {np.__version__}."
    text = profile_yaml(device, comment)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)
        print(f"profile written: {args.out}", file=sys.stderr)
    else:
        sys.stdout.write(text)
    return 0


def add_rpc_calls(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "rpc-calls", help="time a batch of the lightweight-RPC study's calls; print its figures as JSON"
    )
    p.add_argument("--transport", choices=TRANSPORTS, required=True)
    p.add_argument("--target", required=True, help="HOST:PORT of the transport's server")
    p.add_argument("--op", required=True, help="SayHello, Average, GetRandNums or SendRcvLargeData")
    p.add_argument("--n", type=int, default=10, help="Average's list length, GetRandNums' count, or K")
    p.add_argument("--calls", type=int, default=1000)
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--per-call-connection", action="store_true", help="a connection per call")
    p.set_defaults(func=cmd_rpc_calls)


def cmd_rpc_calls(args: argparse.Namespace) -> int:
    try:
        method = study_method(args.op, args.n)
    except ValueError as exc:
        raise UserError(str(exc), "see contracts/rpc_study.tagless") from None
    if args.calls < 1 or args.n < 0:
        raise UserError("--calls must be at least 1 and --n not negative")
    values = request_values(method, args.n)
    with client_for(args.transport, args.target, persistent=not args.per_call_connection) as client:
        batch = run_batch(client, method, values, args.calls, args.warmup)
    print(json.dumps(batch.as_dict()))
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m client", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for add in (add_offload, add_local, add_health, add_profile, add_rpc_calls):
        add(sub)
    return parser


def stage_table(stages: StageTimes) -> str:
    rows = [
        ("client encode", stages.t_client_encode),
        ("request", stages.t_request),
        ("  server decode", stages.t_server_decode),
        ("  server compute", stages.t_server_compute),
        ("  server encode", stages.t_server_encode),
        ("  communication", stages.t_comm),
        ("client decode", stages.t_client_decode),
        ("total", stages.t_total),
    ]
    if stages.t_server_start is not None:  # the cgi stack: a process per request, in communication
        rows.insert(6, ("    process start", stages.t_server_start))
    lines = [f"{'stage':<18}{'seconds':>12}"] + [f"{name:<18}{sec:>12.6f}" for name, sec in rows]
    return "\n".join([*lines, f"{'bytes up / down':<18}{stages.bytes_up:>12} / {stages.bytes_down}"])


def cmd_offload(args: argparse.Namespace) -> int:
    operands = _operands(args)
    if is_image_op(args.op) and args.codec != GRPC:
        raise UserError(f"{args.op} offloads over grpc here", "over HTTP: curl (docs/server.md)")
    if args.codec == GRPC:
        with GrpcOffloadClient(args.grpc_target, timeout=args.timeout) as grpc_client:
            result, stages = grpc_client.offload(args.op, operands)
        args.url = args.grpc_target
    else:
        with OffloadClient(args.url, timeout=args.timeout) as client:
            result, stages = client.offload(args.op, operands, args.codec)
    check = None
    if args.check and is_image_op(args.op):  # each filtered image within 2 levels of the local one
        for got, want in zip(result, local(args.op, operands)[0], strict=True):
            if np.abs(got.astype(np.int16) - want.astype(np.int16)).max() > 2:
                raise UserError(
                    f"{args.op}: the server's image differs from the local one by more than 2 levels"
                )
        check = "ok"
    elif args.check:
        check_result(result, local(args.op, operands)[0])  # raises ResultMismatch
        check = "ok"
    if args.json:
        head = {"op": args.op, "size": args.size, "dtype": args.dtype, "codec": args.codec, "url": args.url}
        print(json.dumps({**head, **stages.as_dict(), **({"check": check} if check else {})}))
    else:
        what = size_label(args.size) if is_image_op(args.op) else f"{args.size}x{args.size} {args.dtype}"
        print(f"{args.op} {what} via {args.codec} -> {args.url}")
        print(stage_table(stages))
        if check:
            print(f"{'check':<18}{'ok (matches the local result)':>12}")
    return 0


def cmd_local(args: argparse.Namespace) -> int:
    _, seconds = local(args.op, _operands(args))
    if args.json:
        print(json.dumps({"op": args.op, "size": args.size, "dtype": args.dtype, "t_total": seconds}))
    else:
        what = size_label(args.size) if is_image_op(args.op) else f"{args.size}x{args.size} {args.dtype}"
        print(f"local {args.op} {what}: {seconds:.6f} s")
    return 0


def cmd_health(args: argparse.Namespace) -> int:
    deadline = time.monotonic() + args.wait
    with OffloadClient(args.url, timeout=30.0) as client:
        while True:
            try:
                print(json.dumps(client.health()))
                return 0
            except (UserError, OffloadError):
                if time.monotonic() >= deadline:
                    raise
                time.sleep(0.2)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except (OffloadError, ResultMismatch) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
