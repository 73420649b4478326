"""The tagless wire format's shared test vectors: what the Python and C++ codecs must both read and write.

`contracts/tagless_vectors.txt` is this module's output (`python -m contracts.tagless_vectors >
contracts/tagless_vectors.txt`); the Python tests check that the codec still writes it byte for byte,
and the C++ checker (server/cpp_tagless) reads it: each message's payload decoded must print the same
values and encode back to the same bytes, each frame must be built alike, and each `bad` payload
refused. Values are drawn from a seeded generator, type ranges' edges among them.
"""

from __future__ import annotations

import random
import struct
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from contracts.tagless import (
    COUNT,
    SCALARS,
    TIMING,
    VARIABLE,
    Field,
    Frame,
    Message,
    Schema,
    Status,
    Timing,
    error_frame,
    study,
)

VECTORS_PATH = Path(__file__).with_name("tagless_vectors.txt")


def canonical(message: Message, values: Sequence) -> str:
    """Values as the vectors file writes them, which the C++ checker prints alike: integers in
    decimal, floats as %.17g, strings and bytes as x<hex>, a repeated field as [a,b,...]."""

    def one(f: Field, v: object) -> str:
        if f.repeated:
            return "[" + ",".join(one(Field(f.name, f.type), x) for x in np.asarray(v).tolist()) + "]"
        if f.type in VARIABLE:
            return "x" + (v.encode("utf-8") if f.type == "string" else bytes(v)).hex()  # type: ignore[attr-defined]
        if f.type in ("float", "double"):
            return "%.17g" % float(v)  # noqa: UP031 (C's printf writes the same)
        return str(int(v))  # type: ignore[call-overload]

    return " ".join(one(f, v) for f, v in zip(message.fields, values, strict=True))


def vector_values(message: Message, seed: int) -> tuple:
    """Deterministic values for a message's vector: ranges' edges among them."""
    rng = random.Random(seed)
    ints = {"int32": (-(1 << 31), (1 << 31) - 1), "uint32": (0, (1 << 32) - 1)}
    ints |= {"int64": (-(1 << 63), (1 << 63) - 1), "uint64": (0, (1 << 64) - 1)}

    def one(ftype: str) -> object:
        if ftype in ints:
            lo, hi = ints[ftype]
            return rng.choice((lo, hi, 0, rng.randint(lo, hi)))
        if ftype == "double":
            return rng.choice((0.0, -1.5, rng.uniform(-1e6, 1e6), 1e-300))
        if ftype == "float":
            return float(np.float32(rng.uniform(-1e3, 1e3)))
        text = "".join(rng.choice("aZ0 é€𝄞") for _ in range(rng.randint(0, 9)))
        return text if ftype == "string" else text.encode("utf-8")

    return tuple(
        np.array([one(f.type) for _ in range(rng.randint(1, 5))], dtype="<" + SCALARS[f.type])
        if f.repeated
        else one(f.type)
        for f in message.fields
    )


def vectors(schema: Schema) -> str:
    """The vectors file's text: each message's payload for its values (`message NAME HEX = VALUES`);
    frames built from their parts (`frame CALL METHOD FLAGS STATUS PAYLOAD TRAILER = HEX`, `-` for
    empty); and payloads every decoder must refuse (`bad NAME HEX`)."""
    lines = ["# written by `python -m contracts.tagless_vectors`; checked by Python and C++ alike"]
    for seed, message in enumerate(schema.messages.values()):
        values = vector_values(message, seed)
        lines.append(
            f"message {message.name} {message.encode(values).hex() or '-'} = {canonical(message, values)}"
        )
    numbers = schema.messages["Numbers"]
    lines.append(f"message Numbers {numbers.encode(([],)).hex()} = []")
    timing = Timing(0.001, 0.0009, 0.5, 0.25, 1e-6, 0.0).pack()
    hello = schema.messages["Hello"].encode(("tagless",))
    for f in (
        Frame(1, 1, hello, flags=TIMING),
        Frame(0xFFFFFFFF, 8192, b""),
        Frame(7, 2, schema.messages["Mean"].encode((2.5,)), trailer=timing),
        error_frame(9, 77, Status.UNKNOWN_METHOD, "no method 77"),
    ):
        lines.append(
            f"frame {f.call_id} {f.method_id} {f.flags} {f.status} {f.payload.hex() or '-'} "
            f"{f.trailer.hex() or '-'} = {f.pack().hex()}"
        )
    count = COUNT.pack
    for name, payload in (
        ("Hello", b""),  # no count
        ("Hello", count(5) + b"abc"),  # the string runs past the end
        ("Hello", count(2) + b"\xff\xfe"),  # not UTF-8
        ("Hello", count(1) + b"a" + b"\x00"),  # a byte after the last field
        ("Numbers", count(3) + struct.pack("<2i", 1, 2)),  # fewer values than the count
        ("Numbers", count(0xFFFFFFFF)),  # a count no payload could hold
        ("Mean", b"\x00" * 7),  # a double cut short
        ("LargeData128", b"\x00" * (4 * 127)),  # one member short
    ):
        lines.append(f"bad {name} {payload.hex() or '-'}")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    del argv  # no options: the vectors go to standard output
    sys.stdout.write(vectors(study()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
