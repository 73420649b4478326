"""The work a trial times on the client, kind by kind, and the device's target time for each.

Every kind of work of a grid: each operation at each size (`kernel`), and each method's codec
encoding the request (`encode`) and decoding the response (`decode`), on the very operands the
trials use. The calibration, the throttle check and a measured profile all time these. On the
server's cgi stack, one more: a request's process start-up (`server_start`, whatever the op and
size); and there every stage of an HTTP method is timed where the trials time it, in a fresh process
answering a real request (`CgiRequest`, `Grid.cgi_argv`): a long-lived calibration process has
NumPy's buffers, OpenBLAS's pool and its memory warm, which a request's new process never has
(measured: the smoke run's server stages 10-40% above the device's times while their in-process
calibration held, the kernel too).
"""

from __future__ import annotations

import os
import subprocess
import zlib
from dataclasses import dataclass

import numpy as np

from client.sampling import SelfTimed, Work
from contracts.codecs import CODEC_TEXT_HEADER, get_codec
from contracts.device import DeviceProfile, Grid, operand_bytes, result_bytes
from contracts.grid import sizes_for
from contracts.hosts import Role
from contracts.images import DEFAULT_FORMAT, generate, is_image_op
from contracts.operands import IntRange
from contracts.ops import execute
from contracts.protobuf_codec import EXECUTE
from contracts.stages import COMPACT, GRPC, RETIME_HEADER, SERVER_START, method_codec, parse_server_timing
from contracts.wire import body_bytes


def trial_operands(
    op: str, size: int, dtype: str, seed: int, int_range: IntRange | None = None
) -> list[np.ndarray]:
    """The operands every trial of (op, size, dtype) uses: the same on every host for a seed (and
    `int_range`: `contracts.operands`; None, the ops' own ranges)."""
    from client.offload import make_operands

    if is_image_op(op):  # one colour image of `size` pixels (contracts.images), the same for a seed
        return [generate(size, seed)]
    rng = np.random.default_rng([seed, size, zlib.crc32(op.encode()), zlib.crc32(dtype.encode())])
    return make_operands(op, size, dtype, rng, int_range)


@dataclass(frozen=True)
class CgiRequest:
    """One request answered by a fresh process as the cgi stack answers it (`python -m server.cgi`:
    the request's CGI variables in its environment, its body on stdin); `cpu_s(stage)` runs it and
    returns the stage's CPU seconds from the answer's `Server-Timing` (what a trial's row takes)."""

    argv: tuple[str, ...]
    op: str
    body: bytes
    headers: dict[str, str]

    def environ(self) -> dict[str, str]:
        env = {
            **os.environ,  # the server's own environment (its device's BLAS threads among it)
            "GATEWAY_INTERFACE": "CGI/1.1",
            "REQUEST_METHOD": "POST",
            "PATH_INFO": f"/v1/ops/{self.op}",
            "CONTENT_LENGTH": str(len(self.body)),
        }
        for name, value in self.headers.items():
            var = name.upper().replace("-", "_")
            env[var if var == "CONTENT_TYPE" else f"HTTP_{var}"] = value
        return env

    def cpu_s(self, stage: str) -> float:
        return self.stages((stage,))[stage]

    def stages(self, wanted: tuple[str, ...]) -> dict[str, float]:
        """Runs the request once: the CPU seconds of every stage its answer reports (`wanted` among them)."""
        out = subprocess.run(
            list(self.argv), input=self.body, env=self.environ(), capture_output=True, check=True, timeout=300
        )
        head = out.stdout.split(b"\r\n\r\n", 1)[0].decode("latin-1").split("\r\n")
        fields = dict(line.split(": ", 1) for line in head if ": " in line)
        cpu = parse_server_timing(fields.get("Server-Timing"), "cpu")
        missing = ", ".join(stage for stage in wanted if stage not in cpu)
        if not fields.get("Status", "").startswith("200") or missing:
            lacks = f"no {missing} time" if missing else "not 200"
            raise RuntimeError(f"{self.argv} answered {head} to a {self.op} request: {lacks}")
        return cpu

    @classmethod
    def of(
        cls,
        argv: tuple[str, ...],
        op: str,
        codec_name: str,
        operands: list[np.ndarray],
        codec_text: str = COMPACT,
    ) -> CgiRequest:
        """The request a trial of this codec sends to a scaled server device (body and headers,
        `client.offload`'s, asking for its stages timed as such a trial's are: `RETIME_HEADER`; and
        for its reply in `codec_text`)."""
        codec = get_codec(codec_name, codec_text)
        body, headers = _as_bytes(codec.encode_request(operands))
        headers = {**headers, RETIME_HEADER: "1", "X-Codec": codec.name}
        if codec_text != COMPACT:
            headers[CODEC_TEXT_HEADER] = codec_text
        return cls(tuple(argv), op, body, headers)


