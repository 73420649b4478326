"""Per-call overhead: the lightweight-RPC study's SayHello over each transport on the unshaped link.

The study (../shared/papers/: HPRPC against gRPC) measured 1000 SayHello calls at 305 ms over gRPC
and 279 ms over HPRPC: a small request and reply, so the time is what the transport adds around a
call. Here a batch of such calls runs from the client host to the server's Python servers through
the switch, unshaped (`client.rpc_calls`, `python -m client rpc-calls`, one persistent connection,
after warm-up calls), for the tagless transport and for gRPC. The figures are each transport's median
per-call time, and their ratio in the same run, with its target: tagless's per call at most gRPC's
(a transport with no HTTP/2 framing and no tags should cost no more than one with both).
"""

from __future__ import annotations

import json
from collections.abc import Callable

from benchmarks.common import Row, skipped
from benchmarks.session import BenchError
from contracts.rpc_study import NAME
from contracts.stages import GRPC, PYTHON, TAGLESS
from testbed.backends.lab import Lab

SECTION = "rpc"
PER_CALL = "per-call time"
RATIO = "tagless / gRPC per call"
CASE = "SayHello unshaped"
TARGET = ("<=", 1.0)
CALLS, QUICK_CALLS = 1000, 300


def cases(quick: bool) -> list[tuple[str, str, str, tuple | None]]:
    """(figure, case, unit, target) of every row, in order."""
    return [
        (PER_CALL, f"{TAGLESS} {CASE}", "us", None),
        (PER_CALL, f"{GRPC} {CASE}", "us", None),
        (RATIO, CASE, "x", TARGET),
    ]


def batch(lab: Lab, transport: str, calls: int) -> dict:
    """A batch of SayHello calls from the client host: the batch's figures (`client.rpc_calls.Batch`)."""
    target = lab.tagless_target_of(PYTHON) if transport == TAGLESS else lab.grpc_target
    client = lab.host("client")
    argv = client.python(
        "client", "rpc-calls", "--transport", transport, "--target", target, "--op", "SayHello", "--n", str(len(NAME)),
        "--calls", str(calls), "--warmup", "50",
    )  # fmt: skip
    result = client.run(argv, limited=False, check=False, timeout=300)
    if not result.ok:
        raise BenchError(f"{transport} calls failed: {(result.stderr or result.stdout).strip()[-300:]}")
    return json.loads(result.stdout)


def run(lab: Lab, quick: bool = False, progress: Callable = print) -> list[Row]:
    calls = QUICK_CALLS if quick else CALLS
    progress(f"rpc: {calls} SayHello calls over tagless and gRPC, unshaped")
    try:
        lab.clear_shaping()
        got = {t: batch(lab, t, calls) for t in (TAGLESS, GRPC)}
    except BenchError as exc:
        return [skipped(SECTION, f, c, u, str(exc), t) for f, c, u, t in cases(quick)]
    rows = [
        Row(
            SECTION,
            PER_CALL,
            f"{t} {CASE}",
            b["median_s"] * 1e6,
            "us",
            note=f"{calls} calls in {b['total_s'] * 1e3:.1f} ms; p99 {b['p99_s'] * 1e6:.0f} us; "
            f"{b['bytes_up']} B up, {b['bytes_down']} B down a call",
            details=b,
        )
        for t, b in got.items()
    ]
    ratio = got[TAGLESS]["median_s"] / got[GRPC]["median_s"]
    total = got[TAGLESS]["total_s"] / got[GRPC]["total_s"]
    rows.append(
        Row(
            SECTION,
            RATIO,
            CASE,
            ratio,
            "x",
            TARGET,
            note=f"{calls} calls' totals: {total:.3f}x (the study: 0.915x)",
        )
    )
    return rows
