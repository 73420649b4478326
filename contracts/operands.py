"""The integer operands' range (`int_range`): read once where an experiment or a flag enters, checked
against the experiment's dtype, ops and sizes, and drawn from by `client.offload.make_operands`.

Issue 45's hypothesis H-int is the paper's software: on 32-bit Python, `numpy.random.randint(lo, hi)`
gave int32 entries from lo to hi - 1, and the range sets how long each entry's JSON text is (one digit
or two, a sign or none), so it is an experiment's setting, recorded in its manifest. The range has
randint's semantics: `lo` included, `hi` excluded. Unset (None), every op keeps the ranges it always
had (`make_operands`: mul -10..10, inv -10..9 off the diagonal, log 1..99).
"""

from __future__ import annotations

import re

import numpy as np

from contracts.errors import UserError

IntRange = tuple[int, int]  # numpy.random.randint's (low, high): low included, high excluded
MUL_INTS: IntRange = (-10, 11)  # mul's integer entries without an int_range (products cannot overflow)
_TEXT = re.compile(r"^\s*(-?\d+)\s*,\s*(-?\d+)\s*$")
FIX = "give LOW,HIGH as numpy.random.randint takes them (HIGH excluded), e.g. 0,10 for 0..9"


def parse_int_range(value: object, where: str = "int_range") -> IntRange:
    """(low, high) from a YAML list [LOW, HIGH] or the text 'LOW,HIGH' (the flag's form)."""
    if isinstance(value, str) and (m := _TEXT.match(value)):
        value = [int(m.group(1)), int(m.group(2))]
    if (
        not isinstance(value, list | tuple)
        or len(value) != 2
        or not all(isinstance(v, int) and not isinstance(v, bool) for v in value)
    ):
        raise UserError(f"{where}: {value!r} is not a range of integers", FIX)
    low, high = value
    if low >= high:
        raise UserError(f"{where}: [{low}, {high}] is empty (HIGH is excluded)", FIX)
    return low, high


def check_int_range(
    int_range: IntRange | None, dtype: str, ops: tuple[str, ...], sizes: tuple[int, ...]
) -> str | None:
    """What is wrong with drawing this experiment's operands from `int_range` (None: nothing): a
    float dtype has no integer range, log needs an entry of at least 1, and no product of two
    n x n matrices of the dtype may overflow at the largest size (the server and the local run
    would agree on a wrapped result, which measures nothing the paper's did)."""
    if int_range is None:
        return None
    low, high = int_range
    if not np.issubdtype(np.dtype(dtype), np.integer):
        return f"is for integer operands and the dtype is {dtype}"
    info = np.iinfo(dtype)
    if low < info.min or high - 1 > info.max:
        return f"[{low}, {high}] does not fit in {dtype}"
    if "log" in ops and high <= 1:
        return f"[{low}, {high}] has no entry of at least 1, which log needs"
    bound, n = max(abs(low), abs(high - 1)), max(sizes, default=1)
    if "mul" in ops and n * bound * bound > info.max:
        return f"[{low}, {high}] overflows {dtype} in mul at size {n} ({n} x {bound}^2 > {info.max})"
    if "inv" in ops and n * bound + 1 > info.max:
        return f"[{low}, {high}] overflows {dtype} in inv's diagonal at size {n}"
    return None


def draw(rng: np.random.Generator, int_range: IntRange, shape: tuple[int, int], dtype: str) -> np.ndarray:
    """Entries from low to high - 1, as `numpy.random.randint(low, high)` draws them."""
    return rng.integers(int_range[0], int_range[1], shape, dtype=dtype)
