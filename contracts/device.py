"""Device profiles: the client's speed in absolute units, independent of the host that emulates it.

A profile says how fast the device does each kind of work the trials time:
- matrix kernels, per operation, in GFLOP/s of the operation's work (`work`: mul and inv 2n^3, log
  n^2 evaluations), either one figure or figures at some sizes (a slow device's speed falls as the
  matrices outgrow its caches), interpolated log-log between them and held constant beyond;
- marshalling, per codec, the encode and decode throughput in MB/s of matrix data (the operands'
  or the result's elements times their item size: what was marshalled, not what went on the wire);
- image ops (`contracts.images`, issue 47): each filter's megapixels per second (`filters`, at some
  sizes like the kernels, sizes being pixel counts), and the image format's encode and decode in MB/s
  of pixel data (`image_codecs`: 3 bytes a colour pixel, 1 a gray one), which is what an image op's
  encode and decode stages spend their time on whatever carries the encoded image (gRPC's message
  around it is a copy).

From a profile follows each stage's *target* time on the device. The testbed reaches it in one of
two modes (`MODES`): `scaled` multiplies the CPU time a stage took on this host by the calibrated
slowdown of its kind of work; `throttle` runs the client under a CPU quota. Profiles travel to the
hosts as JSON (`as_dict`/`from_dict`); the YAML files are read by the orchestrator.
"""

from __future__ import annotations

import bisect
import math
from dataclasses import asdict, dataclass, field
from enum import StrEnum

from contracts.hosts import Role
from contracts.stages import COMPACT, LOCAL, SERVER_START, method_codec


class Mode(StrEnum):
    """How a host emulates a device: scaled stages, a throttled CPU, or paced to the device's times."""

    SCALED = "scaled"
    THROTTLE = "throttle"
    PACED = "paced"


MODES = (Mode.SCALED, Mode.THROTTLE)
# A server device with several clients: each of its stages lasts the device's time in real time
# (`python -m server --pace`), so requests queue as they would at the device; nothing is calibrated.
PACED = Mode.PACED
DIRECTIONS = ("encode", "decode")
IMAGE_FORMAT = "png"  # the encoding an image op's stages use (`contracts.images.DEFAULT_FORMAT`)
STACK_COSTS = (SERVER_START,)  # a server stack's own costs, seconds on the device (DeviceProfile.stack)


# floating-point operations per pixel of each image op, roughly (gray: 3 multiply-adds; bilateral: a
# 9x9 window of 3 channels with its weights; cartoon: that and a median and a threshold)
IMAGE_WORK = {"gray": 6.0, "bilateral": 1500.0, "cartoon": 1600.0, "filters3": 3100.0}


def work(op: str, size: int) -> float:
    """The operation's work on an n x n input, in floating-point operations (log: evaluations)."""
    if op in ("mul", "inv"):  # matmul 2n^3; inverse by LU and triangular solves, about 2n^3
        return 2.0 * size**3
    if op == "log":
        return float(size * size)
    if op in IMAGE_WORK:  # an image op at `size` pixels (contracts.images): a rough count per pixel
        return IMAGE_WORK[op] * size
    raise KeyError(op)


def key(kind: str, op: str, size: int, codec: str | None = None) -> str:
    """`kernel|mul|400`, `encode|json|mul|400`: one kind of work of a trial, as the calibration's
    slowdowns (scaled) and quotas (throttle) name it."""
    return "|".join([kind, *([codec] if codec else []), op, str(size)])


def stack_key(cost: str) -> str:
    """`stack|server_start`: a server stack's own cost as the worker's server scale carries it (seconds
    on the device, not a slowdown: `DeviceProfile.stack`)."""
    return f"stack|{cost}"


def operand_bytes(op: str, size: int, itemsize: int = 8) -> int:
    """Matrix data in a request: the operands' elements times their item size (an image: its pixels)."""
    if op in IMAGE_WORK:
        return 3 * size
    arity = 2 if op == "mul" else 1
    return arity * size * size * itemsize


