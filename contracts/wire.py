"""What every codec checks and shares: the wire's dtypes, shapes, byte counts, and the Codec base.

The decoders are the server's trust boundary. They accept only 2-D matrices with positive dimensions
of an allowed dtype (`contracts.stages.DTYPES`) and raise `CodecError` (the server answers 400) for
anything else. Binary data becomes an array only through `np.frombuffer`, after its byte count
matched the declared shapes exactly; nothing is unpickled or evaluated.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence

import numpy as np

from contracts.stages import DTYPES

MAX_OPERANDS = 16  # more than any op takes; keeps a hostile X-Shape from costing anything
MAX_DIM_DIGITS = 9  # a dimension of a billion is already far beyond any limit
RESPONSE_OVERHEAD = 256  # bytes of a response body besides the matrix data (msgpack keys, JSON braces)


class CodecError(ValueError):
    """A body or its headers do not describe valid matrices (the server answers 400)."""

    def __init__(self, error: str, detail: str = "") -> None:
        super().__init__(f"{error}: {detail}" if detail else error)
        self.error = error
        self.detail = detail


class Buffers:
    """Several buffers sent back to back as one body, without joining them into a new bytes object.

    requests treats an object with `__iter__` and `__len__` as a stream of known length: it sets
    Content-Length and urllib3 passes each buffer to `socket.sendall`, so the operands go out from
    their own memory (no copy on the slow client).
    """

    def __init__(self, parts: Sequence[memoryview]) -> None:
        self.parts = list(parts)
        self.nbytes = sum(p.nbytes for p in self.parts)

    def __iter__(self) -> Iterator[memoryview]:
        return iter(self.parts)

    def __len__(self) -> int:
        return self.nbytes

    def tobytes(self) -> bytes:
        return b"".join(self.parts)


Body = bytes | Buffers
Headers = dict[str, str]


def body_bytes(body: Body | bytearray | memoryview | str) -> bytes:
    """A body as the receiving side sees it."""
    if isinstance(body, Buffers):
        return body.tobytes()
    return body.encode() if isinstance(body, str) else bytes(body)


def header(headers: Mapping[str, str], name: str) -> str | None:
    """Case-insensitive look-up that also works on a plain dict (tests, hand-made calls)."""
    value = headers.get(name)
    if value is None:
        value = next((v for k, v in headers.items() if k.lower() == name.lower()), None)
    return value


def resolve_dtype(name: object) -> np.dtype:
    """The little-endian dtype for an allowed name: the byte order on the wire, whatever the host's."""
    if not isinstance(name, str) or name not in DTYPES:
        raise CodecError("bad dtype", f"{name!r}; allowed: {', '.join(DTYPES)}")
    return np.dtype(name).newbyteorder("<")


def format_shapes(shapes: Sequence[tuple[int, ...]]) -> str:
    return ",".join("x".join(map(str, s)) for s in shapes)


def check_shape(shape: object, what: str) -> tuple[int, int]:
    if (
        not isinstance(shape, list | tuple)
        or len(shape) != 2
        or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 1 for d in shape)
    ):
        raise CodecError("bad shape", f"{what}: {shape!r}; need two positive integers (rows, columns)")
    return int(shape[0]), int(shape[1])


def parse_shapes(text: str | None) -> list[tuple[int, int]]:
    """'800x800,800x600' -> [(800, 800), (800, 600)]."""
    if not text:
        raise CodecError("missing X-Shape", "say the operands' shapes, e.g. X-Shape: 800x800,800x800")
    parts = text.replace(" ", "").split(",")
    if len(parts) > MAX_OPERANDS:
        raise CodecError("bad X-Shape", f"{len(parts)} shapes; at most {MAX_OPERANDS}")
    shapes = []
    for part in parts:
        dims = part.split("x")
        shown = part if len(part) <= 40 else part[:37] + "..."
        if len(dims) != 2 or not all(d.isascii() and d.isdigit() for d in dims):
            raise CodecError("bad X-Shape", f"{shown!r}; write ROWSxCOLS[,ROWSxCOLS...]")
        if any(len(d) > MAX_DIM_DIGITS for d in dims):  # before int(): Python refuses 4300+ digits
            raise CodecError("bad X-Shape", f"{shown!r}: a dimension has more than {MAX_DIM_DIGITS} digits")
        shapes.append(check_shape([int(d) for d in dims], f"X-Shape {shown!r}"))
    return shapes


def prepare(operands: Sequence[np.ndarray], dtype: str | None) -> list[np.ndarray]:
    """The client's operands as the wire carries them: one allowed dtype, little-endian, C order.

    Copies only what is not already in that form.
    """
    if not operands:
        raise CodecError("no operands")
    dt = resolve_dtype(dtype or np.asarray(operands[0]).dtype.name)
    out = []
    for i, a in enumerate(operands):
        a = np.asarray(a)
        if dtype is None and a.dtype.name != dt.name:
            raise CodecError(
                "mixed dtypes", f"operand {i} is {a.dtype.name}, operand 0 is {dt.name}; pass dtype="
            )
        a = np.ascontiguousarray(a.astype(dt, copy=False))
        check_shape(list(a.shape), f"operand {i}")
        out.append(a)
    return out


