"""How an image op's request and reply travel: an encoded image up, the filtered image or images down
(`contracts.images`), over gRPC (`offload.proto`'s `Image` in OpRequest/OpReply) and over HTTP.

HTTP, by `X-Codec` (the matrix codecs' names):

- `raw`: the body is the encoded image itself (`Content-Type: image/png` or `image/jpeg`); the reply
  is the filtered image, or for `filters3` the three one after the other with their byte lengths in
  `X-Image-Lengths` (`123,456,789`) and their format in `X-Image-Format`.
- `json` (and `ujson`, `orjson`: the same text): `{"images": [{"format": "png", "data": BASE64}]}` up,
  the same with one or three images down.
- `protobuf`: the gRPC messages (`OpRequest.images`, `OpReply.images`).

Every decode reads the image's header first and refuses an image over the server's limit undecoded
(`contracts.images.check_size`: a decompression bomb), and nothing from the wire is evaluated: base64
and protobuf bytes are data, the image is decoded by OpenCV (or, in Go and Ruby, their own decoders).
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Mapping, Sequence

import numpy as np
from google.protobuf.message import DecodeError

from contracts import offload_pb2 as pb
from contracts.images import DEFAULT_FORMAT, FORMATS, ImageError, decode, encode, read_header
from contracts.wire import CodecError, Headers

CONTENT_TYPES = {"png": "image/png", "jpeg": "image/jpeg"}
LENGTHS_HEADER, FORMAT_HEADER = "X-Image-Lengths", "X-Image-Format"
JSON_CODECS = ("json", "ujson", "orjson")
WIRES = ("raw", *JSON_CODECS, "protobuf")
MAX_IMAGES = 3


def peek_op(body: bytes) -> str:
    """The op an OpRequest names, from its first field (every protobuf runtime writes fields in
    number order, op first); '' if it does not start with one. Decides which stages run it."""
    if len(body) < 2 or body[0] != 0x0A:
        return ""
    length, shift, i = 0, 0, 1
    while i < len(body) and i < 4:
        length |= (body[i] & 0x7F) << shift
        shift += 7
        i += 1
        if not body[i - 1] & 0x80:
            return body[i : i + length].decode("utf-8", "replace") if length <= 64 else ""
    return ""


def _format_of(data: bytes) -> str:
    return read_header(data).format


def image_request(op: str, img: np.ndarray, fmt: str = DEFAULT_FORMAT) -> bytes:
    """The client's encode: an OpRequest with the image encoded as `fmt`."""
    return pb.OpRequest(op=op, images=[pb.Image(format=fmt, data=encode(img, fmt))]).SerializeToString()


def _one_image(images: Sequence, what: str) -> bytes:
    if len(images) != 1:
        raise CodecError(
            "wrong number of images", f"{what} carries {len(images)} images; an image op takes 1"
        )
    return images[0]


def _parse(message: type, body: bytes, what: str):
    try:
        return message.FromString(bytes(body))
    except (DecodeError, RecursionError, ValueError) as exc:
        raise CodecError("malformed protobuf", f"{what} is not an {message.__name__}: {exc}") from None


class ImageWire:
    """One HTTP codec's (or gRPC's) way of carrying images: decode the request, encode the reply."""

    def __init__(self, name: str) -> None:
        if name not in WIRES:
            raise CodecError(
                "codec has no images", f"{name!r} carries matrices; image ops take {', '.join(WIRES)}"
            )
        self.name = name

    def request_image(self, body: bytes, headers: Mapping[str, str]) -> tuple[str, bytes]:
        """(the op the body names or '', the encoded image) of a request body."""
        if self.name == "raw":
            return "", bytes(body)
        if self.name == "protobuf":
            msg = _parse(pb.OpRequest, body, "request")
            if len(msg.operands):
                raise CodecError("malformed body", f"{msg.op!r} is an image op: send images, not operands")
            return msg.op, _one_image([i.data for i in msg.images], "the request")
        try:
            doc = json.loads(body)
            images = [base64.b64decode(i["data"], validate=True) for i in doc["images"]]
        except (ValueError, KeyError, TypeError, binascii.Error) as exc:
            raise CodecError("malformed body", f'want {{"images": [{{"data": BASE64}}]}}: {exc}') from None
        return str(doc.get("op", "")), _one_image(images, "the request")

    def decode(
        self, body: bytes, headers: Mapping[str, str], max_bytes: int, fix: str
    ) -> tuple[str, str, np.ndarray]:
        """(op named or '', format, image): the server's decode stage."""
        named, data = self.request_image(body, headers)
        fmt = _format_of(data)
        return named, fmt, decode(data, max_bytes, fix)

    def encode(self, outputs: Sequence[np.ndarray], fmt: str) -> tuple[bytes, Headers]:
        """The reply: the server's encode stage."""
        if fmt not in FORMATS:
            raise ImageError("unknown image format", fmt)
        datas = [encode(o, fmt) for o in outputs]
        if self.name == "raw":
            headers = {"Content-Type": CONTENT_TYPES[fmt], FORMAT_HEADER: fmt}
            headers[LENGTHS_HEADER] = ",".join(str(len(d)) for d in datas)
            return b"".join(datas), headers
        if self.name == "protobuf":
            reply = pb.OpReply(images=[pb.Image(format=fmt, data=d) for d in datas])
            return reply.SerializeToString(), {"Content-Type": "application/x-protobuf"}
        doc = {"images": [{"format": fmt, "data": base64.b64encode(d).decode()} for d in datas]}
        return json.dumps(doc).encode(), {"Content-Type": "application/json"}


def reply_images(body: bytes, max_bytes: int = 1 << 34) -> list[np.ndarray]:
    """The client's decode of an OpReply's images."""
    msg = _parse(pb.OpReply, body, "response")
    if not msg.images or len(msg.images) > MAX_IMAGES:
        raise CodecError("malformed body", f"the reply has {len(msg.images)} images")
    return [decode_any(i.data, max_bytes) for i in msg.images]


def decode_any(data: bytes, max_bytes: int = 1 << 34) -> np.ndarray:
    """An encoded image as it is: gray stays one channel (the client's view of a filtered image)."""
    import cv2

    read_header(data)
    img = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_UNCHANGED)
    if img is None or img.nbytes > max_bytes:
        raise ImageError("corrupt image", "the reply's image does not decode")
    return img
