"""Image filters as ops (issue 47, item 2): the BenchImage workload of the multi-language and embedded
gRPC studies, on every side that runs them in Python (the server, the client's local baseline).

An image op's operand is one 8-bit colour image (rows x cols x 3, BGR as OpenCV holds it); it travels
encoded (PNG by default, the studies' "serializes one image"; JPEG where the server's library reads it)
and comes back encoded the same way. The filters, with OpenCV's standard recipes:

- `gray`: `cvtColor(BGR2GRAY)`, Y = 0.299 R + 0.587 G + 0.114 B in OpenCV's fixed point
  ((4899 R + 9617 G + 1868 B + 8192) >> 14); one channel back. Go and Ruby compute this with their
  own code, the others with OpenCV.
- `bilateral`: `bilateralFilter(img, d=9, sigmaColor=75, sigmaSpace=75)` (OpenCV's documented example).
- `cartoon`: `medianBlur(gray, 5)`, `adaptiveThreshold(.., 255, ADAPTIVE_THRESH_MEAN_C, THRESH_BINARY,
  blockSize=9, C=9)` for the edges, `bilateralFilter(img, 9, 250, 250)` for the colour, and the colour
  masked by the edges (`bitwise_and`).
- `filters3`: the embedded study's request: one image in, its cartoon, bilateral and gray out (in that
  order, the study's).

Images are generated deterministically at a size in megapixels (`contracts.grid.parse_sizes`' `MP`
spelling): 4:3 at 16-pixel multiples (0.3MP is 640x480, 4MP 2304x1728, 8MP 3264x2448), stored in
trials.csv as their pixel count. cv2 is imported only where a filter or a codec runs, so the cgi
stack's matrix requests do not pay for its import.
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from contracts.errors import UserError

GRAY, BILATERAL, CARTOON, FILTERS3 = "gray", "bilateral", "cartoon", "filters3"
IMAGE_OPS: dict[str, tuple[str, ...]] = {  # op -> the filters of its output images, in order
    GRAY: (GRAY,),
    BILATERAL: (BILATERAL,),
    CARTOON: (CARTOON,),
    FILTERS3: (CARTOON, BILATERAL, GRAY),
}
# the image ops of each gRPC server (server/languages.py): Go and Ruby have no OpenCV, only their own gray
OPENCV_SERVERS = ("python", "cpp", "java")
SERVER_OPS = {**{s: tuple(IMAGE_OPS) for s in OPENCV_SERVERS}, "go": (GRAY,), "ruby": (GRAY,)}
IMAGE_METHODS = (
    "grpc",
    "local",
)  # how the sweep runs an image op (HTTP: server side, curl or a client of one's own)
FORMATS = ("png", "jpeg")
DEFAULT_FORMAT = "png"
BILATERAL_PARAMS = (9, 75.0, 75.0)  # d, sigmaColor, sigmaSpace
CARTOON_PARAMS = {"median": 5, "block": 9, "c": 9.0, "bilateral": (9, 250.0, 250.0)}
MIN_MP, MAX_MP = 0.01, 64.0
CHANNELS = 3  # what a decoded image holds per pixel (BGR); the limits count this


class ImageError(ValueError):
    """An image the server will not decode (400): corrupt, of an unknown format, or not an image."""

    def __init__(self, error: str, detail: str = "") -> None:
        super().__init__(f"{error}: {detail}" if detail else error)
        self.error = error
        self.detail = detail


class ImageTooLarge(ImageError):
    """An image whose header declares more pixels than the server holds (413), refused undecoded."""


def is_image_op(op: str) -> bool:
    return op in IMAGE_OPS


def dimensions(megapixels: float) -> tuple[int, int]:
    """(rows, cols) of a generated image: 4:3, the width a multiple of 16 (0.3 -> 480x640)."""
    cols = max(16, round(math.sqrt(megapixels * 1e6 * 4 / 3) / 16) * 16)
    return cols * 3 // 4, cols


def pixels_of(megapixels: float) -> int:
    rows, cols = dimensions(megapixels)
    return rows * cols


def mp_label(pixels: int) -> str:
    """How a size in pixels is shown: the shortest megapixel spelling that gives these pixels back
    ('0.3MP', '0.05MP', '4MP'), so that two sizes never share a label; an image file's own pixel count,
    which no spelling gives, to two significant digits ('0.06MP' for 300x200)."""
    mp = pixels / 1e6
    for decimals in range(4):
        spelled = round(mp, decimals)
        if spelled > 0 and pixels_of(spelled) == pixels:
            return f"{spelled:.{decimals}f}MP" if decimals else f"{round(spelled):d}MP"
    return f"{mp:.2g}MP" if mp < 1 else f"{mp:.1f}MP"


def generate(pixels: int, seed: int) -> np.ndarray:
    """A deterministic colour image of about `pixels` pixels (rows x cols x 3 uint8, BGR): smooth
    gradients, discs and a little noise, so that it compresses like a photo more than like a test card."""
    cols = max(16, round(math.sqrt(pixels * 4 / 3) / 16) * 16)
    rows = max(12, cols * 3 // 4)
    rng = np.random.default_rng([seed, pixels])
    y, x = np.mgrid[0:rows, 0:cols].astype(np.float32)
    img = np.empty((rows, cols, 3), np.float32)
    img[..., 0] = 128 + 100 * np.sin(x / cols * 6.3 + rng.uniform(0, 6))
    img[..., 1] = 255 * y / rows
    img[..., 2] = 255 * (x + y) / (rows + cols)
    for _ in range(12):
        cy, cx, r = rng.uniform(0, rows), rng.uniform(0, cols), rng.uniform(0.03, 0.2) * cols
        img[(y - cy) ** 2 + (x - cx) ** 2 < r * r] = rng.uniform(0, 255, 3)
    img += rng.normal(0, 4, img.shape).astype(np.float32)
    return np.clip(img, 0, 255).astype(np.uint8)


@dataclass(frozen=True)
class Header:
    format: str
    rows: int
    cols: int


def read_header(data: bytes) -> Header:
    """The format and dimensions an encoded image declares, read before anything is decoded."""
    if data[:8] == b"\x89PNG\r\n\x1a\n":
        if len(data) < 24 or data[12:16] != b"IHDR":
            raise ImageError("corrupt image", "a PNG without its IHDR chunk")
        cols, rows = struct.unpack(">II", data[16:24])
        return Header("png", rows, cols)
    if data[:2] == b"\xff\xd8":
        return Header("jpeg", *_jpeg_size(data))
    raise ImageError("not an image", "the image is neither PNG nor JPEG")


def _jpeg_size(data: bytes) -> tuple[int, int]:
    i = 2
    while i + 4 <= len(data):
        if data[i] != 0xFF:
            raise ImageError("corrupt image", f"a JPEG marker expected at byte {i}")
        marker = data[i + 1]
        if marker in (0xD8, 0x01) or 0xD0 <= marker <= 0xD7:
            i += 2
            continue
        (length,) = struct.unpack(">H", data[i + 2 : i + 4])
        if 0xC0 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC) and i + 9 <= len(data):
            rows, cols = struct.unpack(">HH", data[i + 5 : i + 9])
            return rows, cols
        i += 2 + length
    raise ImageError("corrupt image", "a JPEG without a frame header")


def check_size(header: Header, max_bytes: int, fix: str) -> None:
    """Refuse an image whose decoded pixels would take more than `max_bytes` (a decompression bomb)."""
    if header.rows < 1 or header.cols < 1:
        raise ImageError("corrupt image", f"{header.cols}x{header.rows} pixels")
    decoded = header.rows * header.cols * CHANNELS
    if decoded > max_bytes:
        raise ImageTooLarge(
            "image too large",
            f"a {header.cols}x{header.rows} {header.format} decodes to {decoded} bytes; the server "
            f"holds at most {max_bytes} ({fix} {math.ceil(decoded / (1 << 20))} or more)",
        )


def decode(data: bytes, max_bytes: int, fix: str) -> np.ndarray:
    """An encoded image as rows x cols x 3 BGR, its size checked from its header first."""
    import cv2

    header = read_header(data)
    check_size(header, max_bytes, fix)
    img = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR)
    if img is None or img.shape[:2] != (header.rows, header.cols):
        raise ImageError("corrupt image", f"the {header.format} does not decode")
    return img


def encode(img: np.ndarray, fmt: str = DEFAULT_FORMAT) -> bytes:
    import cv2

    if fmt not in FORMATS:
        raise ImageError("unknown image format", f"{fmt!r}; known: {', '.join(FORMATS)}")
    params = [cv2.IMWRITE_PNG_COMPRESSION, 1] if fmt == "png" else [cv2.IMWRITE_JPEG_QUALITY, 95]
    ok, buf = cv2.imencode("." + ("png" if fmt == "png" else "jpg"), img, params)
    if not ok:
        raise ImageError("cannot encode", f"{img.shape} as {fmt}")
    return buf.tobytes()


def _filter(name: str, img: np.ndarray) -> np.ndarray:
    import cv2

    if name == GRAY:
        return cv2.cvtColor(img, cv2.COLOR_BGR2GRAY)
    if name == BILATERAL:
        return cv2.bilateralFilter(img, *BILATERAL_PARAMS)
    p = CARTOON_PARAMS
    gray = cv2.medianBlur(cv2.cvtColor(img, cv2.COLOR_BGR2GRAY), p["median"])
    edges = cv2.adaptiveThreshold(
        gray, 255, cv2.ADAPTIVE_THRESH_MEAN_C, cv2.THRESH_BINARY, p["block"], p["c"]
    )
    color = cv2.bilateralFilter(img, *p["bilateral"])
    return cv2.bitwise_and(color, color, mask=edges)


def apply(op: str, img: np.ndarray) -> list[np.ndarray]:
    """The op's output images, in order (one, or three for filters3)."""
    if op not in IMAGE_OPS:
        raise ImageError("unknown operation", f"{op!r}")
    if img.ndim != 3 or img.shape[2] != CHANNELS or img.dtype != np.uint8:
        raise ImageError("not an image", f"need rows x cols x 3 uint8, got {img.dtype.name} {img.shape}")
    return [_filter(name, img) for name in IMAGE_OPS[op]]


def gray_reference(img: np.ndarray) -> np.ndarray:
    """OpenCV's gray in NumPy (the fixed point the Go and Ruby servers use): for the cross checks."""
    b, g, r = (img[..., i].astype(np.int64) for i in range(3))
    return ((4899 * r + 9617 * g + 1868 * b + 8192) >> 14).astype(np.uint8)


def file_pixels(path: str) -> int:
    """The pixel count of an image file, from its header (the size its trials are recorded at)."""
    try:
        header = read_header(Path(path).read_bytes())
    except (OSError, ImageError) as exc:
        raise UserError(f"image {path}: {exc}", "give a PNG or JPEG file") from None
    return header.rows * header.cols


def load(path: str) -> np.ndarray:
    """An image file as the operand of an image op."""
    import cv2

    img = cv2.imread(path, cv2.IMREAD_COLOR)
    if img is None:
        raise UserError(f"cannot read the image {path}", "give a PNG or JPEG file")
    return img
