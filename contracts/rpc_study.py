"""The lightweight-RPC study's operations as a sweep's ops (issue 46; docs/rpc-study.md).

The study (../shared/papers/: HPRPC with its tagless Kodosis serializer, against gRPC) times batches
of 1000 calls of four operations; a sweep of them (`rpc:` in an experiment file) runs each trial as
such a batch over a transport (`tagless` or `grpc`), at a size that is the operation's own:

| op | size | the study's sizes |
|---|---|---|
| SayHello | the name's length in characters (the study: a short name) | - |
| Average | n int32 in the request | 10, 100, 1000, 10000 |
| GetRandNums | n int32 in the reply | 10, 100, 1000, 10000 |
| SendRcvLargeData | K distinct int32 members, echoed | 128, 256, ..., 8192 |

Each op's sizes are its own (`Experiment.sizes_of`); a size is at most `MAX_N` (every grid size
above 20000 is an image's pixel count, `contracts.grid.is_image_size`).
"""

from __future__ import annotations

from contracts.errors import UserError

SAY_HELLO, AVERAGE, GET_RAND_NUMS, LARGE_DATA = "SayHello", "Average", "GetRandNums", "SendRcvLargeData"
STUDY_OPS = (SAY_HELLO, AVERAGE, GET_RAND_NUMS, LARGE_DATA)
LARGE_DATA_K = tuple(128 << i for i in range(7))  # the schema's LargeDataK (contracts/rpc_study.tagless)
NAME = "testbed"  # SayHello's name at its default size; other lengths repeat it
MAX_N = 20_000
MAX_CALLS = 100_000
DEFAULT_CALLS = 1000  # the study's batch
DEFAULT_SIZES = {
    SAY_HELLO: (len(NAME),),
    AVERAGE: (10, 100, 1000, 10000),
    GET_RAND_NUMS: (10, 100, 1000, 10000),
    LARGE_DATA: LARGE_DATA_K,
}
RPC_TRANSPORTS = ("tagless", "grpc")  # contracts.stages.TAGLESS, GRPC


def is_study_op(op: str) -> bool:
    return op in STUDY_OPS


def name_of(size: int) -> str:
    """SayHello's name of `size` characters: the study's short name, repeated and cut."""
    return (NAME * (size // len(NAME) + 1))[:size]


def check_sizes(op: str, sizes: tuple[int, ...], where: str) -> None:
    """Refuse a size the operation has not: a K without its LargeDataK, a list past `MAX_N`."""
    if not sizes:
        raise UserError(f"{where}: no sizes for {op}", f"give e.g. {list(DEFAULT_SIZES[op])}")
    for n in sizes:
        if op == LARGE_DATA and n not in LARGE_DATA_K:
            raise UserError(
                f"{where}: {op} has no K = {n}", f"give K among {', '.join(map(str, LARGE_DATA_K))}"
            )
        if not 1 <= n <= MAX_N:
            raise UserError(f"{where}: {op} at {n} is out of range", f"give sizes from 1 to {MAX_N}")


def parse_operations(value, where: str = "rpc.operations") -> dict[str, tuple[int, ...]]:
    """The operations and each one's sizes: a mapping `{op: [sizes]}` (an op with no list: its
    default sizes, the study's), or a list of ops at their defaults."""
    if isinstance(value, list):
        value = dict.fromkeys(value)
    if not isinstance(value, dict) or not value:
        raise UserError(
            f"{where}: {value!r} is not a mapping of operations to sizes",
            f"give e.g. {{Average: [10, 10000]}}; operations: {', '.join(STUDY_OPS)}",
        )
    out: dict[str, tuple[int, ...]] = {}
    for op, sizes in value.items():
        if op not in STUDY_OPS:
            raise UserError(f"{where}: unknown operation {op!r}", f"use some of: {', '.join(STUDY_OPS)}")
        if sizes is None:
            sizes = DEFAULT_SIZES[op]
        elif not isinstance(sizes, list) or not all(
            isinstance(n, int) and not isinstance(n, bool) for n in sizes
        ):
            raise UserError(
                f"{where}: {op}'s sizes {sizes!r} are not a list of integers", "give e.g. [10, 100]"
            )
        sizes = tuple(sorted(set(sizes)))
        check_sizes(op, sizes, where)
        out[op] = sizes
    return out


# What a call is expected to carry, for the sweep's estimate only (the trials count the real bytes):
# the tagless frame's 16-byte header, a list's 4-byte count; protobuf's tag and varint per value
# (uniform in [0, 2^31): 5 bytes for 7 in 8 of them; Average's any-sign int32: 10 bytes for half),
# and gRPC's 5-byte message prefix.
_TAGLESS_HEADER, _GRPC_PREFIX = 16, 5
_VARINT = {AVERAGE: 7.5, GET_RAND_NUMS: 4.9, LARGE_DATA: 4.9}


def expected_bytes(op: str, n: int, transport: str) -> tuple[float, float]:
    """(request, reply) bytes of one call of `op` at size `n`, framing included: an estimate."""
    tagless = transport == "tagless"
    if op == SAY_HELLO:
        up, down = n + 4, n + 11  # the reply greets the name ("Hello, ...")
    elif op == AVERAGE:
        up, down = (4 + 4 * n, 8) if tagless else (3 + _VARINT[op] * n, 9)
    elif op == GET_RAND_NUMS:
        up, down = (4, 4 + 4 * n) if tagless else (5, 3 + _VARINT[op] * n)
    else:  # LargeDataK: field numbers 1..15 take one byte of tag, to 2047 two, then three
        tags = min(n, 15) + 2 * max(0, min(n, 2047) - 15) + 3 * max(0, n - 2047)
        up = down = 4 * n if tagless else tags + _VARINT[op] * n
    frame = _TAGLESS_HEADER if tagless else _GRPC_PREFIX
    return up + frame, down + frame
