"""Image ops' contracts (issue 47, item 2): sizes in megapixels through the one size parser, the image
grid's checks, the generated images, the header read before decoding (the bomb refused undecoded),
the wires that carry images, and the local baseline's filters."""

from __future__ import annotations

import base64
import json

import numpy as np
import pytest

from contracts import offload_pb2 as pb
from contracts.errors import UserError
from contracts.grid import image_grid_problem, is_image_size, parse_sizes, size_label, sizes_for
from contracts.image_wire import LENGTHS_HEADER, ImageWire, image_request, peek_op, reply_images
from contracts.images import (
    ImageError,
    ImageTooLarge,
    apply,
    decode,
    dimensions,
    encode,
    generate,
    gray_reference,
    pixels_of,
    read_header,
)
from contracts.limits import Limits
from contracts.ops import execute
from contracts.wire import CodecError
from server.image_stages import run_image_stages
from server.timing import StageClock
from tests.image_samples import NOT_AN_IMAGE, PHOTO, bomb_png, corrupt_png

MIB = 1 << 20


def test_megapixels_are_one_spelling_of_the_size_parser_and_stored_as_pixels():
    assert parse_sizes("0.3MP,4MP,8MP") == (307200, 3981312, 7990272)
    assert dimensions(0.3) == (480, 640) and dimensions(4) == (1728, 2304) and dimensions(8) == (2448, 3264)
    assert parse_sizes([400, "0.3mp", "200-300:100"]) == (200, 300, 400, 307200)  # matrix sizes as they were
    assert [size_label(s) for s in parse_sizes("500,0.3MP,4MP,8MP")] == ["500", "0.3MP", "4MP", "8MP"]
    assert is_image_size(pixels_of(0.05)) and not is_image_size(20000)
    assert sizes_for("gray", (400, 307200)) == (307200,) and sizes_for("mul", (400, 307200)) == (400,)
    for bad, words in (("0.01MP", "out of range"), ("65MP", "out of range"), ("4 MB", "not a matrix size")):
        with pytest.raises(UserError, match=words):
            parse_sizes(bad, "--sizes")


def test_an_image_grid_is_refused_in_one_line_where_it_cannot_run():
    assert image_grid_problem(("gray", "mul"), (400, 307200), ("grpc",), ("python", "go")) is None
    assert "needs an image size" in image_grid_problem(("gray",), (400,), ("grpc",), ("python",))
    assert "needs a matrix size" in image_grid_problem(("mul",), (307200,), ("grpc",), ("python",))
    assert "not over json" in image_grid_problem(("gray",), (307200,), ("json", "grpc"), ("python",))
    # an image op goes to the servers that have it, and is refused only where none has
    assert image_grid_problem(("bilateral",), (307200,), ("grpc",), ("python", "ruby")) is None
    problem = image_grid_problem(("bilateral",), (307200,), ("grpc",), ("go", "ruby"))
    assert problem == "no server in servers has bilateral (go: gray; ruby: gray)"


def test_the_embedded_studys_grid_filters_on_the_opencv_servers_only():
    """Matrices to five servers, the three filters to those with OpenCV: the plan, the trial count, the
    estimate, the headline's note and the analysis's cells all leave filters3 off Go and Ruby."""
    from contracts.stages import offloads, unserved
    from testbed.estimate import DurationModel
    from testbed.experiment import planned_trials
    from testbed.overrides import override
    from testbed.sweep.plan import plan_trials

    servers = ("cpp", "python", "java", "go", "ruby")
    assert [s for _, s in offloads(("grpc",), servers, "filters3")] == ["cpp", "python", "java"]
    assert [s for _, s in offloads(("grpc",), servers, "mul")] == list(servers)
    assert unserved(("mul", "filters3"), ("grpc",), servers) == "filters3 not on go, ruby"
    flags = {"ops": "mul,filters3", "sizes": "1000,0.11MP", "rates": "100", "methods": "grpc", "reps": "2"}
    exp = override(None, {**flags, "servers": ",".join(servers)})
    trials = plan_trials(exp)
    remote = {(t.op, t.server) for t in trials if t.method != "local"}
    assert remote == {("mul", s) for s in servers} | {("filters3", s) for s in ("cpp", "python", "java")}
    assert len(trials) == planned_trials(exp) == 2 * (2 + 5 + 3)
    assert len(DurationModel(exp, None)._cells()) == 2 + 5 + 3


def test_the_experiment_knows_image_ops_and_counts_their_cells_at_image_sizes():
    from testbed.overrides import override

    flags = {"ops": "gray,mul", "sizes": "64,0.3MP,4MP", "rates": "100", "methods": "grpc", "reps": "3"}
    exp = override(None, {**flags, "servers": "python,cpp,go,java,ruby"})
    from testbed.experiment import planned_trials

    assert planned_trials(exp) == 3 * 3 * (1 + 5)  # (gray at 2 sizes + mul at 1) x reps x (local + servers)
    with pytest.raises(UserError, match="no server in servers has cartoon"):
        override(None, {**flags, "ops": "cartoon", "servers": "go"})


def test_generated_images_are_deterministic_photo_like_and_of_their_size():
    a, b = generate(pixels_of(0.3), 1), generate(pixels_of(0.3), 1)
    assert a.shape == (480, 640, 3) and a.dtype == np.uint8 and np.array_equal(a, b)
    assert not np.array_equal(a, generate(pixels_of(0.3), 2))
    assert a.std() > 10 and len(np.unique(a.reshape(-1, 3), axis=0)) > 10_000


