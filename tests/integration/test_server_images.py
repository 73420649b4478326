"""The image ops (issue 47, item 2) against a real `python -m server` with its gRPC server in each
language (the `served` fixture of tests/integration/conftest.py, parametrized over all five), and over
HTTP: results checked across servers on PNG-encoded images, the refusals of hostile images (a
decompression bomb, a corrupt image, bytes that are no image), each followed by a good call.

Every server's filtered images are compared with the Python server's own code (`contracts.images`,
OpenCV from PyPI, in this process) and gray also with OpenCV's fixed-point formula in NumPy: gray within
1 level of mean absolute difference and at most 2 per pixel; bilateral and cartoon within 1 level of
mean absolute difference between the OpenCV servers (Python, C++, Java: OpenCV 4.6 from Debian against
PyPI's). Go and Ruby have gray only (their own code), and refuse the others in one line.
"""

from __future__ import annotations

import base64
import json

import grpc
import numpy as np
import pytest
import requests

from client.grpc_offload import GrpcOffloadClient
from contracts import offload_pb2 as pb
from contracts.image_wire import LENGTHS_HEADER, decode_any
from contracts.images import IMAGE_OPS, SERVER_OPS, apply, encode, gray_reference
from contracts.protobuf_codec import EXECUTE
from contracts.stages import parse_server_timing
from tests.image_samples import NOT_AN_IMAGE, PHOTO, bomb_png, corrupt_png

STAGES = {"decode", "compute", "encode"}
EXPECTED = {op: apply(op, PHOTO) for op in IMAGE_OPS}  # the Python server's code


def language(request) -> str:
    return request.node.callspec.params["served"]


def image_call(target: str, op: str, data: bytes) -> tuple[pb.OpReply, dict]:
    body = pb.OpRequest(op=op, images=[pb.Image(format="png", data=data)]).SerializeToString()
    with grpc.insecure_channel(target) as channel:
        out, call = channel.unary_unary(EXECUTE).with_call(body, timeout=60)
    return pb.OpReply.FromString(out), dict(call.trailing_metadata())


def assert_close(got: np.ndarray, want: np.ndarray, mean: float, most: int | None, what: str) -> None:
    assert got.shape == want.shape and got.dtype == np.uint8, (what, got.shape, want.shape)
    diff = np.abs(got.astype(np.int16) - want.astype(np.int16))
    assert diff.mean() <= mean, (what, diff.mean())
    if most is not None:
        assert diff.max() <= most, (what, diff.max())


@pytest.mark.parametrize("op", list(IMAGE_OPS))
def test_each_server_filters_a_png_as_the_others_do_or_refuses_an_op_it_lacks(served, request, op):
    _, target = served
    if op not in SERVER_OPS[language(request)]:
        with pytest.raises(grpc.RpcError) as exc:
            image_call(target, op, encode(PHOTO))
        assert exc.value.code() == grpc.StatusCode.UNIMPLEMENTED
        assert "unknown operation" in exc.value.details() and "\n" not in exc.value.details()
        return
    reply, trailer = image_call(target, op, encode(PHOTO))
    assert set(parse_server_timing(trailer["server-timing"])) == STAGES
    assert set(parse_server_timing(trailer["server-timing"], "cpu")) == STAGES
    assert [i.format for i in reply.images] == ["png"] * len(IMAGE_OPS[op])
    for name, image, want in zip(IMAGE_OPS[op], reply.images, EXPECTED[op], strict=True):
        got = decode_any(image.data)
        if name == "gray":
            assert_close(got, want, 1.0, 2, f"{op}/{name} against OpenCV")
            assert_close(got, gray_reference(PHOTO), 1.0, 2, f"{op}/{name} against the formula")
        else:
            assert_close(got, want, 1.0, None, f"{op}/{name}")


def test_the_project_client_offloads_gray_with_every_stage_timed(served):
    _, target = served
    with GrpcOffloadClient(target, timeout=60) as client:
        (gray,), t = client.offload("gray", [PHOTO])
    assert_close(gray, EXPECTED["gray"][0], 1.0, 2, "gray")
    assert min(t.t_server_decode, t.t_server_compute, t.t_server_encode, t.t_comm) > 0
    assert t.t_request == pytest.approx(t.t_comm + t.t_server_decode + t.t_server_compute + t.t_server_encode)
    assert t.bytes_up > 100_000 and t.bytes_down > 10_000


HOSTILE = [
    ("bomb", bomb_png(), grpc.StatusCode.RESOURCE_EXHAUSTED, "image too large"),
    ("corrupt", corrupt_png(), grpc.StatusCode.INVALID_ARGUMENT, "corrupt image"),
    ("not an image", NOT_AN_IMAGE, grpc.StatusCode.INVALID_ARGUMENT, "not an image"),
]


@pytest.mark.parametrize(("name", "data", "code", "words"), HOSTILE, ids=[h[0] for h in HOSTILE])
def test_a_hostile_image_is_refused_in_one_line_and_the_server_keeps_serving(served, name, data, code, words):
    _, target = served
    with pytest.raises(grpc.RpcError) as exc:
        image_call(target, "gray", data)
    assert exc.value.code() == code and exc.value.details().startswith(words), exc.value.details()
    assert "\n" not in exc.value.details()
    timing = parse_server_timing(dict(exc.value.trailing_metadata() or ())["server-timing"])
    assert set(timing) == {"decode"}  # refused while decoding: nothing computed
    reply, _ = image_call(target, "gray", encode(PHOTO))
    assert_close(decode_any(reply.images[0].data), EXPECTED["gray"][0], 1.0, 2, "gray after " + name)


