"""How fast this machine marshals one trial with a codec: the fastest of repeated calls.

The duration estimate (`testbed.estimate`) and the codecs benchmark (`benchmarks.codecs`) both time
the codecs with these, so the estimate measures what `testbed bench` measures. Timings of in-process
work are minimums over repetitions: noise on a shared machine only ever adds time.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np

from contracts.codecs import Codec
from contracts.wire import body_bytes


def time_call(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def best_time(fn: Callable[[], object], min_reps: int, max_reps: int, budget_s: float) -> float:
    """The fastest of at least `min_reps` calls, more (up to `max_reps`) while within `budget_s`."""
    times: list[float] = []
    started = time.perf_counter()
    while len(times) < min_reps or (len(times) < max_reps and time.perf_counter() - started < budget_s):
        times.append(time_call(fn))
    return min(times)


def marshal_times(
    codec: Codec, operands: list[np.ndarray], result: np.ndarray, reps: tuple, timer: Callable = best_time
) -> dict:
    """Encode and decode of one trial (request and response), in seconds, and the body sizes; each
    call timed by `timer(call, *reps)` (the fastest of repeated calls; the bench's times batches)."""
    request, req_headers = codec.encode_request(operands)
    response, resp_headers = codec.encode_response(result)
    req_bytes, resp_bytes = body_bytes(request), body_bytes(response)
    enc = timer(lambda: codec.encode_request(operands), *reps) + timer(
        lambda: codec.encode_response(result), *reps
    )
    dec = timer(lambda: codec.decode_request(req_bytes, req_headers), *reps) + timer(
        lambda: codec.decode_response(resp_bytes, resp_headers), *reps
    )
    return {"encode_s": enc, "decode_s": dec, "bytes_up": len(req_bytes), "bytes_down": len(resp_bytes)}
