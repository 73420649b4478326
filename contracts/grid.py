"""The lists a grid is written as, in an experiment file, a task stream or on the command line:
matrix sizes ('400,800' or the range '400-1200:100') and link rates ('10,20mbit,500kbit', a bare number
in Mbit/s). One parser each, so that every command and file reads them alike."""

from __future__ import annotations

import re

from contracts.errors import UserError
from contracts.units import parse_rate

_RANGE = re.compile(r"^\s*(\d+)\s*-\s*(\d+)\s*(?::\s*(\d+))?\s*$")
MIN_SIZE, MAX_SIZE = 2, 20000


def _items(value) -> list:
    return value if isinstance(value, list) else [p for p in str(value).split(",") if p.strip()]


def parse_sizes(value, where: str = "sizes") -> tuple[int, ...]:
    """Sorted distinct sizes from a list, or from text of sizes and ranges 'FROM-TO:STEP' (inclusive,
    step 100 when omitted), e.g. 400-1200:100."""
    items: list[int] = []
    for part in _items(value):
        if isinstance(part, str) and (m := _RANGE.match(part)):
            lo, hi, step = int(m.group(1)), int(m.group(2)), int(m.group(3) or 100)
            if lo > hi or step < 1:
                raise UserError(f"{where}: range {part!r} is empty", "write FROM-TO:STEP with FROM <= TO")
            items += list(range(lo, hi + 1, step))
            continue
        try:
            items.append(int(str(part).strip()))
        except ValueError:
            raise UserError(
                f"{where}: {part!r} is not a matrix size", "give integers or FROM-TO:STEP"
            ) from None
    if not items:
        raise UserError(f"{where}: no sizes given", "give e.g. 400,800 or 400-1200:100")
    bad = [n for n in items if not MIN_SIZE <= n <= MAX_SIZE]
    if bad:
        raise UserError(
            f"{where}: size {bad[0]} is out of range", f"give sizes between {MIN_SIZE} and {MAX_SIZE}"
        )
    return tuple(sorted(set(items)))


def parse_rates(value, where: str = "rates") -> tuple[float, ...]:
    """Sorted distinct rates in Mbit/s from a list, or from comma-separated text with or without units."""
    parts = _items(value)
    if not parts:
        raise UserError(f"{where}: no rates given", "give e.g. 10,20,40 (Mbit/s) or 500kbit")
    return tuple(sorted({parse_rate(p, where) / 1e6 for p in parts}))
