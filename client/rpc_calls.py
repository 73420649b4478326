"""A batch of the lightweight-RPC study's calls, timed as the study timed them: N calls back to back,
the whole batch's wall time and each call's.

The study (../shared/papers/: HPRPC against gRPC) reports the total time of 1000 calls per
operation; a batch here gives that (`total_s`) and each call's time besides (median, p99), so one
slow call shows as what it is. Its request values are drawn once per batch from a seeded generator,
the same for either transport (`request_values`): SayHello's name of n characters, Average's n int32 (any value),
GetRandNums' count n, LargeDataK's K members uniform in [0, 2^31 - 1] ("random 32-bit integers").
"""

from __future__ import annotations

import math
import statistics
import time
from dataclasses import asdict, dataclass

import numpy as np

from client.grpc_study_call import GrpcStudyClient
from client.tagless_call import TaglessClient
from contracts.rpc_study import LARGE_DATA, SAY_HELLO, name_of
from contracts.stages import GRPC, TAGLESS
from contracts.tagless import Method, study

TRANSPORTS = (TAGLESS, GRPC)
INT32 = (-(1 << 31), (1 << 31) - 1)
MEMBER = (0, (1 << 31) - 1)  # LargeData's members and GetRandNums' values


def study_method(op: str, n: int) -> Method:
    """The schema's method for an operation at its size: SendRcvLargeData at K = n is its own method."""
    name = f"{LARGE_DATA}{n}" if op == LARGE_DATA else op
    try:
        return study().method(name)
    except KeyError:
        known = sorted({m.name.rstrip("0123456789") for m in study().methods.values()})
        raise ValueError(f"no study operation {name} (the operations: {', '.join(known)})") from None


def request_values(method: Method, n: int, seed: int = 0) -> tuple:
    """The request's values for `method` at size `n` (a list's length, a count, or K)."""
    rng = np.random.default_rng(seed)
    if method.name == SAY_HELLO:
        return (name_of(n),)
    if method.name == "Average":
        return (rng.integers(INT32[0], INT32[1], size=n, endpoint=True, dtype=np.int32),)
    if method.name == "GetRandNums":
        return (n,)
    k = len(method.request.fields)
    return tuple(rng.integers(MEMBER[0], MEMBER[1], size=k, endpoint=True).tolist())


def client_for(transport: str, target: str, persistent: bool = True):
    """The transport's client of the study's service at `target` (HOST:PORT)."""
    if transport == TAGLESS:
        host, port = target.rsplit(":", 1)
        return TaglessClient(host.strip("[]"), int(port), persistent=persistent)
    if transport == GRPC:
        return GrpcStudyClient(target, persistent=persistent)
    raise ValueError(f"no transport {transport!r} (choose {', '.join(TRANSPORTS)})")


@dataclass(frozen=True)
class Batch:
    calls: int
    total_s: float  # the batch's wall time, first call's start to last call's end
    median_s: float  # one call's, median over the batch
    p99_s: float
    bytes_up: int  # one call's request as its transport frames it
    bytes_down: int
    server_cpu_s: float  # the server's stages' CPU per call, median (decode + compute + encode)

    def as_dict(self) -> dict:
        return asdict(self)


def run_batch(client, method: Method, values: tuple, calls: int, warmup: int = 0) -> Batch:
    """`calls` calls of `method` with `values` through `client`, after `warmup` untimed ones (at
    least one: its bytes are the call's, with no timing trailer; the timed calls ask for one)."""
    for _ in range(max(1, warmup)):
        plain = client.call(method, values)
    times, cpu = [], []
    start = time.perf_counter()
    for _ in range(calls):
        began = time.perf_counter()
        reply = client.call(method, values, timing=True)
        times.append(time.perf_counter() - began)
        t = reply.timing
        cpu.append(t.decode_cpu + t.compute_cpu + t.encode_cpu if t else math.nan)
    total = time.perf_counter() - start
    ordered = sorted(times)
    return Batch(
        calls=calls,
        total_s=total,
        median_s=statistics.median(times),
        p99_s=ordered[min(len(ordered) - 1, math.ceil(0.99 * len(ordered)) - 1)],
        bytes_up=plain.bytes_up,
        bytes_down=plain.bytes_down,
        server_cpu_s=statistics.median(cpu) if cpu else math.nan,
    )