@dataclass(frozen=True)
class GrpcRequest:
    """One call to the long-lived Python gRPC server, as a scaled server device's trial makes it
    (`client.grpc_offload`: the op's request in protobuf, asking for its stages timed again); its
    `stages` are the CPU seconds the server reports in its trailing `server-timing`. The server's
    stages are timed where the trials time them: in the same calibration's process, the same encode
    of a mul 1200 result took 34.4 ms against 46-49 ms in the server's own trials (the 4-testbed
    check of 2026-11-27, 20:20), its log 1200 decode 0.81 against 1.3-2.2 ms."""

    target: str
    op: str
    body: bytes

    def stages(self, wanted: tuple[str, ...]) -> dict[str, float]:
        """Makes the call once: the CPU seconds of every stage its answer reports (`wanted` among them)."""
        import grpc

        from client.grpc_offload import UNLIMITED

        with grpc.insecure_channel(self.target, options=UNLIMITED) as channel:
            try:
                _, call = channel.unary_unary(EXECUTE).with_call(
                    self.body, timeout=300, metadata=((RETIME_HEADER.lower(), "1"),)
                )
            except grpc.RpcError as exc:
                raise RuntimeError(
                    f"the gRPC server at {self.target} refused a {self.op} call: {exc}"
                ) from exc
        timing = dict(call.trailing_metadata() or ()).get("server-timing")
        cpu = parse_server_timing(timing, "cpu")
        missing = ", ".join(stage for stage in wanted if stage not in cpu)
        if missing:
            raise RuntimeError(f"the gRPC server at {self.target} reported no {missing} time: {timing!r}")
        return cpu

    @classmethod
    def of(cls, target: str, op: str, operands: list[np.ndarray]) -> GrpcRequest:
        return cls(target, op, get_codec("protobuf").encode_op_request(op, operands))


class RequestStages:
    """A request's stages sampled together, as a trial's row has them: one run of the request gives one
    sample of each of `STAGES`, so timing a method's decode, kernel and encode costs one fresh process
    a round, not three. A stage's sample is the newest run's; when that run has already given it one,
    the request runs again (and what the other stages had not taken of the older run is dropped, so a
    sample is never older than the newest run)."""

    STAGES = ("decode", "compute", "encode")

    def __init__(self, request: CgiRequest | GrpcRequest) -> None:
        self.request = request
        self.fresh: dict[str, float] = {}

    def sample(self, stage: str) -> float:
        if stage not in self.fresh:
            cpu = self.request.stages(self.STAGES)
            self.fresh = {s: cpu[s] for s in self.STAGES}
        return self.fresh.pop(stage)

    def work(self, stage: str) -> SelfTimed:
        return SelfTimed(lambda: self.sample(stage))


def works(
    op: str,
    size: int,
    dtype: str,
    seed: int,
    codecs: list[str],
    role: str = "client",
    cgi_argv: tuple[str, ...] = (),
    operands: list[np.ndarray] | None = None,
    int_range: IntRange | None = None,
    codec_text: str = COMPACT,
    grpc_target: str = "",
) -> list[tuple[str, str | None, Work, int]]:
    """(kind, codec, work, bytes of matrix data) for everything a trial of (op, size) times on the
    client (encode the request, decode the response), or with `role="server"` on the server (decode
    the request, encode the response). With `cgi_argv` (the server's cgi stack), each HTTP method's
    stages are timed in a fresh process answering the trial's request (`RequestStages`), its kernel
    among them and keyed by the method (`kernel|json|mul|400`): a kernel calibrated in RAW's requests
    alone came out about 20% below its target in the JSON and uJSON trials of smoke runs, so each
    method's requests calibrate their own. With `grpc_target`, gRPC's stages are timed in the Python
    gRPC server's calls (`GrpcRequest`), its kernel among them and keyed by gRPC; else in this process."""
    if operands is None:  # the caller's, when it holds the trials' already (the trial worker)
        operands = trial_operands(op, size, dtype, seed, int_range)
    if is_image_op(op):
        return image_works(op, size, operands, codecs, role, grpc_target)
    in_requests = role == Role.SERVER and bool(cgi_argv)
    kernel = lambda: execute(op, operands)  # noqa: E731
    out: list[tuple[str, str | None, Work, int]] = []
    calls = None  # the gRPC server's own stages, where it is named
    if role == Role.SERVER and grpc_target and GRPC in codecs:
        calls = RequestStages(GrpcRequest.of(grpc_target, op, operands))
        out.append(("kernel", GRPC, calls.work("compute"), 0))
    if not in_requests or (GRPC in codecs and calls is None):  # one kernel for every method
        out.append(("kernel", GRPC if in_requests else None, kernel, 0))
    result = execute(op, operands)
    request_bytes = sum(a.nbytes for a in operands)
    for name in codecs:  # a method: a codec, or a transport timed as its codec (grpc: protobuf)
        codec = get_codec(method_codec(name), codec_text)
        if in_requests and name != GRPC:  # in a request's own process, the kernel too
            request = RequestStages(CgiRequest.of(cgi_argv, op, method_codec(name), operands, codec_text))
            out.append(("decode", name, request.work("decode"), request_bytes))
            out.append(("kernel", name, request.work("compute"), 0))
            out.append(("encode", name, request.work("encode"), result.nbytes))
            continue
        if calls is not None and name == GRPC:
            out.append(("decode", name, calls.work("decode"), request_bytes))
            out.append(("encode", name, calls.work("encode"), result.nbytes))
            continue
        if role == Role.SERVER:  # what `server.stages.run_stages` times
            if name == GRPC:  # the message names its op
                request = codec.encode_op_request(op, operands)
                decode = lambda c=codec, b=request: c.decode_op_request(b, {})  # noqa: E731
            else:
                request, request_headers = _as_bytes(codec.encode_request(operands))
                decode = lambda c=codec, b=request, h=request_headers: c.decode_request(b, h)  # noqa: E731
            out.append(("decode", name, decode, request_bytes))
            out.append(("encode", name, lambda c=codec: c.encode_response(result), result.nbytes))
            continue
        body, headers = _as_bytes(codec.encode_response(result))
        out.append(("encode", name, lambda c=codec: c.encode_request(operands), request_bytes))
        out.append(
            ("decode", name, lambda c=codec, b=body, h=headers: c.decode_response(b, h), result.nbytes)
        )
    return out