def result_bytes(op: str, size: int, itemsize: int = 8) -> int:
    """Matrix data in a response (inv and log answer float64 whatever the input; images: their pixels)."""
    if op in IMAGE_WORK:
        return {"gray": 1, "filters3": 7}.get(op, 3) * size
    return size * size * (itemsize if op == "mul" else 8)


@dataclass(frozen=True)
class SpeedCurve:
    """GFLOP/s at some sizes; log-log interpolation between them, constant outside."""

    points: tuple[tuple[int, float], ...]  # (size, GFLOP/s), sizes ascending

    def at(self, size: int) -> float:
        sizes = [s for s, _ in self.points]
        if size <= sizes[0]:
            return self.points[0][1]
        if size >= sizes[-1]:
            return self.points[-1][1]
        i = bisect.bisect_right(sizes, size)
        (s0, g0), (s1, g1) = self.points[i - 1], self.points[i]
        t = (math.log(size) - math.log(s0)) / (math.log(s1) - math.log(s0))
        return math.exp(math.log(g0) + t * (math.log(g1) - math.log(g0)))


@dataclass(frozen=True)
class DeviceProfile:
    name: str
    kernels: dict[str, SpeedCurve]  # op -> GFLOP/s
    marshalling: dict[str, dict[str, float]]  # codec -> {"encode": MB/s, "decode": MB/s}
    cores: int = 1
    blas_threads: int = 1
    description: str = ""
    source: str = ""  # where the figures come from (a measurement, a derivation)
    # a server's stack costs, seconds on the device: `server_start`, a CGI request's process start-up
    # (the interpreter and its imports, before the request is read)
    stack: dict[str, float] = field(default_factory=dict)
    extra: dict = field(default_factory=dict)  # further sections (e.g. power figures) kept verbatim
    filters: dict[str, SpeedCurve] = field(default_factory=dict)  # image op -> MP/s at pixel counts
    image_codecs: dict[str, dict[str, float]] = field(default_factory=dict)  # format -> {direction: MB/s}

    # ---------------------------------------------------------------- targets
    def compute_s(self, op: str, size: int) -> float:
        """Seconds the device takes for `op` on an n x n input (an image op: on an image of `size` pixels)."""
        if op in IMAGE_WORK:
            return size / (self.filters[op].at(size) * 1e6)
        return work(op, size) / (self.kernels[op].at(size) * 1e9)

    def covers(self, kind: str, op: str, method: str | None) -> bool:
        """Whether the profile says the device's time for this kind of work of a trial of `op` over
        `method` (a kernel, an encode or decode, a stack cost)."""
        if kind in STACK_COSTS:
            return kind in self.stack
        if kind == "kernel":
            return op in (self.filters if op in IMAGE_WORK else self.kernels)
        if op in IMAGE_WORK:
            return IMAGE_FORMAT in self.image_codecs
        return method is not None and method_codec(method) in self.marshalling

    def work_s(self, kind: str, op: str, size: int, codec: str | None, data_bytes: int) -> float:
        """The device's seconds for one kind of work of a trial: `kernel`, `encode`/`decode` of
        `data_bytes` with `codec`, or a stack cost (`server_start`)."""
        if kind in STACK_COSTS:
            return self.stack[kind]
        if kind == "kernel":
            return self.compute_s(op, size)
        if op in IMAGE_WORK:  # an image, encoded or decoded: the format's speed, whatever carries it
            return data_bytes / (self.image_codecs[IMAGE_FORMAT][kind] * 1e6)
        return self.marshal_s(codec, kind, data_bytes)

    def marshal_s(self, codec: str, direction: str, data_bytes: int) -> float:
        """Seconds the device takes to encode or decode `data_bytes` of matrix data with `codec`."""
        return data_bytes / (self.marshalling[method_codec(codec)][direction] * 1e6)

    def missing(self, ops: list[str], codecs: list[str]) -> list[str]:
        """What an experiment needs that the profile does not say, as `key.name` paths."""
        images = [op for op in ops if op in IMAGE_WORK]
        matrices = [op for op in ops if op not in IMAGE_WORK]
        out = [f"kernels.{op}" for op in matrices if op not in self.kernels]
        out += [f"filters.{op}" for op in images if op not in self.filters]
        offloaded = [c for c in codecs if c != LOCAL]
        if matrices:
            missing = {method_codec(c) for c in offloaded if method_codec(c) not in self.marshalling}
            out += [f"marshalling.{c}" for c in sorted(missing)]
        if images and offloaded and IMAGE_FORMAT not in self.image_codecs:
            out.append(f"image_codecs.{IMAGE_FORMAT}")
        return out

    # ---------------------------------------------------------------- JSON for the hosts and manifests
    def as_dict(self) -> dict:
        data = asdict(self)
        data["kernels"] = {op: [list(p) for p in c.points] for op, c in self.kernels.items()}
        data["filters"] = {op: [list(p) for p in c.points] for op, c in self.filters.items()}
        return data

    @classmethod
    def from_dict(cls, data: dict) -> DeviceProfile:
        """A profile as `as_dict` wrote it (one from before image ops has no `filters`)."""

        def curves(section: dict) -> dict[str, SpeedCurve]:
            return {op: SpeedCurve(tuple((int(s), float(g)) for s, g in pts)) for op, pts in section.items()}

        return cls(**{**data, "kernels": curves(data["kernels"]), "filters": curves(data.get("filters", {}))})


