"""Transfer settings of the energy-performance study, as both ends apply them.

- parallelism P: one request's body split into P parts, each sent over a connection of its own, and
  the response split alike; both ends put the parts back in order (`X-Part: i/P` on each, the parts
  of one transfer named by `X-Transfer`);
- the I/O size: the client writes its body in pieces of this many bytes (one `sendall` each, with
  Content-Length as one write: the bytes on the wire are the same).

A part is a contiguous slice: part i of n bytes in P parts is [i*n//P, (i+1)*n//P), so the parts
differ by at most one byte and their concatenation in order is the body, byte for byte.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence

TRANSFER_HEADER = "X-Transfer"  # the transfer's id: the same on every part of one request
PART_HEADER = "X-Part"  # `i/P`, 1-based: which part this is of how many
MAX_PARALLELISM = 32  # the study's largest setting
_ID = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_PART = re.compile(r"^\s*(\d{1,3})\s*/\s*(\d{1,3})\s*$")


def bounds(n: int, parts: int) -> list[tuple[int, int]]:
    """The [start, end) of each of `parts` near-equal contiguous slices of n bytes."""
    if parts < 1:
        raise ValueError(f"{parts} parts")
    return [(i * n // parts, (i + 1) * n // parts) for i in range(parts)]


def split(body: bytes | memoryview, parts: int) -> list[memoryview]:
    """The body as `parts` slices (views: nothing copied)."""
    view = memoryview(body).cast("B")
    return [view[a:b] for a, b in bounds(view.nbytes, parts)]


def join(parts: Sequence[bytes | memoryview | None]) -> bytes:
    """The parts back in order as one body; every part must be there."""
    missing = [i + 1 for i, p in enumerate(parts) if p is None]
    if missing:
        raise ValueError(f"part(s) {', '.join(map(str, missing))} of {len(parts)} missing")
    return b"".join(parts)


def pieces(body: bytes | memoryview, size: int) -> Iterator[memoryview]:
    """The body in writes of `size` bytes (the last one shorter): the client's I/O size."""
    view = memoryview(body).cast("B")
    for start in range(0, view.nbytes, size):
        yield view[start : start + size]


def part_header(index: int, parts: int) -> str:
    """`i/P` for the 0-based part `index`."""
    return f"{index + 1}/{parts}"


def parse_part(transfer: str | None, part: str | None) -> tuple[str, int, int] | None:
    """(transfer id, 0-based index, parts) from a request's headers; None when it is not a part.
    A malformed one raises ValueError saying what is wrong."""
    if transfer is None and part is None:
        return None
    if transfer is None or part is None:
        raise ValueError(f"a part needs both {TRANSFER_HEADER} and {PART_HEADER}")
    if not _ID.match(transfer):
        raise ValueError(f"{TRANSFER_HEADER} {transfer!r} is not 1-64 letters, digits, '-' or '_'")
    m = _PART.match(part)
    if not m:
        raise ValueError(f"{PART_HEADER} {part!r} is not i/P")
    index, parts = int(m.group(1)), int(m.group(2))
    if not 1 <= index <= parts <= MAX_PARALLELISM:
        raise ValueError(f"{PART_HEADER} {part!r}: need 1 <= i <= P <= {MAX_PARALLELISM}")
    return transfer, index - 1, parts
