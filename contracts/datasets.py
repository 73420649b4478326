"""The energy study's datasets (Guner and Kosar, "Energy-Performance Trade-offs in Mobile Data
Transfers", Table 2), scaled to this machine and a link of at most 20 Mbit/s, and how a client fetches
one: the `fetch` op (docs/transfers.md).

| dataset | the study: files, sizes, total | here: files, sizes, about |
|---|---|---|
| html  | 1500, 102-153 KB, 196 MB  | 48, 102-153 KB (the same), 6.1 MB |
| image | 200, 524-786 KB, 128 MB   | 10, 524-786 KB (the same), 6.7 MB |
| video | 64, 10-20 MB, 1124 MB     | 4, 1.25-2.5 MB (an eighth), 7.8 MB |

The small files keep their sizes (what makes html and image what they are: a file's bytes against
its request's round trip); the counts are cut so that each set takes about 2.6-3.3 s at 20 Mbit/s, and
the video files are an eighth of the study's so that one of them still splits into 8 ranges of
150 KB or more. Sizes are uniform in their range, drawn from the seed; the bytes are random
(incompressible), from the seed and the file's name. The same seed makes the same files, byte for
byte, on any host: the server generates them, the client knows their names and sizes from the seed.

A fetch of a dataset with concurrency C, parallelism P and I/O size B: C files at once (each channel
takes the next file when its last is done), each file in min(P, its bytes) contiguous Range requests
at once, one connection each (`contracts.transfer.bounds`: the parts of the offload requests), each
response read in reads of B bytes.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from contracts.transfer import MAX_PARALLELISM, bounds

FETCH = "fetch"  # the op of a dataset fetch (a trial of its own kind: no local baseline, no codec)
FETCH_METHOD = "http"  # its method: plain HTTP GETs with Range
ROUTE = "/v1/datasets"  # GET ROUTE/<dataset>/<file>, with or without a Range header
_FILE = re.compile(r"^([a-z]+)-(\d{4})\.bin$")
KB = 1000  # the study's KB and MB are decimal


@dataclass(frozen=True)
class Dataset:
    name: str
    files: int
    min_bytes: int
    max_bytes: int
    study: str  # the study's row of Table 2

    def sizes(self, seed: int) -> list[int]:
        """Each file's bytes, uniform in [min, max], from the seed and the dataset's name."""
        rng = np.random.default_rng(_seed(seed, self.name))
        return [int(n) for n in rng.integers(self.min_bytes, self.max_bytes + 1, self.files)]

    def names(self) -> list[str]:
        return [f"{self.name}-{i:04d}.bin" for i in range(self.files)]

    def files_of(self, seed: int) -> list[tuple[str, int]]:
        """(file name, bytes) of every file, in order."""
        return list(zip(self.names(), self.sizes(seed), strict=True))

    def total(self, seed: int) -> int:
        return sum(self.sizes(seed))


DATASETS = {
    d.name: d
    for d in (
        Dataset("html", 48, 102 * KB, 153 * KB, "1500 files, 128 KB on average (102-153 KB), 196 MB"),
        Dataset("image", 10, 524 * KB, 786 * KB, "200 files, 640 KB on average (524-786 KB), 128 MB"),
        Dataset("video", 4, 1250 * KB, 2500 * KB, "64 files, 16.4 MB on average (10-20 MB), 1124 MB"),
    )
}


def _seed(seed: int, *names: str) -> int:
    digest = hashlib.sha256("/".join([str(seed), *names]).encode()).digest()
    return int.from_bytes(digest[:8], "little")


def content(seed: int, dataset: str, name: str, size: int) -> bytes:
    """A file's bytes: random, from the seed, the dataset and the file's name."""
    return np.random.default_rng(_seed(seed, dataset, name)).bytes(size)


def lookup(dataset: str) -> Dataset:
    """The dataset of this name; KeyError naming the known ones."""
    if dataset not in DATASETS:
        raise KeyError(f"unknown dataset {dataset!r}; known: {', '.join(DATASETS)}")
    return DATASETS[dataset]


def file_size(dataset: str, name: str, seed: int) -> int | None:
    """The bytes of `name` in `dataset` (None: no such file): a whitelist, no path is ever built from
    what a client sent but the names this module makes."""
    if dataset not in DATASETS or not (m := _FILE.match(name)) or m.group(1) != dataset:
        return None
    index = int(m.group(2))
    sizes = DATASETS[dataset].sizes(seed)
    return sizes[index] if index < len(sizes) else None


STAMP = "seed"  # a dataset directory's record of the seed its files were made from


def generate(root: Path, datasets: list[str] | tuple[str, ...], seed: int) -> dict[str, int]:
    """Write each dataset's files under root/<dataset>/ (a directory already made from this seed is
    kept as it is); its total bytes by name."""
    totals = {}
    for name in datasets:
        ds = lookup(name)
        where = root / name
        stamp = where / STAMP
        files = ds.files_of(seed)
        kept = stamp.exists() and stamp.read_text().strip() == str(seed)
        if not (kept and all((where / f).is_file() and (where / f).stat().st_size == n for f, n in files)):
            where.mkdir(parents=True, exist_ok=True)
            stamp.unlink(missing_ok=True)
            for f, n in files:
                tmp = where / (f + ".tmp")
                tmp.write_bytes(content(seed, name, f, n))
                tmp.replace(where / f)
            stamp.write_text(f"{seed}\n")
        totals[name] = sum(n for _, n in files)
    return totals


@dataclass(frozen=True)
class Part:
    """One Range request: bytes [start, end) of a file."""

    file: str
    start: int
    end: int

    def header(self) -> str:
        return f"bytes={self.start}-{self.end - 1}"


def file_parts(name: str, size: int, parallelism: int) -> list[Part]:
    """A file as min(parallelism, size) contiguous ranges (at least one, also for an empty file)."""
    if not 1 <= parallelism <= MAX_PARALLELISM:
        raise ValueError(f"parallelism {parallelism}: need 1 to {MAX_PARALLELISM}")
    n = max(1, min(parallelism, size))
    return [Part(name, a, b) for a, b in bounds(size, n)]


@dataclass(frozen=True)
class FetchPlan:
    """A dataset fetch: its files' parts in order, and how many files are fetched at once."""

    dataset: str
    channels: int  # files at once: min(concurrency, files)
    files: list[list[Part]]  # per file, its ranges (fetched at once, one connection each)

    @property
    def total(self) -> int:
        return sum(p.end - p.start for parts in self.files for p in parts)

    @property
    def connections(self) -> int:
        """The most connections open at once: each channel's streams for its widest file."""
        widest = sorted((len(parts) for parts in self.files), reverse=True)[: self.channels]
        return sum(widest)


def fetch_plan(dataset: str, seed: int, concurrency: int | None, parallelism: int | None) -> FetchPlan:
    """How a client fetches `dataset` with these settings (None: 1)."""
    ds = lookup(dataset)
    c, p = concurrency or 1, parallelism or 1
    if c < 1:
        raise ValueError(f"concurrency {c}: need at least 1")
    files = [file_parts(f, n, p) for f, n in ds.files_of(seed)]
    return FetchPlan(dataset, min(c, len(files)), files)