def image_works(
    op: str,
    size: int,
    operands: list[np.ndarray],
    codecs: list[str],
    role: str = "client",
    grpc_target: str = "",
) -> list[tuple[str, str | None, Work, int]]:
    """An image op's work (`contracts.images`), as its trials time it: the filter, and over gRPC (the
    only way the sweep offloads images) the encoded image's way there and back. The client encodes the
    request (the image as PNG in an OpRequest) and decodes the reply's images; the server decodes the
    request and encodes the reply (`server.image_stages`), in its gRPC server's calls where it is named
    (`GrpcRequest`: each stage where the trials' run), else in this process. Each stage's data is the
    image's pixel bytes (`contracts.device`), which the device's image codec speeds are in."""
    from contracts.image_wire import ImageWire

    up, down = operand_bytes(op, size), result_bytes(op, size)
    if role == Role.SERVER and grpc_target and GRPC in codecs:
        calls = RequestStages(GrpcRequest.of(grpc_target, op, operands))
        work = calls.work
        return [("kernel", GRPC, work("compute"), 0), ("decode", GRPC, work("decode"), up), ("encode", GRPC, work("encode"), down)]  # fmt: skip
    out: list[tuple[str, str | None, Work, int]] = [("kernel", None, lambda: execute(op, operands), 0)]
    if GRPC not in codecs:
        return out
    codec, wire = get_codec("protobuf"), ImageWire("protobuf")
    request = codec.encode_op_request(op, operands)
    outputs = execute(op, operands)
    reply, _ = wire.encode(outputs, DEFAULT_FORMAT)
    if role == Role.SERVER:
        decode = lambda: wire.decode(request, {}, 1 << 34, "")  # noqa: E731
        return [*out, ("decode", GRPC, decode, up), ("encode", GRPC, lambda: wire.encode(outputs, DEFAULT_FORMAT), down)]  # fmt: skip
    encode = lambda: codec.encode_op_request(op, operands)  # noqa: E731
    return [
        *out,
        ("encode", GRPC, encode, up),
        ("decode", GRPC, lambda: codec.decode_response(reply, {}), down),
    ]


def _as_bytes(encoded: tuple) -> tuple[bytes, dict]:
    """An encoded body as the other end receives it: one bytes object (raw's buffers joined)."""
    body, headers = encoded
    return body_bytes(body), headers


def target_s(
    device: DeviceProfile, kind: str, op: str, size: int, codec: str | None, data_bytes: int
) -> float:
    """The device's time for a kind of work, from its profile."""
    return device.work_s(kind, op, size, codec, data_bytes)


def grid_works(grid: Grid) -> list[tuple]:
    """(op, size, kind, codec, work, bytes of matrix data) for every kind of work of the grid; the
    stack's start-up, if the grid has one, for any op and size (op "any", size None)."""
    out = [
        (op, size, *w)
        for op in grid.ops
        for size in sizes_for(op, grid.sizes)  # an image op at the image sizes, a matrix op at the others
        for w in works(
            op,
            size,
            grid.dtype,
            grid.seed,
            list(grid.codecs),
            grid.role,
            grid.cgi_argv,
            int_range=grid.int_range,
            codec_text=grid.codec_text,
            grpc_target=grid.grpc_target,
        )
    ]
    if grid.cgi_argv and grid.start_up:  # any request will do: the smallest
        tiny = CgiRequest.of(grid.cgi_argv, "mul", "raw", [np.eye(2), np.eye(2)])
        out.append(("any", None, SERVER_START, None, SelfTimed(lambda: tiny.cpu_s(SERVER_START)), 0))
    return out
