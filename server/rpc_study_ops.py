"""The lightweight-RPC study's four operations, as every transport's server answers them.

The study (../shared/papers/: HPRPC against gRPC) times 1000 calls of each: `SayHello` (a small
request and reply), `Average` (a list of n int32 in, their mean out), `GetRandNums` (n in, n random
32-bit integers out: uniform in [0, 2^31 - 1]) and `SendRcvLargeData` (a message of K int32 members,
echoed). The work is small on purpose: the calls measure what a transport adds around it. Values are
a message's fields in order (`contracts.tagless.Message`); a transport's codec turns its own messages
into them.
"""

from __future__ import annotations

import numpy as np

from contracts.tagless import Status, TaglessError

RAND_MAX = (1 << 31) - 1  # GetRandNums' values: uniform in [0, RAND_MAX]
MAX_NAME = 1 << 20  # SayHello's name, bytes: a larger one is refused (its text may take 4 bytes a character)
_rng = np.random.default_rng()


def reply_bytes(method: str, values: tuple, payload_bytes: int) -> int:
    """The tagless reply's payload size for a call, known before it is built (what a server reserves
    of its memory budget): "Hello " and the name, a double, a count and n values, or the echo."""
    if method == "SayHello":
        return payload_bytes + len("Hello ")
    if method == "Average":
        return 8
    if method == "GetRandNums":
        return 4 + 4 * max(0, values[0])
    return payload_bytes


def say_hello(values: tuple) -> tuple:
    (name,) = values
    return (f"Hello {name}",)


def average(values: tuple) -> tuple:
    """The mean of the list as a double; 0.0 for an empty one (the study sends n >= 10)."""
    (numbers,) = values
    return (float(np.mean(numbers, dtype=np.float64)) if len(numbers) else 0.0,)


def get_rand_nums(values: tuple, max_reply: int) -> tuple:
    """n values uniform in [0, RAND_MAX]; a count below 0 is refused, and one whose reply would pass
    `max_reply` bytes (the server's body limit) is refused before anything is drawn."""
    (n,) = values
    if n < 0:
        raise TaglessError(Status.BAD_FRAME, f"GetRandNums: a count of {n}")
    if 4 + 4 * n > max_reply:
        raise TaglessError(
            Status.TOO_LARGE, f"GetRandNums: {n} values pass the reply limit of {max_reply} bytes"
        )
    return (_rng.integers(0, RAND_MAX, size=n, endpoint=True, dtype=np.int32),)


def echo(values: tuple) -> tuple:
    return values


def answer(method: str, values: tuple, max_reply: int) -> tuple:
    """The reply's values for a call of `method` (a name in contracts/rpc_study.tagless)."""
    if method == "SayHello":
        return say_hello(values)
    if method == "Average":
        return average(values)
    if method == "GetRandNums":
        return get_rand_nums(values, max_reply)
    if method.startswith("SendRcvLargeData"):
        return echo(values)
    raise TaglessError(Status.UNKNOWN_METHOD, f"no operation {method}")
