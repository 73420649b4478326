"""The `tagless` RPC: a fixed frame header, then a message's fields in declared order with no tags.

The lightweight-RPC study in ../shared/papers/ (HPRPC with its Kodosis serializer, against gRPC)
finds most of its gain in what gRPC puts around a call: HTTP/2's frames and headers, and protobuf's
per-field tags, which grow with a message's member count. This transport leaves both out, so a sweep
can set the two side by side on the same link and devices.

**The schema** (a small IDL, `contracts/rpc_study.tagless`): `message Name { type field; ... }` with
the types of `SCALARS`, `string`, `bytes` and `repeated <scalar>`; `type m[1..K];` declares the
members m1..mK; `service Name { id Method(Request) returns (Reply); ... }` numbers each method. A
message's codec is built once from its fields (`Message.encode`, `Message.decode`); the C++ one is
generated from the same file (`contracts.tagless_cpp`).

**A message's bytes**, little-endian, nothing between fields: a scalar as its fixed-size value; a
`string` or `bytes` as a uint32 byte count and the bytes (a string's UTF-8); a `repeated` field as a
uint32 value count and the packed values. A payload must be consumed exactly.

**A frame**: `HEADER` (16 bytes: uint32 call id, uint16 method id, uint8 flags, uint8 status, uint32
payload length, uint32 trailer length), the payload, the trailer. A request has status 0 and no
trailer; `TIMING` in its flags asks for the server's stage times, which the reply carries as its
trailer (`Timing`: decode, compute and encode, each wall and CPU seconds, six float64), as
`Server-Timing` does for HTTP. A reply echoes its request's call id and method id, with flags 0 (its
trailer's length says whether it has one). A reply whose status is not `OK` carries an error message
(a `string`) as its payload and no trailer; one that closes its connection (the stream out of step)
has call id and method id 0. The Python and C++ implementations agree byte for byte: `contracts/tagless_vectors.txt`
(written by `python -m contracts.tagless_vectors`) is checked by both.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import IntEnum
from functools import cache
from pathlib import Path

import numpy as np

SCHEMA_PATH = Path(__file__).with_name("rpc_study.tagless")
SCALARS = {"int32": "i", "uint32": "I", "int64": "q", "uint64": "Q", "float": "f", "double": "d"}
VARIABLE = ("string", "bytes")  # a uint32 byte count, then the bytes
COUNT = struct.Struct("<I")  # the count before a string's bytes or a repeated field's values
HEADER = struct.Struct("<IHBBII")  # call id, method id, flags, status, payload length, trailer length
TIMING = 0x01  # a request's flag: answer with the stage times as the trailer


class Status(IntEnum):
    """A reply's status; not OK, its payload is the error's message."""

    OK = 0
    BAD_FRAME = 1  # a header or payload that does not parse: the request's fault
    UNKNOWN_METHOD = 2
    TOO_LARGE = 3  # a payload past the server's limit (the HTTP server's body limit)
    INTERNAL = 4  # the server's fault (a bug)
    BUSY = 5  # the server's payload budget stayed full (other calls' bytes): try again


class TaglessError(ValueError):
    """A frame or payload that cannot be read (`status` says how the server answers it)."""

    def __init__(self, status: Status, message: str) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class Field:
    name: str
    type: str  # a key of SCALARS, or one of VARIABLE
    repeated: bool = False


def _step_decoder(f: Field) -> Callable[[bytes, int], tuple[object, int]]:
    """Reads one variable-length field at an offset: (value, next offset)."""
    if f.repeated:
        dtype = np.dtype("<" + SCALARS[f.type])

        def repeated(payload: bytes, at: int) -> tuple[object, int]:
            n, at = _count(payload, at, dtype.itemsize, f.name)
            return np.frombuffer(payload, dtype, n, at), at + n * dtype.itemsize

        return repeated

    def variable(payload: bytes, at: int) -> tuple[object, int]:
        n, at = _count(payload, at, 1, f.name)
        raw = payload[at : at + n]
        if f.type == "bytes":
            return raw, at + n
        try:
            return raw.decode("utf-8"), at + n
        except UnicodeDecodeError as exc:
            raise TaglessError(Status.BAD_FRAME, f"field {f.name}: not UTF-8 ({exc.reason})") from None

    return variable


def _count(payload: bytes, at: int, itemsize: int, name: str) -> tuple[int, int]:
    if at + COUNT.size > len(payload):
        raise TaglessError(Status.BAD_FRAME, f"field {name}: the payload ends inside its count")
    (n,) = COUNT.unpack_from(payload, at)
    at += COUNT.size
    if n * itemsize > len(payload) - at:
        raise TaglessError(Status.BAD_FRAME, f"field {name}: {n} values run past the payload's end")
    return n, at


def _step_encoder(f: Field) -> Callable[[object], bytes]:
    if f.repeated:
        dtype = np.dtype("<" + SCALARS[f.type])

        def repeated(value: object) -> bytes:
            packed = np.asarray(value, dtype=dtype)
            if packed.ndim != 1:
                raise ValueError(f"field {f.name}: a repeated field is one sequence of values")
            return COUNT.pack(len(packed)) + packed.tobytes()

        return repeated

    def variable(value: object) -> bytes:
        raw = value.encode("utf-8") if f.type == "string" else bytes(value)  # type: ignore[attr-defined]
        return COUNT.pack(len(raw)) + raw

    return variable


@dataclass(frozen=True)
class Message:
    """A message type: its fields in wire order, and its codec (values are a tuple in that order;
    a repeated field decodes to a NumPy array over the payload)."""

    name: str
    fields: tuple[Field, ...]
    _steps: list = field(default_factory=list, compare=False, repr=False)

    def __post_init__(self) -> None:
        # consecutive scalars are one struct; each other field is a step of its own
        steps: list[tuple[str, object, int]] = []  # ("fixed", Struct, field count) or ("var", field, 1)
        for f in self.fields:
            if f.type in SCALARS and not f.repeated:
                if steps and steps[-1][0] == "fixed":
                    s = steps[-1][1]
                    steps[-1] = ("fixed", struct.Struct(s.format + SCALARS[f.type]), steps[-1][2] + 1)
                else:
                    steps.append(("fixed", struct.Struct("<" + SCALARS[f.type]), 1))
            else:
                steps.append(("var", (_step_encoder(f), _step_decoder(f)), 1))
        self._steps.extend(steps)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(f.name for f in self.fields)

    def encode(self, values: Sequence) -> bytes:
        """The payload of `values`, one per field in order. A value its type cannot hold: ValueError."""
        if len(values) != len(self.fields):
            raise ValueError(f"{self.name} has {len(self.fields)} fields, given {len(values)} values")
        out, i = [], 0
        for kind, part, n in self._steps:
            try:
                out.append(part.pack(*values[i : i + n]) if kind == "fixed" else part[0](values[i]))
            except (struct.error, OverflowError, TypeError, UnicodeEncodeError) as exc:
                raise ValueError(f"{self.name}: a value its field's type cannot hold: {exc}") from None
            i += n
        return b"".join(out)

    def decode(self, payload: bytes) -> tuple:
        """The values of a payload, which must be exactly one message: else TaglessError (BAD_FRAME)."""
        values: list = []
        at = 0
        for kind, part, _ in self._steps:
            if kind == "fixed":
                if at + part.size > len(payload):
                    raise TaglessError(Status.BAD_FRAME, f"{self.name}: the payload is too short")
                values.extend(part.unpack_from(payload, at))
                at += part.size
            else:
                value, at = part[1](payload, at)
                values.append(value)
        if at != len(payload):
            raise TaglessError(
                Status.BAD_FRAME, f"{self.name}: {len(payload) - at} bytes after its last field"
            )
        return tuple(values)


@dataclass(frozen=True)
class Method:
    id: int
    name: str
    request: Message
    reply: Message


@dataclass(frozen=True)
class Schema:
    name: str  # the service's
    messages: dict[str, Message]
    methods: dict[int, Method]

    def method(self, name: str) -> Method:
        for m in self.methods.values():
            if m.name == name:
                return m
        raise KeyError(f"no method {name} in service {self.name}")


_TOKEN = re.compile(r"\s*(?:(#[^\n]*)|([A-Za-z_][A-Za-z0-9_]*|\d+|\.\.|[{}();\[\]]))")


def _tokens(text: str) -> list[str]:
    out, at = [], 0
    text = text.rstrip()
    while at < len(text):
        m = _TOKEN.match(text, at)
        if not m:
            line = text.count("\n", 0, at) + 1
            raise ValueError(f"schema line {line}: cannot read {text[at : at + 20].strip()!r}")
        if m.group(2):
            out.append(m.group(2))
        at = m.end()
    return out


def parse(text: str) -> Schema:
    """A schema from its IDL text (see the module's docstring); a ValueError names what is wrong."""
    toks, i = _tokens(text), 0

    def take(expected: str | None = None) -> str:
        nonlocal i
        if i >= len(toks):
            raise ValueError(f"schema ends early, expecting {expected or 'more'}")
        tok = toks[i]
        if expected is not None and tok != expected:
            raise ValueError(f"schema: expected {expected!r}, found {tok!r}")
        i += 1
        return tok

    def peek() -> str:
        if i >= len(toks):
            raise ValueError("schema ends early, expecting '}'")
        return toks[i]

    messages: dict[str, Message] = {}
    methods: dict[int, Method] = {}
    service = ""
    while i < len(toks):
        kind = take()
        if kind == "message":
            name = take()
            take("{")
            fields: list[Field] = []
            while peek() != "}":
                repeated = peek() == "repeated"
                if repeated:
                    take()
                ftype = take()
                if ftype not in SCALARS and (repeated or ftype not in VARIABLE):
                    raise ValueError(f"message {name}: no type {'repeated ' * repeated}{ftype}")
                fname = take()
                if peek() == "[":  # m[1..K]: the members m1..mK
                    take("[")
                    lo = int(take())
                    take("..")
                    hi = int(take())
                    take("]")
                    fields += [Field(f"{fname}{k}", ftype, repeated) for k in range(lo, hi + 1)]
                else:
                    fields.append(Field(fname, ftype, repeated))
                take(";")
            take("}")
            if name in messages or len({f.name for f in fields}) != len(fields):
                raise ValueError(f"message {name}: declared twice, or a field name twice")
            messages[name] = Message(name, tuple(fields))
        elif kind == "service":
            service = take()
            take("{")
            while peek() != "}":
                mid = int(take())
                mname = take()
                take("(")
                request = take()
                take(")")
                take("returns")
                take("(")
                reply = take()
                take(")")
                take(";")
                missing = [m for m in (request, reply) if m not in messages]
                if missing or mid in methods or not 0 < mid < 1 << 16:
                    raise ValueError(f"method {mid} {mname}: unknown message, id taken or out of 1..65535")
                methods[mid] = Method(mid, mname, messages[request], messages[reply])
            take("}")
        else:
            raise ValueError(f"schema: expected 'message' or 'service', found {kind!r}")
    return Schema(service, messages, methods)


@cache
def study() -> Schema:
    """The lightweight-RPC study's service (`rpc_study.tagless`)."""
    return parse(SCHEMA_PATH.read_text())


# -- frames ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Timing:
    """The server's stage times, seconds: its reply's trailer when the request asked (`TIMING`)."""

    decode_wall: float = 0.0
    decode_cpu: float = 0.0
    compute_wall: float = 0.0
    compute_cpu: float = 0.0
    encode_wall: float = 0.0
    encode_cpu: float = 0.0

    LAYOUT = struct.Struct("<6d")

    def pack(self) -> bytes:
        return self.LAYOUT.pack(
            self.decode_wall,
            self.decode_cpu,
            self.compute_wall,
            self.compute_cpu,
            self.encode_wall,
            self.encode_cpu,
        )

    @classmethod
    def unpack(cls, trailer: bytes) -> Timing:
        if len(trailer) != cls.LAYOUT.size:
            raise TaglessError(
                Status.BAD_FRAME, f"a timing trailer is {cls.LAYOUT.size} bytes, not {len(trailer)}"
            )
        return cls(*cls.LAYOUT.unpack(trailer))


@dataclass(frozen=True)
class Frame:
    call_id: int
    method_id: int
    payload: bytes
    flags: int = 0
    status: int = Status.OK
    trailer: bytes = b""

    def pack(self) -> bytes:
        head = HEADER.pack(
            self.call_id, self.method_id, self.flags, self.status, len(self.payload), len(self.trailer)
        )
        return head + self.payload + self.trailer

    @property
    def wire_bytes(self) -> int:
        return HEADER.size + len(self.payload) + len(self.trailer)


STRING = Message("Error", (Field("message", "string"),))


def error_frame(call_id: int, method_id: int, status: Status, message: str) -> Frame:
    return Frame(call_id, method_id, STRING.encode((message,)), status=status)


def error_message(frame: Frame) -> str:
    """An error reply's message (its payload); a payload that is no string still reads as its bytes."""
    try:
        return STRING.decode(frame.payload)[0]
    except TaglessError:
        return repr(frame.payload[:200])


def read_frame(
    read: Callable[[int], bytes],
    max_payload: int,
    request: bool = True,
    reserve: Callable[[int], None] | None = None,
) -> Frame | None:
    """The next frame from `read` (n -> exactly n bytes, or fewer at the stream's end); None at a clean
    end before a header. TaglessError for a frame that cannot be taken: a request's trailer or status
    (BAD_FRAME), a payload past `max_payload` (TOO_LARGE); the stream is then out of step and the
    caller answers and closes. `reserve` is told the bytes of payload and trailer before they are
    read (a server's memory budget)."""
    head = read(HEADER.size)
    if not head:
        return None
    if len(head) < HEADER.size:
        raise TaglessError(Status.BAD_FRAME, f"the stream ended inside a frame's header ({len(head)} bytes)")
    call_id, method_id, flags, status, n_payload, n_trailer = HEADER.unpack(head)
    if request and (status or n_trailer):
        raise TaglessError(Status.BAD_FRAME, "a request frame has status 0 and no trailer")
    if n_payload > max_payload or n_trailer > max_payload:
        raise TaglessError(
            Status.TOO_LARGE, f"a payload of {n_payload} bytes is past the limit of {max_payload}"
        )
    if reserve is not None:
        reserve(n_payload + n_trailer)
    payload = read(n_payload) if n_payload else b""
    trailer = read(n_trailer) if n_trailer else b""
    if len(payload) < n_payload or len(trailer) < n_trailer:
        raise TaglessError(Status.BAD_FRAME, "the stream ended inside a frame")
    return Frame(call_id, method_id, payload, flags, status, trailer)
