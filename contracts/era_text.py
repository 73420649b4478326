"""ujson 1.35's float text, which the era's uJSON codec writes (`codec_text: era`, issue 45).

The paper's client and server ran ujson 1.35, whose encoder (`Buffer_AppendDoubleUnchecked` in its
ultrajsonenc.c, `double_precision` 10 by default) wrote a float in fixed point with at most 10
decimals: `0.0000000735` where today's ujson writes `7.35e-8`, and `0.123456789` for
`0.1234567890123`; so its text of float64 operands was about 13 bytes an element, not 19. What it did
is copied here step by step, its rounding quirk (a fraction exactly half way rounds up when odd or 0)
and its printf ("%.15e") above 1e16 - 1 included; `ujson135_float` is the one-value reference and
`ujson135_matrix` the NumPy writer the codec uses, the same bytes.
"""

from __future__ import annotations

import numpy as np
import ujson

UJSON135_DECIMALS = 10  # ujson 1.35's double_precision default
UJSON135_FIXED_MAX = 1e16 - 1  # above it, ujson 1.35 wrote "%.15e"
_CHUNK = 1 << 16  # elements formatted at once: bounds the character table to 2 MB


def ujson135_float(value: float) -> str:
    """One float as ujson 1.35 wrote it (its `Buffer_AppendDoubleUnchecked`, double_precision 10):
    fixed point, the fraction rounded to 10 decimals (half to odd, as its code does) and its trailing
    zeros dropped, at least one decimal; "%.15e" above 1e16 - 1. The reference for
    `ujson135_matrix`, and its path for the rare elements that need printf."""
    neg, x = value < 0, abs(value)
    if x > UJSON135_FIXED_MAX:
        return "%.15e" % value  # noqa: UP031 - C's printf format, as ujson called it
    whole = int(x)
    tmp = (x - whole) * 10.0**UJSON135_DECIMALS
    frac = int(tmp)
    diff = tmp - frac
    if diff > 0.5:
        frac += 1
        if frac >= 10**UJSON135_DECIMALS:
            frac, whole = 0, whole + 1
    elif diff == 0.5 and (frac == 0 or frac & 1):
        frac += 1
    decimals = str(frac).rjust(UJSON135_DECIMALS, "0").rstrip("0") if frac else "0"
    return f"{'-' if neg else ''}{whole}.{decimals}"


def ujson135_matrix(a: np.ndarray) -> str:
    """A float matrix's JSON text as ujson 1.35 wrote it ("[[0.5,1.25],[...]]"), built with NumPy
    from a table of characters a row per element: formatting each float in Python would take seconds
    at 1200 x 1200 where ujson's C took a fraction of one, and the encode stage is a measurement."""
    rows, cols = a.shape
    if a.size == 0:
        return ujson.dumps(a.tolist())
    flat = np.ascontiguousarray(a, dtype=np.float64).ravel()
    parts = ["["]  # the matrix's; each row's own "[" is its first element's
    for start in range(0, flat.size, _CHUNK):
        parts.append(_ujson135_chunk(flat[start : start + _CHUNK], start, cols, flat.size))
    return "".join(parts)


def _ujson135_chunk(x: np.ndarray, start: int, cols: int, total: int) -> str:
    """Elements start.. of a matrix (`ujson135_matrix`), each followed by its separator (',' inside a
    row, '],' after a row, ']]' after the last) and a row's first preceded by the row's '['."""
    neg = x < 0
    x = np.abs(x)
    if (x > UJSON135_FIXED_MAX).any():  # printf's elements: Python's, one by one (rare)
        return _ujson135_slow(x * np.where(neg, -1, 1), start, cols, total)
    whole = x.astype(np.uint64)
    tmp = (x - whole) * 10.0**UJSON135_DECIMALS
    frac = tmp.astype(np.uint64)
    diff = tmp - frac
    up = diff > 0.5
    frac = frac + up
    roll = up & (frac >= 10**UJSON135_DECIMALS)
    frac[roll], whole = 0, whole + roll
    frac = frac + (~up & (diff == 0.5) & ((frac == 0) | (frac % 2 == 1)))
    if (frac >= 10**UJSON135_DECIMALS).any():  # the half-to-odd case's carry, printed as ujson did
        return _ujson135_slow(x * np.where(neg, -1, 1), start, cols, total)
    n, wd, fd = x.size, 17, UJSON135_DECIMALS
    table = np.zeros((n, 1 + 1 + wd + 1 + fd + 3), np.uint8)  # [ - whole . fraction tail
    show = np.zeros(table.shape, bool)
    index = np.arange(start, start + n)
    first, last = index % cols == 0, index % cols == cols - 1
    table[:, 0], show[:, 0] = ord("["), first
    table[:, 1], show[:, 1] = ord("-"), neg
    digits = 1 + sum((whole >= 10**k).astype(np.int64) for k in range(1, wd))
    for k in range(wd):  # whole's digits, most significant first, from its first nonzero one
        table[:, 2 + k] = ord("0") + (whole // np.uint64(10 ** (wd - 1 - k))) % np.uint64(10)
        show[:, 2 + k] = wd - k <= digits
    table[:, 2 + wd], show[:, 2 + wd] = ord("."), True
    zeros = sum((frac % np.uint64(10**k) == 0).astype(np.int64) for k in range(1, fd))
    kept = np.where(frac == 0, 1, fd - zeros)  # "0" for a zero fraction
    for k in range(fd):
        table[:, 3 + wd + k] = ord("0") + (frac // np.uint64(10 ** (fd - 1 - k))) % np.uint64(10)
        show[:, 3 + wd + k] = k < kept
    tail = 3 + wd + fd
    end = index == total - 1
    table[:, tail] = np.where(last, ord("]"), ord(","))
    table[:, tail + 1], show[:, tail + 1] = np.where(end, ord("]"), ord(",")), last
    show[:, tail] = True
    return table[show].tobytes().decode("ascii")


def _ujson135_slow(x: np.ndarray, start: int, cols: int, total: int) -> str:
    out = []
    for i, value in enumerate(x.tolist(), start):
        out.append(("[" if i % cols == 0 else "") + ujson135_float(value))
        out.append(("]]" if i == total - 1 else "],") if i % cols == cols - 1 else ",")
    return "".join(out)