def test_an_image_op_needs_exactly_one_image_and_no_operands(served):
    _, target = served
    with grpc.insecure_channel(target) as channel:
        execute = channel.unary_unary(EXECUTE)
        for body, words in (
            (pb.OpRequest(op="gray").SerializeToString(), "wrong number of images"),
            (
                pb.OpRequest(
                    op="gray", operands=[pb.Matrix(rows=1, cols=1, values=[1.0])]
                ).SerializeToString(),
                "malformed body",
            ),
        ):
            with pytest.raises(grpc.RpcError) as exc:
                execute(body, timeout=30)
            assert exc.value.code() == grpc.StatusCode.INVALID_ARGUMENT and words in exc.value.details()


def test_http_carries_images_raw_and_as_base64_json(served):
    server, _ = served
    png = encode(PHOTO)
    raw = requests.post(f"{server.url}/v1/ops/gray", data=png, headers={"X-Codec": "raw"}, timeout=60)
    assert raw.status_code == 200 and raw.headers["Content-Type"] == "image/png"
    assert set(parse_server_timing(raw.headers["Server-Timing"])) == STAGES | {"queue"}
    assert_close(decode_any(raw.content), EXPECTED["gray"][0], 1.0, 2, "raw gray")
    three = requests.post(f"{server.url}/v1/ops/filters3", data=png, headers={"X-Codec": "raw"}, timeout=60)
    lengths = [int(n) for n in three.headers[LENGTHS_HEADER].split(",")]
    assert three.status_code == 200 and len(lengths) == 3 and sum(lengths) == len(three.content)
    doc = {"images": [{"format": "png", "data": base64.b64encode(png).decode()}]}
    js = requests.post(f"{server.url}/v1/ops/cartoon", json=doc, headers={"X-Codec": "json"}, timeout=60)
    assert js.status_code == 200
    (image,) = js.json()["images"]
    assert_close(
        decode_any(base64.b64decode(image["data"])), EXPECTED["cartoon"][0], 1.0, None, "json cartoon"
    )


@pytest.mark.parametrize(
    ("data", "codec", "status", "error"),
    [
        (bomb_png(), "raw", 413, "image too large"),
        (corrupt_png(), "raw", 400, "corrupt image"),
        (NOT_AN_IMAGE, "raw", 400, "not an image"),
        (b'{"images": [{"data": "not base64!"}]}', "json", 400, "malformed body"),
        (encode(PHOTO), "msgpack", 400, "codec has no images"),
    ],
)
def test_http_refuses_hostile_images_with_json_and_keeps_serving(served, data, codec, status, error):
    server, _ = served
    resp = requests.post(f"{server.url}/v1/ops/gray", data=data, headers={"X-Codec": codec}, timeout=60)
    assert resp.status_code == status and resp.json()["error"] == error
    ok = requests.post(
        f"{server.url}/v1/ops/gray", data=encode(PHOTO), headers={"X-Codec": "raw"}, timeout=60
    )
    assert ok.status_code == 200
    health = requests.get(f"{server.url}/v1/health", timeout=10).json()
    assert health["image_operations"]["filters3"] == ["cartoon", "bilateral", "gray"]


def test_an_old_client_request_without_images_still_gets_its_matrix(served):
    """offload.proto's fields were added, none renumbered: a matrix request's bytes as the schema before
    images wrote them (op=log, a 1x1 float64 of 1.0) get the same reply, with no images in it."""
    _, target = served
    old = bytes.fromhex("0a036c6f67120e080110012208000000000000f03f")
    with grpc.insecure_channel(target) as channel:
        reply = pb.OpReply.FromString(channel.unary_unary(EXECUTE)(old, timeout=30))
    assert list(reply.result.values) == [0.0] and not reply.images


def test_the_client_cli_offloads_an_image_op_from_a_size_or_a_file(served, request, capsys, tmp_path):
    from client.__main__ import main as client_main

    _, target = served
    argv = ["offload", "--codec", "grpc", "--grpc-target", target, "--op", "gray", "--check"]
    assert client_main([*argv, "--size", "0.1MP"]) == 0
    assert capsys.readouterr().out.startswith(f"gray 0.1MP via grpc -> {target}")
    photo = tmp_path / "photo.png"
    photo.write_bytes(encode(PHOTO[:200, :300]))
    assert client_main([*argv, "--size", "0.1MP", "--image", str(photo), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["check"] == "ok" and out["t_server_compute"] > 0
    assert 0.5 < out["bytes_up"] / len(encode(PHOTO[:200, :300])) < 1.1  # the file's image, not 0.1MP's
    assert client_main(["offload", "--op", "gray", "--size", "0.1MP", "--codec", "raw"]) == 2
    assert "offloads over grpc here" in capsys.readouterr().err


def test_a_jpeg_comes_back_as_a_jpeg_where_the_server_reads_one(served, request):
    """JPEG is lossy both ways (quality 95 back), so only the mean is compared; Ruby reads PNG only."""
    _, target = served
    jpeg = encode(PHOTO, "jpeg")
    body = pb.OpRequest(op="gray", images=[pb.Image(format="jpeg", data=jpeg)]).SerializeToString()
    with grpc.insecure_channel(target) as channel:
        if language(request) == "ruby":
            with pytest.raises(grpc.RpcError) as exc:
                channel.unary_unary(EXECUTE)(body, timeout=60)
            assert exc.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert exc.value.details().startswith("unsupported image: the Ruby server decodes PNG only")
            return
        (image,) = pb.OpReply.FromString(channel.unary_unary(EXECUTE)(body, timeout=60)).images
    assert image.format == "jpeg" and image.data[:2] == b"\xff\xd8"
    want = apply("gray", decode_any(jpeg))[0]
    assert_close(decode_any(image.data), want, 1.0, None, "jpeg gray")
