"""The registry of marshalling methods, shared by the server and the client.

Each codec turns operands into an HTTP request body plus headers and back, and a result into a
response body plus headers and back. Both sides use the very same object, so a trial measures exactly
one implementation of each method. What the decoders accept is in `contracts.wire`.

JSON codecs refuse NaN and infinity in both directions: they are not JSON (stdlib json and uJSON
would write the non-standard `NaN`, orjson would silently write `null`). Use `raw` or `msgpack` for
non-finite data. A JSON `true`/`false` mixed among numbers is read as 1/0 (NumPy's conversion); a
matrix of anything else that is not a number is refused. The stdlib codec writes compact JSON (no
spaces), like uJSON and orjson, so the three differ in speed, not in bytes.

The era's text (`codec_text: era`, issue 45): json and ujson as the paper's software wrote them,
Python 3.5's `json.dumps` with its default separators (", " and ": ") and ujson 1.35's floats, fixed
point with at most 10 decimals (`ujson135_matrix`). Only whitespace and float digits differ, so every
decoder reads both; a request asks the server for era text with `X-Codec-Text: era` (a server that
does not know the header answers in compact text).

`protobuf` (`contracts.protobuf_codec`) carries `contracts/offload.proto`'s messages, the body the
gRPC transport sends too.

Adding a codec: subclass `Codec` (for JSON on the wire, `JsonCodec` with other dumps/loads) and add an
instance to `CODECS`. The name is what `X-Codec` and the sweep's `methods` say.
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Callable, Mapping, Sequence

import msgpack
import numpy as np
import orjson
import ujson

from contracts.era_text import ujson135_matrix
from contracts.protobuf_codec import ProtobufCodec
from contracts.stages import CODEC_TEXTS, COMPACT, ERA
from contracts.wire import (
    MAX_OPERANDS,
    RESPONSE_OVERHEAD,
    Body,
    Buffers,
    Codec,
    CodecError,
    Headers,
    body_bytes,
    check_finite,
    check_shape,
    format_shapes,
    header,
    matrix_from_list,
    parse_shapes,
    prepare,
    resolve_dtype,
    split_buffer,
)

__all__ = [
    "CODECS",
    "CODEC_TEXT_HEADER",
    "DEFAULT_CODEC",
    "ERA_CODECS",
    "Body",
    "Buffers",
    "Codec",
    "CodecError",
    "UnknownCodec",
    "body_bytes",
    "get_codec",
]

DEFAULT_CODEC = "json"
# The longest JSON text of one element, separator included: "-2.2250738585072014e-308," (every JSON
# library here writes the shortest repr of a float64: at most 17 digits, sign, point and exponent),
# "-9223372036854775808,", "-2147483648,". A JSON response is 3 (float64) to 2.6 (int64) times the
# result's bytes, and the Python lists some libraries build on the way are 4x (see docs/server.md, "Server limits").
JSON_CHARS = {"float64": 25, "int64": 21, "int32": 12}
# the era's text: Python 3.5's ", " adds a space to each; ujson 1.35 writes a float64 below 1e16 in
# fixed point, "-9999999999999999.9999999999," (above, "%.15e": 23 characters and the comma)
ERA_JSON_CHARS = {name: n + 1 for name, n in JSON_CHARS.items()}
ERA_UJSON_CHARS = {**JSON_CHARS, "float64": 29}
CODEC_TEXT_HEADER = "X-Codec-Text"  # a request's ask for the text of its response (CODEC_TEXTS)
# Parsing builds Python objects first. Measured resident memory per value, whichever library:
# about 60-76 bytes in a row of numbers, 170 per element of a column (each row its own list), 93 per
# string; these constants bound it with the body's counts of separators and openers.
JSON_VALUE_BYTES, JSON_LIST_BYTES, JSON_DICT_BYTES, JSON_STRING_BYTES = 64, 120, 240, 64
MAX_INFLATED_BYTES = 1 << 30  # raw-zlib: a small body must not inflate into all of the server's memory


def count_bytes(body: bytes, chars: bytes, chunk: int = 1 << 22) -> list[int]:
    """How often each of `chars` occurs in `body`: NumPy over 4 MiB slices, 6x faster than four
    bytes.count (60 ms for the 55 MB JSON body of two 1200x1200 matrices, 2% of decoding it)."""
    data = np.frombuffer(body, np.uint8)
    counts = [0] * len(chars)
    for start in range(0, len(data), chunk):
        part = data[start : start + chunk]
        for i, c in enumerate(chars):
            counts[i] += int(np.count_nonzero(part == c))
    return counts


class UnknownCodec(LookupError):
    """No codec of that name (the server answers 415)."""

    def __init__(self, name: str) -> None:
        super().__init__(f"unknown codec {name!r}; known: {', '.join(CODECS)}")
        self.name = name


class JsonCodec(Codec):
    """JSON on the wire: {"operands": [rows...], "dtype": ...} up, {"result": rows, "dtype": ...} down."""

    content_type = "application/json"

    def __init__(
        self,
        name: str,
        dumps: Callable[[dict], str | bytes],
        loads: Callable[[bytes], object],
        text: str = COMPACT,
        chars: Mapping[str, int] = JSON_CHARS,
    ) -> None:
        """`text`: the text `dumps` writes (CODEC_TEXTS); `chars`: its longest element per dtype."""
        self.name, self._dumps, self._loads = name, dumps, loads
        self.text, self.chars = text, chars

    def dumps(self, obj: dict) -> bytes:
        out = self._dumps(obj)
        return out.encode() if isinstance(out, str) else out

    def loads(self, body: bytes, what: str) -> dict:
        try:
            obj = self._loads(body)
        except (ValueError, TypeError, OverflowError, RecursionError) as exc:
            raise CodecError("malformed JSON", f"{what}: {exc}") from None
        if not isinstance(obj, dict):
            raise CodecError("malformed body", f"{what} must be a JSON object")
        return obj

    def decode_overhead(self, body: bytes) -> int:
        """The Python objects the JSON library builds before NumPy sees them, bounded from a count of
        separators (values <= commas + 1) and openers."""
        commas, lists, dicts, quotes = count_bytes(body, b',[{"')
        return (
            JSON_VALUE_BYTES * (commas + 1)
            + JSON_LIST_BYTES * lists
            + JSON_DICT_BYTES * dicts
            + JSON_STRING_BYTES * (quotes // 2)
            + len(body)
        )

    def max_response_bytes(self, shape: tuple[int, int], dtype: np.dtype) -> int:
        rows, cols = shape  # "[...]," per row around the elements
        return rows * cols * self.chars[np.dtype(dtype).name] + 3 * rows + RESPONSE_OVERHEAD

    def lists(self, a: np.ndarray) -> object:
        """What the JSON library serializes for one matrix (orjson takes the array itself)."""
        return a.tolist()

    def encode_request(
        self, operands: Sequence[np.ndarray], dtype: str | None = None
    ) -> tuple[Body, Headers]:
        ops = prepare(operands, dtype)
        for i, a in enumerate(ops):
            check_finite(a, f"operand {i}")
        body = {"operands": [self.lists(a) for a in ops], "dtype": ops[0].dtype.name}
        return self.dumps(body), {"Content-Type": self.content_type}

    def decode_request(self, body: bytes, headers: Mapping[str, str]) -> list[np.ndarray]:
        obj = self.loads(body, "request")
        unknown = set(obj) - {"operands", "dtype"}
        if unknown:
            raise CodecError("malformed body", f"unknown keys {sorted(unknown)}; allowed: operands, dtype")
        dt = resolve_dtype(obj.get("dtype", "float64"))
        operands = obj.get("operands")
        if not isinstance(operands, list):
            raise CodecError(
                "malformed body", f'"operands" must be a list of matrices, not {type(operands).__name__}'
            )
        if len(operands) > MAX_OPERANDS:
            raise CodecError("too many operands", f"{len(operands)} operands; at most {MAX_OPERANDS}")
        return [matrix_from_list(m, dt, f"operand {i}") for i, m in enumerate(operands)]

    def encode_response(self, result: np.ndarray) -> tuple[bytes, Headers]:
        check_finite(result, "result")
        return self.dumps({"result": self.lists(result), "dtype": result.dtype.name}), {
            "Content-Type": self.content_type
        }

    def decode_response(self, body: bytes, headers: Mapping[str, str]) -> np.ndarray:
        obj = self.loads(body, "response")
        return matrix_from_list(obj.get("result"), resolve_dtype(obj.get("dtype", "float64")), "result")


class OrjsonCodec(JsonCodec):
    """orjson serializes NumPy arrays itself (OPT_SERIALIZE_NUMPY): no detour through Python lists."""

    def __init__(self) -> None:
        super().__init__("orjson", lambda o: orjson.dumps(o, option=orjson.OPT_SERIALIZE_NUMPY), orjson.loads)

    def lists(self, a: np.ndarray) -> object:
        return np.ascontiguousarray(a.astype(a.dtype.newbyteorder("="), copy=False))


class _RawJson:
    """Text ujson inserts as it is (its `__json__` hook): a matrix already written."""

    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text

    def __json__(self) -> str:
        return self.text


class Ujson135Codec(JsonCodec):
    """uJSON as ujson 1.35 wrote it: today's ujson, with float matrices written by `ujson135_matrix`
    (integers it wrote as today's does)."""

    def __init__(self) -> None:
        super().__init__("ujson", ujson.dumps, ujson.loads, ERA, ERA_UJSON_CHARS)

    def lists(self, a: np.ndarray) -> object:
        return _RawJson(ujson135_matrix(a)) if a.dtype.kind == "f" else a.tolist()


class RawCodec(Codec):
    """The operands' C-order bytes back to back; dtype and shapes travel in X-Dtype and X-Shape.

    X-Dtype defaults to float64, like the JSON body's "dtype". The body's Content-Type is not checked,
    so `curl --data-binary` works without setting one; X-Codec alone selects the codec.
    """

    name = "raw"

    def pack(self, parts: list[memoryview]) -> Body:
        return Buffers(parts)

    def unpack(self, body: bytes, expected: int) -> bytes:
        return body

    def decode_overhead(self, body: bytes) -> int:
        return 0  # the operands are views of the body (raw-zlib: the inflated bytes are the operands)

    def encode_request(
        self, operands: Sequence[np.ndarray], dtype: str | None = None
    ) -> tuple[Body, Headers]:
        ops = prepare(operands, dtype)
        headers = {
            "Content-Type": self.content_type,
            "X-Dtype": ops[0].dtype.name,
            "X-Shape": format_shapes([a.shape for a in ops]),
        }
        return self.pack([memoryview(a).cast("B") for a in ops]), headers

    def declared_operands(self, headers: Mapping[str, str]) -> tuple[np.dtype, list[tuple[int, int]]]:
        dt = resolve_dtype(header(headers, "X-Dtype") or "float64")
        return dt, parse_shapes(header(headers, "X-Shape"))

    def _decode(self, body: bytes, headers: Mapping[str, str], what: str, one: bool) -> list[np.ndarray]:
        dt, shapes = self.declared_operands(headers)
        if one and len(shapes) != 1:
            raise CodecError("bad X-Shape", f"a result has one shape, got {len(shapes)}")
        expected = sum(r * c for r, c in shapes) * dt.itemsize
        return split_buffer(self.unpack(body, expected), dt, shapes, what)

    def decode_request(self, body: bytes, headers: Mapping[str, str]) -> list[np.ndarray]:
        return self._decode(body, headers, "body", one=False)

    def encode_response(self, result: np.ndarray) -> tuple[bytes, Headers]:
        a = np.ascontiguousarray(result.astype(result.dtype.newbyteorder("<"), copy=False))
        headers = {
            "Content-Type": self.content_type,
            "X-Dtype": a.dtype.name,
            "X-Shape": format_shapes([a.shape]),
        }
        return body_bytes(self.pack([memoryview(a).cast("B")])), headers

    def decode_response(self, body: bytes, headers: Mapping[str, str]) -> np.ndarray:
        return self._decode(body, headers, "result", one=True)[0]


class RawZlibCodec(RawCodec):
    """`raw` compressed with zlib level 1: trades client CPU for bytes on a slow link."""

    name = "raw-zlib"

    def max_response_bytes(self, shape: tuple[int, int], dtype: np.dtype) -> int:
        n = super().max_response_bytes(shape, dtype)  # deflate's worst case: stored blocks, 5 B per 16 KiB
        return n + n // 3000

    def pack(self, parts: list[memoryview]) -> Body:
        z = zlib.compressobj(1)
        return b"".join([*(z.compress(p) for p in parts), z.flush()])

    def unpack(self, body: bytes, expected: int) -> bytes:
        if expected > MAX_INFLATED_BYTES:
            raise CodecError(
                "too large",
                f"X-Shape declares {expected} bytes; raw-zlib inflates at most {MAX_INFLATED_BYTES}",
            )
        z = zlib.decompressobj()
        try:
            out = z.decompress(body, expected + 1)  # never inflate more than the shapes allow
        except zlib.error as exc:
            raise CodecError("malformed zlib data", str(exc)) from None
        if not z.eof or z.unused_data or len(out) != expected:
            raise CodecError("byte count mismatch", f"the inflated body is not exactly {expected} bytes")
        return out


class MsgpackCodec(Codec):
    """A msgpack map: {dtype, operands: [{shape, data}]} up, {dtype, shape, data} down; data is bin."""

    name = "msgpack"
    content_type = "application/msgpack"

    def _loads(self, body: bytes, what: str) -> dict:
        try:  # ext types come back as inert ExtType objects and fail the checks below
            obj = msgpack.unpackb(body, raw=False, strict_map_key=True)
        except (ValueError, TypeError, msgpack.UnpackException, RecursionError) as exc:
            raise CodecError("malformed msgpack", f"{what}: {exc}") from None
        if not isinstance(obj, dict):
            raise CodecError("malformed body", f"{what} must be a msgpack map")
        return obj

    def _matrix(self, item: object, dt: np.dtype, what: str) -> np.ndarray:
        if (
            not isinstance(item, dict)
            or set(item) != {"shape", "data"}
            or not isinstance(item["data"], bytes)
        ):
            raise CodecError("malformed body", f"{what} must be a map of shape (2 ints) and data (bin)")
        return split_buffer(item["data"], dt, [check_shape(item["shape"], what)], what)[0]

    def encode_request(
        self, operands: Sequence[np.ndarray], dtype: str | None = None
    ) -> tuple[Body, Headers]:
        ops = prepare(operands, dtype)
        items = [{"shape": list(a.shape), "data": memoryview(a).cast("B")} for a in ops]
        body = msgpack.packb({"dtype": ops[0].dtype.name, "operands": items})
        return body, {"Content-Type": self.content_type}

    def decode_request(self, body: bytes, headers: Mapping[str, str]) -> list[np.ndarray]:
        obj = self._loads(body, "request")
        if set(obj) != {"dtype", "operands"} or not isinstance(obj["operands"], list):
            raise CodecError("malformed body", "need a map with exactly dtype and operands (a list)")
        if len(obj["operands"]) > MAX_OPERANDS:
            raise CodecError("malformed body", f"at most {MAX_OPERANDS} operands")
        dt = resolve_dtype(obj["dtype"])
        return [self._matrix(m, dt, f"operand {i}") for i, m in enumerate(obj["operands"])]

    def encode_response(self, result: np.ndarray) -> tuple[bytes, Headers]:
        a = np.ascontiguousarray(result.astype(result.dtype.newbyteorder("<"), copy=False))
        body = msgpack.packb({"dtype": a.dtype.name, "shape": list(a.shape), "data": memoryview(a).cast("B")})
        return body, {"Content-Type": self.content_type}

    def decode_response(self, body: bytes, headers: Mapping[str, str]) -> np.ndarray:
        obj = self._loads(body, "response")
        if set(obj) != {"dtype", "shape", "data"}:
            raise CodecError("malformed body", "need a map with exactly dtype, shape and data")
        return self._matrix(
            {"shape": obj["shape"], "data": obj["data"]}, resolve_dtype(obj["dtype"]), "result"
        )


CODECS: dict[str, Codec] = {
    c.name: c
    for c in (
        JsonCodec("json", lambda o: json.dumps(o, separators=(",", ":"), allow_nan=False), json.loads),
        JsonCodec("ujson", ujson.dumps, ujson.loads),
        OrjsonCodec(),
        RawCodec(),
        RawZlibCodec(),
        MsgpackCodec(),
        ProtobufCodec(),
    )
}


# the era's writers of the codecs whose text the paper's software wrote differently (every other
# codec's bytes are the same in both texts); each decodes as its compact namesake does
ERA_CODECS: dict[str, Codec] = {
    c.name: c
    for c in (
        JsonCodec("json", lambda o: json.dumps(o, allow_nan=False), json.loads, ERA, ERA_JSON_CHARS),
        Ujson135Codec(),
    )
}


class UnknownCodecText(UnknownCodec):
    """No such codec text (the server answers 415, as for an unknown codec)."""

    def __init__(self, text: str) -> None:
        LookupError.__init__(self, f"unknown codec text {text!r}; known: {', '.join(CODEC_TEXTS)}")
        self.name = text


def get_codec(name: str | None, text: str | None = None) -> Codec:
    """The codec `name` writing `text` (None: compact); a codec whose text has no era of its own
    (raw, msgpack, orjson, protobuf) is the same object in both texts."""
    text = (text or COMPACT).strip().lower()
    if text not in CODEC_TEXTS:
        raise UnknownCodecText(text)
    try:
        codec = CODECS[name or DEFAULT_CODEC]
    except KeyError:
        raise UnknownCodec(str(name)) from None
    return ERA_CODECS.get(codec.name, codec) if text == ERA else codec