def test_the_header_is_read_before_decoding_and_a_bomb_is_refused_undecoded():
    assert read_header(encode(PHOTO)).__dict__ == {"format": "png", "rows": 480, "cols": 640}
    assert read_header(encode(PHOTO, "jpeg")).__dict__ == {"format": "jpeg", "rows": 480, "cols": 640}
    bomb = bomb_png()
    assert len(bomb) < 20_000 and read_header(bomb).rows == 10_000
    with pytest.raises(ImageTooLarge, match="image too large: a 10000x10000 png decodes to 300000000 bytes"):
        decode(bomb, 256 * MIB, "--max-body-mb")
    with pytest.raises(ImageError, match="corrupt image"):
        decode(corrupt_png(), 256 * MIB, "--max-body-mb")
    with pytest.raises(ImageError, match="not an image"):
        decode(NOT_AN_IMAGE, 256 * MIB, "--max-body-mb")
    assert np.array_equal(decode(encode(PHOTO), 256 * MIB, "x"), PHOTO)  # PNG: lossless


def test_the_filters_follow_opencvs_recipes_and_gray_its_fixed_point():
    gray, bilateral, cartoon = (
        apply("gray", PHOTO)[0],
        apply("bilateral", PHOTO)[0],
        apply("cartoon", PHOTO)[0],
    )
    assert gray.shape == (480, 640) and bilateral.shape == cartoon.shape == PHOTO.shape
    assert np.abs(gray.astype(int) - gray_reference(PHOTO)).max() <= 1
    assert [o.shape for o in apply("filters3", PHOTO)] == [PHOTO.shape, PHOTO.shape, (480, 640)]
    assert (cartoon == 0).all(axis=2).mean() > 0.01  # the edges, black
    assert not np.array_equal(bilateral, PHOTO)
    assert np.array_equal(execute("gray", [PHOTO])[0], gray)  # the local baseline's op table


def test_grpc_carries_an_image_up_and_images_down_and_names_its_op_first():
    body = image_request("filters3", PHOTO)
    assert peek_op(body) == "filters3" and peek_op(b"") == "" and peek_op(b"\x12\x00") == ""
    op, fmt, img = ImageWire("protobuf").decode(body, {}, 256 * MIB, "x")
    assert (op, fmt) == ("filters3", "png") and np.array_equal(img, PHOTO)
    out, headers = ImageWire("protobuf").encode(apply("filters3", img), fmt)
    assert headers["Content-Type"] == "application/x-protobuf"
    assert [i.shape for i in reply_images(out)] == [PHOTO.shape, PHOTO.shape, (480, 640)]
    with pytest.raises(CodecError, match="wrong number of images"):
        ImageWire("protobuf").decode(pb.OpRequest(op="gray").SerializeToString(), {}, MIB, "x")


def test_http_carries_raw_bytes_and_base64_json_and_matrix_codecs_none():
    png = encode(PHOTO)
    assert ImageWire("raw").decode(png, {}, 256 * MIB, "x")[1] == "png"
    out, headers = ImageWire("raw").encode(apply("filters3", PHOTO), "png")
    lengths = [int(n) for n in headers[LENGTHS_HEADER].split(",")]
    assert headers["Content-Type"] == "image/png" and sum(lengths) == len(out)
    doc = json.dumps({"images": [{"format": "png", "data": base64.b64encode(png).decode()}]}).encode()
    assert np.array_equal(ImageWire("json").decode(doc, {}, 256 * MIB, "x")[2], PHOTO)
    for bad in (b"[1]", b'{"images": [{"data": "!!"}]}', b'{"images": []}'):
        with pytest.raises(CodecError):
            ImageWire("json").decode(bad, {}, MIB, "x")
    with pytest.raises(CodecError, match="codec has no images"):
        ImageWire("msgpack")


def test_an_image_file_joins_the_sizes_at_its_pixel_count_and_the_worker_runs_on_it(tmp_path):
    from client.worker import TrialWorker
    from contracts.manifest import Experiment
    from testbed.overrides import override

    path = tmp_path / "photo.jpg"
    path.write_bytes(encode(PHOTO[:300, :400], "jpeg"))
    flags = {"ops": "gray", "sizes": "0.3MP", "rates": "100", "methods": "grpc", "reps": "3"}
    exp = override(None, {**flags, "image": str(path)})
    assert exp.sizes == (120000, 307200) and exp.image == str(path.resolve())
    assert Experiment.from_dict(exp.as_dict()) == exp  # the manifest's experiment keeps it
    assert Experiment.from_dict({k: v for k, v in exp.as_dict().items() if k != "image"}).image is None
    with pytest.raises(UserError, match="give a PNG or JPEG file"):
        override(None, {**flags, "image": str(tmp_path / "missing.png")})
    worker = TrialWorker("http://127.0.0.1:9", seed=1, timeout=5)
    worker.image = exp.image
    (from_file,) = worker.operands("gray", 120000, "float64")
    assert from_file.shape == (300, 400, 3)
    assert worker.operands("gray", 307200, "float64")[0].shape == (480, 640, 3)  # generated


def test_an_image_body_naming_another_op_than_the_url_is_refused_as_the_matrix_ops_are():
    def run(url_op):
        body = [image_request("gray", PHOTO)]
        return run_image_stages(ImageWire("protobuf"), body, {}, StageClock(), Limits.from_mb(256), url_op)

    assert run(None)[0] == "gray" and run("gray")[0] == "gray"  # gRPC: the body names it; HTTP: the same
    with pytest.raises(CodecError, match="operation mismatch"):
        run("cartoon")
