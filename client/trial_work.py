"""The work a trial times on the client, kind by kind, and the device's target time for each.

Every kind of work of a grid: each operation at each size (`kernel`), and each method's codec
encoding the request (`encode`) and decoding the response (`decode`), on the very operands the
trials use. The calibration, the throttle check and a measured profile all time these. On the
server's cgi stack, one more: a request's process start-up (`server_start`, whatever the op and
size), timed by a fresh process that starts as the CGI script does (`Grid.start_argv`).
"""

from __future__ import annotations

import subprocess
import zlib

import numpy as np

from client.sampling import SelfTimed, Work
from contracts.codecs import get_codec
from contracts.device import DeviceProfile, Grid, key, stack_key
from contracts.ops import execute
from contracts.trials import GRPC, SERVER_START, method_codec
from contracts.wire import body_bytes

START = SERVER_START[0]  # the cgi stack's process start-up, a kind of work of its own


def trial_operands(op: str, size: int, dtype: str, seed: int) -> list[np.ndarray]:
    """The operands every trial of (op, size, dtype) uses: the same on every host for a seed."""
    from client.offload import make_operands

    rng = np.random.default_rng([seed, size, zlib.crc32(op.encode()), zlib.crc32(dtype.encode())])
    return make_operands(op, size, dtype, rng)


def works(
    op: str, size: int, dtype: str, seed: int, codecs: list[str], role: str = "client"
) -> list[tuple[str, str | None, Work, int]]:
    """(kind, codec, work, bytes of matrix data) for everything a trial of (op, size) times on the
    client (encode the request, decode the response), or with `role="server"` on the server (decode
    the request, encode the response)."""
    operands = trial_operands(op, size, dtype, seed)
    out: list[tuple[str, str | None, Work, int]] = [("kernel", None, lambda: execute(op, operands), 0)]
    result = execute(op, operands)
    operand_bytes = sum(a.nbytes for a in operands)
    for name in codecs:  # a method: a codec, or a transport timed as its codec (grpc: protobuf)
        codec = get_codec(method_codec(name))
        if role == "server":  # what `server.stages.run_stages` times
            if name == GRPC:  # the message names its op
                request = codec.encode_op_request(op, operands)
                decode = lambda c=codec, b=request: c.decode_op_request(b, {})  # noqa: E731
            else:
                request, request_headers = _as_bytes(codec.encode_request(operands))
                decode = lambda c=codec, b=request, h=request_headers: c.decode_request(b, h)  # noqa: E731
            out.append(("decode", name, decode, operand_bytes))
            out.append(("encode", name, lambda c=codec: c.encode_response(result), result.nbytes))
            continue
        body, headers = _as_bytes(codec.encode_response(result))
        out.append(("encode", name, lambda c=codec: c.encode_request(operands), operand_bytes))
        out.append(
            ("decode", name, lambda c=codec, b=body, h=headers: c.decode_response(b, h), result.nbytes)
        )
    return out


def _as_bytes(encoded: tuple) -> tuple[bytes, dict]:
    """An encoded body as the other end receives it: one bytes object (raw's buffers joined)."""
    body, headers = encoded
    return body_bytes(body), headers


def target_s(
    device: DeviceProfile, kind: str, op: str, size: int, codec: str | None, data_bytes: int
) -> float:
    """The device's time for a kind of work, from its profile."""
    return device.work_s(kind, op, size, codec, data_bytes)


def check_row(
    kind: str, codec: str | None, op: str, size: int, target: float, achieved: float, tolerance_pct: float
) -> dict:
    """One row of a calibration's table: a kind of work's target, what was achieved, and the error."""
    error = (achieved - target) / target * 100
    return {
        "key": work_key(kind, op, size, codec),
        "work": kind if codec is None else f"{codec} {kind}",
        "op": op,
        "size": size,
        "target_s": target,
        "achieved_s": achieved,
        "error_pct": round(error, 2),
        "flagged": abs(error) > tolerance_pct,
    }


def grid_works(grid: Grid) -> list[tuple]:
    """(op, size, kind, codec, work, bytes of matrix data) for every kind of work of the grid; the
    stack's start-up, if the grid has one, for any op and size (op "any", size None)."""
    out = [
        (op, size, *w)
        for op in grid.ops
        for size in grid.sizes
        for w in works(op, size, grid.dtype, grid.seed, list(grid.codecs), grid.role)
    ]
    if grid.start_argv:
        out.append(("any", None, START, None, SelfTimed(lambda: start_cpu_s(grid.start_argv)), 0))
    return out


def work_key(kind: str, op: str, size: int | None, codec: str | None = None) -> str:
    """The calibration's key of a kind of work (`contracts.device.key`; the start-up's is its stack key)."""
    return stack_key(START) if kind == START else key(kind, op, size, codec)


def start_cpu_s(argv: tuple[str, ...]) -> float:
    """CPU seconds a fresh process took to start as a CGI request's does: what it prints, its
    `time.process_time()` where the request's `server_start` stage ends (the parent's clock cannot
    see a child's CPU)."""
    out = subprocess.run(list(argv), capture_output=True, text=True, check=True, timeout=120)
    return float(out.stdout.split()[-1])