def split_buffer(
    buf: bytes | memoryview, dt: np.dtype, shapes: Sequence[tuple[int, int]], what: str
) -> list[np.ndarray]:
    """Views of `buf` as matrices of `shapes`, after checking it holds exactly that many bytes."""
    sizes = [r * c * dt.itemsize for r, c in shapes]
    if len(buf) != sum(sizes):
        raise CodecError(
            "byte count mismatch",
            f"{what} has {len(buf)} bytes; shapes {format_shapes(shapes)} of {dt.name} need {sum(sizes)}",
        )
    out, offset = [], 0
    for shape, size in zip(shapes, sizes, strict=True):
        out.append(np.frombuffer(buf, dtype=dt, count=size // dt.itemsize, offset=offset).reshape(shape))
        offset += size
    return out


def check_finite(a: np.ndarray, what: str) -> None:
    if a.dtype.kind == "f" and not np.isfinite(a).all():
        raise CodecError(
            "non-finite values", f"{what} has NaN or infinity, which JSON cannot carry; use raw or msgpack"
        )


def matrix_from_list(obj: object, dt: np.dtype, what: str) -> np.ndarray:
    """A parsed JSON list of rows as a matrix of `dt`, refusing anything that is not one."""
    if not isinstance(obj, list) or not obj or not all(isinstance(row, list) for row in obj):
        raise CodecError("not a matrix", f"{what} must be a non-empty list of rows (lists of numbers)")
    try:
        a = np.array(obj)
    except (ValueError, OverflowError, TypeError, RecursionError) as exc:
        raise CodecError(
            "not a matrix", f"{what}: rows of different lengths or nested too deep ({exc})"
        ) from None
    if a.ndim != 2 or a.shape[1] == 0:
        raise CodecError("not a matrix", f"{what}: need rows of numbers, got nesting of shape {a.shape}")
    if a.dtype.kind == "O" and dt.kind == "f" and all(type(x) in (int, float) for x in a.flat):
        # integers beyond 64 bits; orjson already reads those as floats, so the others must too
        try:
            a = a.astype(np.float64)
        except OverflowError:
            raise CodecError("non-finite values", f"{what}: an integer beyond the float64 range") from None
    if a.dtype.kind not in "iuf":
        raise CodecError(
            "not numbers", f"{what}: entries must be numbers (found JSON {a.dtype.kind!r}-kind values)"
        )
    if dt.kind == "i":
        if a.dtype.kind == "f":
            raise CodecError("not integers", f"{what}: {dt.name} needs integer entries")
        info = np.iinfo(dt)
        if a.min() < info.min or a.max() > info.max:
            raise CodecError("integer out of range", f"{what}: entries must fit {dt.name}")
    a = a.astype(dt, copy=False)
    check_finite(a, what)
    return a


class Codec:
    """One marshalling method. Subclasses implement the four conversions."""

    name: str = ""
    content_type: str = "application/octet-stream"

    def encode_request(
        self, operands: Sequence[np.ndarray], dtype: str | None = None
    ) -> tuple[Body, Headers]:
        raise NotImplementedError

    def decode_request(self, body: bytes, headers: Mapping[str, str]) -> list[np.ndarray]:
        raise NotImplementedError

    def decode_op_request(self, body: bytes, headers: Mapping[str, str]) -> tuple[str, list[np.ndarray]]:
        """The operation the body names ("" when only the URL does: every codec but protobuf) and the operands."""
        return "", self.decode_request(body, headers)

    def encode_response(self, result: np.ndarray) -> tuple[bytes, Headers]:
        raise NotImplementedError

    def decode_response(self, body: bytes, headers: Mapping[str, str]) -> np.ndarray:
        raise NotImplementedError

    def declared_operands(self, headers: Mapping[str, str]) -> tuple[np.dtype, list[tuple[int, int]]] | None:
        """The operands' dtype and shapes if the headers say them (then the server checks its limits
        before reading the body); None for codecs that carry them in the body."""
        return None

    def decode_overhead(self, body: bytes) -> int:
        """An upper bound of what `decode_request` allocates besides the body and the operands, found
        without decoding. Default: one copy of the body (msgpack's bin fields are copied out)."""
        return len(body)

    def max_response_bytes(self, shape: tuple[int, int], dtype: np.dtype) -> int:
        """An upper bound of the body `encode_response` writes for a result of `shape` and `dtype`,
        known before the result exists. Binary codecs: the data's bytes plus a small header."""
        return shape[0] * shape[1] * np.dtype(dtype).itemsize + RESPONSE_OVERHEAD

    def __repr__(self) -> str:
        return f"<codec {self.name}>"
