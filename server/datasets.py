"""The energy study's datasets on the server: `GET /v1/datasets/<dataset>/<file>` (read-only, with
HTTP Range), and `python -m server.datasets --dir DIR --seed S NAME...`, which generates them
(`contracts.datasets`; docs/transfers.md).

Only the names `contracts.datasets` makes are served: a request's dataset and file name are checked
against that whitelist before any path is built, so nothing outside the datasets' directory can be
named (no `..`, no slashes: Flask's `<file>` stops at `/`, and the name must be `html-0001.bin`'s
form). The file must also have the size the directory's seed gives it. A Range header with one range
(`bytes=A-B`, `bytes=A-`, `bytes=-N`) gets 206 with `Content-Range`; several ranges, or one outside
the file, get 416; everything else refused gets a 4xx JSON `{"error", "detail"}` as every route of
the server does.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from flask import Flask, Response, request

from contracts.datasets import DATASETS, ROUTE, STAMP, file_size, generate
from server.handler import error_reply

CHUNK = 1 << 16
_RANGE = re.compile(r"^bytes=(\d*)-(\d*)$")


def _error(status: int, error: str, detail: str, headers: dict | None = None) -> Response:
    reply = error_reply(status, error, detail)
    resp = Response(reply.body, status=reply.status, headers=reply.headers)
    for key, value in (headers or {}).items():
        resp.headers[key] = value
    return resp


def parse_range(header: str | None, size: int) -> tuple[int, int] | None | str:
    """[start, end) of one byte range of a file of `size` bytes; None: no Range (the whole file); a
    string: why it cannot be served (416)."""
    if header is None:
        return None
    m = _RANGE.match(header.strip().replace(" ", ""))
    if not m:
        return f"{header!r} is not one range bytes=A-B, bytes=A- or bytes=-N"
    first, last = m.group(1), m.group(2)
    if not first and not last:
        return f"{header!r} names no byte"
    if not first:  # the last N bytes
        n = int(last)
        if n == 0 or size == 0:
            return f"{header!r}: no bytes to serve of {size}"
        return max(0, size - n), size
    start = int(first)
    end = size if not last else min(int(last) + 1, size)
    if start >= size or (last and int(last) < start):
        return f"{header!r} is outside the file's {size} bytes"
    return start, end


def _stream(path: Path, start: int, end: int, chunk: int = CHUNK):
    with open(path, "rb") as f:
        f.seek(start)
        left = end - start
        while left > 0:
            data = f.read(min(chunk, left))
            if not data:
                return
            left -= len(data)
            yield data


def add_routes(app: Flask, root: Path | None) -> None:
    """GET (and HEAD) ROUTE/<dataset>/<file> from `root` (None: no datasets here, every request 404)."""

    @app.get(f"{ROUTE}/<dataset>/<name>")
    def dataset_file(dataset: str, name: str) -> Response:
        if root is None:
            return _error(404, "no datasets", "this server was started without --datasets DIR")
        if dataset not in DATASETS:
            return _error(404, "unknown dataset", f"{dataset!r}; known: {', '.join(DATASETS)}")
        stamp = root / dataset / STAMP
        try:
            seed = int(stamp.read_text().strip())
        except (OSError, ValueError):
            return _error(404, "dataset not generated", f"run python -m server.datasets ... {dataset}")
        size = file_size(dataset, name, seed)
        path = root / dataset / name  # both parts whitelisted above and below
        if size is None:
            return _error(404, "unknown file", f"{name!r} is not a file of dataset {dataset}")
        if not path.is_file() or path.stat().st_size != size:
            return _error(404, "file not generated", f"{dataset}/{name} is missing or not {size} bytes")
        span = parse_range(request.headers.get("Range"), size)
        if isinstance(span, str):
            return _error(416, "range not satisfiable", span, {"Content-Range": f"bytes */{size}"})
        start, end = span or (0, size)
        headers = {"Content-Length": str(end - start), "Accept-Ranges": "bytes"}
        headers["Content-Type"] = "application/octet-stream"
        if span is not None:
            headers["Content-Range"] = f"bytes {start}-{end - 1}/{size}"
        body = [] if request.method == "HEAD" else _stream(path, start, end)
        return Response(body, status=206 if span else 200, headers=headers, direct_passthrough=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m server.datasets", description=__doc__.split("\n\n")[0])
    p.add_argument("--dir", type=Path, required=True, help="where the datasets go (one directory each)")
    p.add_argument("--seed", type=int, required=True)
    p.add_argument("datasets", nargs="+", choices=sorted(DATASETS))
    args = p.parse_args(argv)
    for name, total in generate(args.dir, args.datasets, args.seed).items():
        print(f"{name}: {DATASETS[name].files} files, {total} bytes in {args.dir / name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
