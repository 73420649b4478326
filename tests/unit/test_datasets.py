"""The energy study's datasets (`contracts.datasets`): generated from the seed, the same every time,
of the documented sizes; the read-only route that serves them (Range, refusals, traversal); the
fetch planner (files over concurrency, ranges over parallelism)."""

from __future__ import annotations

import json

import pytest

from contracts.datasets import DATASETS, KB, fetch_plan, file_parts, file_size, generate
from server.app import create_app

# what docs/transfers.md says of each dataset: files, and the range of a file's bytes
DOCUMENTED = {
    "html": (48, 102 * KB, 153 * KB),
    "image": (10, 524 * KB, 786 * KB),
    "video": (4, 1250 * KB, 2500 * KB),
}


def test_the_datasets_are_as_documented():
    assert set(DATASETS) == set(DOCUMENTED)
    for name, (files, low, high) in DOCUMENTED.items():
        sizes = DATASETS[name].sizes(seed=1)
        assert len(sizes) == files and all(low <= n <= high for n in sizes), name
        assert 5e6 < sum(sizes) < 8e6, name  # 2-3 s each at 20 Mbit/s
    assert DATASETS["html"].sizes(1) != DATASETS["html"].sizes(2)


def test_generation_is_deterministic_and_kept(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    totals = generate(a, ["html", "video"], seed=7)
    assert generate(b, ["html", "video"], seed=7) == totals
    for name in ("html", "video"):
        files = sorted(p.name for p in (a / name).glob("*.bin"))
        assert files == DATASETS[name].names()
        for f in files:
            assert (a / name / f).read_bytes() == (b / name / f).read_bytes()
        assert totals[name] == sum(p.stat().st_size for p in (a / name).glob("*.bin"))
    first = (a / "html" / "html-0000.bin").stat().st_mtime_ns
    generate(a, ["html"], seed=7)  # made already from this seed: kept
    assert (a / "html" / "html-0000.bin").stat().st_mtime_ns == first
    generate(a, ["html"], seed=8)  # another seed: made again
    assert (a / "html" / "seed").read_text().strip() == "8"
    assert (a / "html" / "html-0000.bin").stat().st_size == DATASETS["html"].sizes(8)[0]


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    root = tmp_path_factory.mktemp("datasets")
    generate(root, ["image"], seed=3)
    (root / "secret.txt").write_text("not a dataset file")
    return root, create_app(datasets=root).test_client()


def test_the_route_serves_whole_files_and_ranges(served):
    root, client = served
    body = (root / "image" / "image-0002.bin").read_bytes()
    whole = client.get("/v1/datasets/image/image-0002.bin")
    assert whole.status_code == 200 and whole.data == body
    assert whole.headers["Accept-Ranges"] == "bytes" and int(whole.headers["Content-Length"]) == len(body)
    for header, (a, b) in {
        "bytes=0-99": (0, 100),
        "bytes=100-": (100, len(body)),
        "bytes=-10": (len(body) - 10, len(body)),
        f"bytes=5-{len(body) + 50}": (5, len(body)),
    }.items():
        part = client.get("/v1/datasets/image/image-0002.bin", headers={"Range": header})
        assert part.status_code == 206 and part.data == body[a:b], header
        assert part.headers["Content-Range"] == f"bytes {a}-{b - 1}/{len(body)}"
    head = client.head("/v1/datasets/image/image-0002.bin")
    assert head.status_code == 200 and head.data == b""


@pytest.mark.parametrize(
    "header", ["bytes=0-1,5-9", "bytes=999999999-", "bytes=10-5", "items=0-1", "bytes=-0", "bytes=-"]
)
def test_a_range_it_cannot_serve_is_416_json(served, header):
    _, client = served
    resp = client.get("/v1/datasets/image/image-0000.bin", headers={"Range": header})
    assert resp.status_code == 416 and resp.headers["Content-Range"].startswith("bytes */")
    assert json.loads(resp.data)["error"] == "range not satisfiable"


@pytest.mark.parametrize(
    "path, error",
    [
        ("/v1/datasets/image/image-0010.bin", "unknown file"),  # one past the last file
        ("/v1/datasets/image/html-0000.bin", "unknown file"),  # another dataset's name
        ("/v1/datasets/html/html-0000.bin", "dataset not generated"),
        ("/v1/datasets/music/music-0000.bin", "unknown dataset"),
        ("/v1/datasets/image/..%2Fsecret.txt", "not found"),
        ("/v1/datasets/image/%2E%2E", "unknown file"),
        ("/v1/datasets/image/image-0000.bin%00", "unknown file"),
        ("/v1/datasets/../secret.txt", "unknown dataset"),
        ("/v1/datasets/image/../../secret.txt", "not found"),
    ],
)
def test_anything_else_is_a_json_4xx_and_nothing_outside_is_read(served, path, error):
    _, client = served
    resp = client.get(path)
    assert 400 <= resp.status_code < 500, path
    assert json.loads(resp.data)["error"] == error
    assert b"not a dataset file" not in resp.data


def test_the_route_is_read_only_and_off_without_a_directory(served):
    _, client = served
    resp = client.post("/v1/datasets/image/image-0000.bin", data=b"x")
    assert resp.status_code == 405 and json.loads(resp.data)["error"] == "method not allowed"
    off = create_app().test_client().get("/v1/datasets/image/image-0000.bin")
    assert off.status_code == 404 and json.loads(off.data)["error"] == "no datasets"


def test_a_file_of_the_wrong_size_is_not_served(tmp_path):
    generate(tmp_path, ["video"], seed=1)
    (tmp_path / "video" / "video-0001.bin").write_bytes(b"short")
    resp = create_app(datasets=tmp_path).test_client().get("/v1/datasets/video/video-0001.bin")
    assert resp.status_code == 404 and json.loads(resp.data)["error"] == "file not generated"
    assert file_size("video", "video-0001.bin", 1) == DATASETS["video"].sizes(1)[1]
    assert file_size("video", "../video-0001.bin", 1) is None


def test_a_file_splits_into_contiguous_ranges():
    parts = file_parts("f", 1001, 4)
    assert [(p.start, p.end) for p in parts] == [(0, 250), (250, 500), (500, 750), (750, 1001)]
    assert parts[0].header() == "bytes=0-249"
    assert len(file_parts("f", 3, 8)) == 3 and len(file_parts("f", 0, 8)) == 1  # never an empty range
    with pytest.raises(ValueError):
        file_parts("f", 10, 33)


@pytest.mark.parametrize("concurrency, parallelism", [(1, 1), (4, 1), (1, 8), (8, 4), (None, None), (64, 2)])
def test_the_plan_covers_every_byte_once(concurrency, parallelism):
    for name, ds in DATASETS.items():
        plan = fetch_plan(name, 5, concurrency, parallelism)
        assert plan.channels == min(concurrency or 1, ds.files)
        assert plan.total == ds.total(5)
        for (file, size), parts in zip(ds.files_of(5), plan.files, strict=True):
            assert len(parts) == (parallelism or 1) and {p.file for p in parts} == {file}
            assert parts[0].start == 0 and parts[-1].end == size
            assert all(a.end == b.start for a, b in zip(parts, parts[1:], strict=False))
        assert plan.connections == plan.channels * (parallelism or 1)
