"""Images for the image ops' tests: a photo-like PNG (`contracts.images.generate`), a decompression
bomb (a valid PNG that declares 100 megapixels in 12 kB), a corrupt one and bytes that are no image."""

from __future__ import annotations

import struct
import zlib

from contracts.images import encode, generate, pixels_of

PHOTO = generate(pixels_of(0.3), seed=7)  # 640x480 BGR


def png_chunk(kind: bytes, body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))


def bomb_png(side: int = 10_000) -> bytes:
    """A valid 1-bit gray PNG of side x side pixels, all black: 100 megapixels that decode to 300 MB
    as colour, from about 12 kB."""
    row = b"\0" * (1 + (side + 7) // 8)
    deflate = zlib.compressobj(9)
    data = b"".join(deflate.compress(row) for _ in range(side)) + deflate.flush()
    ihdr = struct.pack(">IIBBBBB", side, side, 1, 0, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n" + png_chunk(b"IHDR", ihdr) + png_chunk(b"IDAT", data) + png_chunk(b"IEND", b"")
    )


def corrupt_png() -> bytes:
    """A real PNG with its pixel data cut in half."""
    good = encode(PHOTO, "png")
    return good[: len(good) // 2]


NOT_AN_IMAGE = b"GIF89a, or anything else"