ROLES = ("client", "server")  # whose work a calibration times


@dataclass(frozen=True)
class Grid:
    """What a calibration covers: the work of every trial of these ops, sizes and codecs, as the
    client does it (encode the request, decode the response) or the server (decode the request,
    encode the response); the kernels are the same."""

    ops: tuple[str, ...]
    sizes: tuple[int, ...]
    codecs: tuple[str, ...]
    dtype: str = "float64"
    seed: int = 1
    role: str = "client"
    # the server's cgi stack: argv of a process that answers one request as the stack's do (CGI
    # variables in its environment, the body on stdin; `client.calibration_work.CgiRequest`), in which the
    # server's HTTP stages are timed (empty: another stack, timed in the calibration's process)
    cgi_argv: tuple[str, ...] = ()
    start_up: bool = False  # with cgi_argv: also the stack's start-up (`server_start`), a kind of work
    # the trials' operands and text (`contracts.operands`, `codec_text`): the calibration times the
    # very work the trials do, one-digit integers in the era's JSON being other work than floats
    int_range: tuple[int, int] | None = None
    codec_text: str = COMPACT
    # the server's Python gRPC server (HOST:PORT), in which its gRPC stages are timed through real
    # calls as the trials' are (`client.calibration_work.GrpcRequest`; empty: in the calibration's process)
    grpc_target: str = ""

    @classmethod
    def of(
        cls,
        ops,
        sizes,
        codecs,
        dtype: str = "float64",
        seed: int = 1,
        role: str = "client",
        cgi_argv=(),
        start_up: bool = False,
        int_range=None,
        codec_text: str = COMPACT,
        grpc_target: str = "",
    ) -> Grid:
        """Sizes sorted and once each; the local marker is not a codec."""
        if role not in ROLES:
            raise ValueError(f"role {role!r} is not one of {ROLES}")
        if (cgi_argv or grpc_target) and role != Role.SERVER:
            raise ValueError("only the server runs a cgi stack or a gRPC server")
        if start_up and not cgi_argv:
            raise ValueError("a stack start-up is calibrated through the cgi stack's process")
        codecs = tuple(c for c in codecs if c != LOCAL)
        return cls(
            tuple(ops),
            tuple(sorted(set(sizes))),
            codecs,
            dtype,
            seed,
            role,
            tuple(cgi_argv),
            bool(start_up),
            None if int_range is None else (int(int_range[0]), int(int_range[1])),
            codec_text,
            str(grpc_target),
        )

    def as_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> Grid:
        return cls.of(
            data["ops"],
            data["sizes"],
            data["codecs"],
            data["dtype"],
            data["seed"],
            data.get("role", "client"),
            data.get("cgi_argv", ()),
            data.get("start_up", False),
            data.get("int_range"),  # calibrations before issue 45: the ops' own ranges, compact text
            data.get("codec_text", COMPACT),
            data.get("grpc_target", ""),  # calibrations before it: gRPC's stages in their own process
        )
