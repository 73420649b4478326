"""Marshalling throughput of every registered codec, against `raw` and against a plain memory copy.

One trial's marshalling is measured per codec and size: the client encodes the request (two operands),
the server decodes it, encodes the response (the product) and the client decodes that, with the very
codec objects the server and client use. Throughput is MB/s of matrix data (three n x n matrices);
the physical limit is `np.copyto` of the same number of bytes into memory already touched. Both are
timed alike, per call as the median of batches lasting at least 20 ms each (`batch_time`): at 200x200
the copy takes tens of microseconds, and the fastest of a few single calls judged nothing.

Targets: `raw` encode+decode within 3x of the memory copy; the fastest JSON codec (JSON on the wire)
at least 5x faster than the standard library's `json`.
"""

from __future__ import annotations

import numpy as np

from benchmarks.common import MB, Row, batch_time, fmt_value
from client.offload import make_operands
from contracts.codecs import CODECS
from contracts.marshal_speed import marshal_times

SECTION = "codecs"
SIZES = (400, 800, 1200)
QUICK_SIZES = (200, 400)
RAW_VS_COPY = ("<=", 3.0)
JSON_SPEEDUP = (">=", 5.0)
BASELINE_JSON = "json"
COPY = "memory copy (np.copyto)"
VS_COPY = "enc+dec time / memory copy"
JSON_VS_FASTEST = "json time / fastest JSON codec's"


def json_codecs() -> list[str]:
    return [name for name, c in CODECS.items() if c.content_type == "application/json"]


def memory_copy_time(nbytes: int, batches: int) -> float:
    src = np.ones(nbytes, dtype=np.uint8)
    dst = np.zeros(nbytes, dtype=np.uint8)  # touched: page faults are not part of a copy
    return batch_time(lambda: np.copyto(dst, src), batches)


def run(quick: bool = False, sizes: tuple[int, ...] | None = None, progress=print) -> list[Row]:
    sizes = sizes or (QUICK_SIZES if quick else SIZES)
    batches = 3 if quick else 5
    rows: list[Row] = []
    jsons = json_codecs()
    for n in sizes:
        progress(f"codecs: {n}x{n}")
        rng = np.random.default_rng([7, n])
        operands = make_operands("mul", n, "float64", rng)
        result = operands[0] @ operands[1]
        data = 3 * n * n * 8
        copy_s = memory_copy_time(data, batches)
        rows.append(
            Row(
                SECTION,
                COPY,
                f"{n}",
                data / copy_s / MB,
                "MB/s",
                note=f"{copy_s * 1e3:.2f} ms for {data / MB:.1f} MB (2 operands + product)",
                details={"bytes": data, "ms": copy_s * 1e3},
            )
        )
        times = {
            name: marshal_times(c, operands, result, (batches,), batch_time) for name, c in CODECS.items()
        }
        raw_s = times["raw"]["encode_s"] + times["raw"]["decode_s"]
        for name, t in times.items():
            total = t["encode_s"] + t["decode_s"]
            enc_rate, dec_rate = data / t["encode_s"] / MB, data / t["decode_s"] / MB
            rows.append(
                Row(
                    SECTION,
                    VS_COPY,
                    f"{name} {n}",
                    total / copy_s,
                    "x",
                    RAW_VS_COPY if name == "raw" else None,
                    note=f"enc {enc_rate:.0f} MB/s, dec {dec_rate:.0f} MB/s, {fmt_value(total / raw_s, 'x')} raw",
                    details={
                        "encode_MBps": enc_rate,
                        "decode_MBps": dec_rate,
                        "x_raw": total / raw_s,
                        "encode_ms": t["encode_s"] * 1e3,
                        "decode_ms": t["decode_s"] * 1e3,
                        "bytes_up": t["bytes_up"],
                        "bytes_down": t["bytes_down"],
                    },
                )
            )
        others = [c for c in jsons if c != BASELINE_JSON]
        if BASELINE_JSON in times and others:
            total = {c: times[c]["encode_s"] + times[c]["decode_s"] for c in jsons}
            fastest = min(others, key=total.get)
            rows.append(
                Row(
                    SECTION,
                    JSON_VS_FASTEST,
                    f"{n}",
                    total[BASELINE_JSON] / total[fastest],
                    "x",
                    JSON_SPEEDUP,
                    note=f"fastest JSON codec: {fastest}; json {total[BASELINE_JSON] * 1e3:.0f} ms, "
                    f"{fastest} {total[fastest] * 1e3:.0f} ms",
                    details={"fastest": fastest},
                )
            )
    return rows


def cases(quick: bool) -> list[tuple[str, str, str, tuple | None]]:
    """(figure, case, unit, target) of every row, in order."""
    out = []
    for n in QUICK_SIZES if quick else SIZES:
        out.append((COPY, f"{n}", "MB/s", None))
        out += [(VS_COPY, f"{name} {n}", "x", RAW_VS_COPY if name == "raw" else None) for name in CODECS]
        out.append((JSON_VS_FASTEST, f"{n}", "x", JSON_SPEEDUP))
    return out
