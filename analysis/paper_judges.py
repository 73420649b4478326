"""How the paper's statements are judged on a run's cells (`analysis.paper_checks` lists the statements,
their roles and readings): lookups over the cells, the verdicts, and one judge per kind of statement.

Verdicts are facts or say they are not:
- `holds` / `fails`;
- `undecided`: a decision statement whose outcome depends on a cell the analysis calls undecided
  (`?`: remote and local do not differ significantly). Every resolution of those cells is tried
  (up to 2^14 per statement; beyond, undecided): it holds or fails only if every resolution agrees;
- `not measured`: the run has no successful trials for a cell the statement needs (or none of its
  operation or size at all).

A numeric statement holds when the measured mean is within its tolerance of the paper's figure; its
CI is printed beside it (half-widths of sums and ratios are propagated from the cells' own,
`combine_ci`, as for independent means). Tolerances, as the model used them: decisions exact,
marshalling-to-completion within 5 points, penalty gaps within 25% of the paper's seconds (or the
bound the paper gives), other ratios as stated with each check.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import numpy as np
import pandas as pd

from analysis.decisions import MISSING, OFFLOAD, STAY, UNDECIDED, decision_marks

HOLDS, FAILS, UNDECIDED_VERDICT, NOT_MEASURED = "holds", "fails", "undecided", "not measured"
METHODS = ("json", "ujson", "raw")
PAPER_RATES = (10.0, 20.0, 40.0, 60.0, 80.0, 100.0)  # Mbit/s: the statements count rates of this set
MAX_UNDECIDED = 14  # undecided cells one statement may enumerate (2^14 resolutions)
RATIO_POINTS = 0.05  # marshalling-to-completion: within 5 points of the paper's percentage
GAP_REL = 0.25  # a cumulative penalty gap: within 25% of the paper's seconds


class NotMeasured(Exception):
    """A cell the statement needs has no successful trials in the run."""


@dataclass(frozen=True)
class Verdict:
    measured: str  # the measured figure, with its 95% CI where it is a number
    holds: str  # HOLDS, FAILS, UNDECIDED_VERDICT or NOT_MEASURED


class Cells:
    """Lookups over a run's cells (`analysis.cells.cell_table`): marks, means, penalties, ratios."""

    def __init__(self, cells: pd.DataFrame) -> None:
        self.table = cells.assign(mark=decision_marks(cells).to_numpy())
        self.rows = {
            (r.op, int(r.size), float(r.rate_mbps), r.method): r for r in self.table.itertuples(index=False)
        }

    def sizes(self, op: str) -> list[int]:
        return sorted({s for o, s, _, _ in self.rows if o == op})

    def rates(self, op: str) -> list[float]:
        """The op's rates, which must be the paper's: "four of six rates" means nothing over three."""
        rates = sorted({r for o, _, r, _ in self.rows if o == op})
        if rates != list(PAPER_RATES):
            raise NotMeasured(
                f"{op} at the paper's rates ({', '.join(f'{r:g}' for r in PAPER_RATES)} Mbit/s)"
            )
        return rates

    def has(self, op: str, size: int | None = None) -> bool:
        return any(o == op and (size is None or s == size) for o, s, _, _ in self.rows)

    def row(self, op: str, size: int, rate: float, method: str):
        r = self.rows.get((op, size, float(rate), method))
        if r is None or r.mark == MISSING:
            raise NotMeasured(f"{op} {size} {rate:g} {method}")
        return r

    def mark(self, op: str, size: int, rate: float, method: str) -> str:
        return self.row(op, size, rate, method).mark

    def keys(self, op: str, size: int, method: str) -> list[tuple]:
        return [(op, size, rate, method) for rate in self.rates(op)]

    def gap(self, op: str, size: int, worse: str, better: str) -> tuple[float, float]:
        """The cumulative penalty of `worse` less `better`'s over the rates (local cancels), and its CI."""
        diffs, halves = [], []
        for rate in self.rates(op):
            a, b = self.row(op, size, rate, worse), self.row(op, size, rate, better)
            diffs.append(a.mean - b.mean)
            halves += [a.ci95, b.ci95]
        return sum(diffs), combine_ci(halves)

    def marshalling(self, op: str, size: int, rate: float, method: str) -> tuple[float, float]:
        """Marshalling-to-completion (all but the server's compute, over completion) and its CI."""
        r = self.row(op, size, rate, method)
        part = r.t_server_compute_mean / r.mean
        half = part * combine_ci(
            [_rel(r.t_server_compute_ci95, r.t_server_compute_mean), _rel(r.ci95, r.mean)]
        )
        return 1 - part, half

    def to_json(self, op: str, size: int, rate: float, method: str) -> tuple[float, float]:
        """A method's completion time over JSON's in the same cell, and its CI."""
        r, j = self.row(op, size, rate, method), self.row(op, size, rate, "json")
        ratio = r.mean / j.mean
        return ratio, ratio * combine_ci([_rel(r.ci95, r.mean), _rel(j.ci95, j.mean)])


def combine_ci(halves: Iterable[float]) -> float:
    """The half-width of a sum (or, given relative half-widths, of a product) of independent means."""
    values = [0.0 if h is None or (isinstance(h, float) and math.isnan(h)) else float(h) for h in halves]
    return math.sqrt(sum(h * h for h in values))


def _rel(half: float, mean: float) -> float:
    return 0.0 if half is None or math.isnan(half) or not mean else half / mean


def decide(cells: Cells, keys: list[tuple], predicate: Callable[[dict], bool]) -> str:
    """Whether `predicate(marks)` holds over these cells, trying every resolution of the undecided."""
    marks = {k: cells.mark(*k) for k in keys}
    open_ = [k for k, m in marks.items() if m == UNDECIDED]
    if len(open_) > MAX_UNDECIDED:
        return UNDECIDED_VERDICT
    outcomes = set()
    for choice in itertools.product((STAY, OFFLOAD), repeat=len(open_)):
        outcomes.add(bool(predicate({**marks, **dict(zip(open_, choice, strict=True))})))
        if len(outcomes) == 2:
            return UNDECIDED_VERDICT
    return HOLDS if outcomes == {True} else FAILS


def _count(marks: dict, keys: list[tuple]) -> int:
    return sum(marks[k] == OFFLOAD for k in keys)


def _vector(cells: Cells, op: str, size: int, method: str) -> str:
    return "".join(cells.mark(*k) for k in cells.keys(op, size, method))


def _within(value: float, target: float, tolerance: float) -> str:
    return HOLDS if abs(value - target) <= tolerance else FAILS


def _fig(value: float, half: float, unit: str = "s") -> str:
    return f"{value:.2f} ± {half:.2f} {unit}" if unit else f"{value:.2f} ± {half:.2f}"


def _pct(value: float, half: float) -> str:
    return f"{value:.0%} ± {half * 100:.0f}"


# ------------------------------------------------------------------ inv and log (statements 1-4)
OTHER_OPS = ("inv", "log")


def _other_ops(cells: Cells) -> list[str]:
    ops = [op for op in OTHER_OPS if cells.has(op)]
    if not ops:
        raise NotMeasured("no inv or log cells")
    return ops


def all_zero(cells: Cells) -> Verdict:
    ops = _other_ops(cells)
    keys = [k for op in ops for s in cells.sizes(op) for m in METHODS for k in cells.keys(op, s, m)]
    ones = sum(cells.mark(*k) == OFFLOAD for k in keys)
    verdict = decide(cells, keys, lambda marks: _count(marks, keys) == 0)
    return Verdict(f"{ones} of {len(keys)} cells offload ({', '.join(ops)})", verdict)


def other_marshalling(cells: Cells) -> Verdict:
    ops = _other_ops(cells)
    values = [
        cells.marshalling(op, s, r, m)[0]
        for op in ops
        for s in cells.sizes(op)
        for r in cells.rates(op)
        for m in METHODS
    ]
    low, high = min(values), max(values)
    ok = low >= 0.90 - RATIO_POINTS and high <= 0.99 + RATIO_POINTS
    return Verdict(f"{low:.0%}-{high:.0%}", HOLDS if ok else FAILS)


def raw_lowest(cells: Cells) -> Verdict:
    ops = _other_ops(cells)
    best = min(
        (cells.to_json(op, s, r, "raw") for op in ops for s in cells.sizes(op) for r in cells.rates(op)),
        key=lambda x: x[0],
    )
    return Verdict(_pct(*best), _within(best[0], 0.25, RATIO_POINTS))


def ratio_constant(cells: Cells) -> Verdict:
    """Per op, method and rate, the method-to-JSON ratio's spread across sizes (max - min) is at most
    10 points; and per op and method it moves more across rates than across sizes."""
    worst_size, flat = 0.0, []
    for op in _other_ops(cells):
        for m in ("ujson", "raw"):
            per_rate = {r: [cells.to_json(op, s, r, m)[0] for s in cells.sizes(op)] for r in cells.rates(op)}
            spread = max(max(v) - min(v) for v in per_rate.values())
            across = max(np.mean(v) for v in per_rate.values()) - min(np.mean(v) for v in per_rate.values())
            worst_size = max(worst_size, spread)
            if across <= spread:
                flat.append(f"{op} {m}")
    ok = worst_size <= 0.10 and not flat
    text = f"spread across sizes up to {worst_size * 100:.0f} points" + (
        f"; flat across rates: {flat}" if flat else ""
    )
    return Verdict(text, HOLDS if ok else FAILS)


# ------------------------------------------------------------------ mul (statements 5-26)
def _needs(cells: Cells, *sizes: int) -> None:
    for size in sizes:
        if not cells.has("mul", size):
            raise NotMeasured(f"mul {size}")


def practically_never(cells: Cells) -> Verdict:
    _needs(cells, 400)
    keys = [k for m in METHODS for k in cells.keys("mul", 400, m)]
    above = sum(cells.mark(*k) == STAY for k in keys)
    # "practically every cell": all but at most one in nine
    verdict = decide(cells, keys, lambda marks: len(keys) - _count(marks, keys) >= len(keys) * 8 / 9)
    return Verdict(f"remote above local in {above} of {len(keys)} (significantly)", verdict)


def offloads_at(size: int, method: str, count: int | None) -> Callable[[Cells], Verdict]:
    """`method` offloads at exactly `count` rates at `size` (None: at every rate)."""

    def judge(cells: Cells) -> Verdict:
        _needs(cells, size)
        keys = cells.keys("mul", size, method)
        want = len(keys) if count is None else count
        return Verdict(
            _vector(cells, "mul", size, method), decide(cells, keys, lambda m: _count(m, keys) == want)
        )

    return judge


def marshalling_at(size: int, targets: dict[str, float]) -> Callable[[Cells], Verdict]:
    """Marshalling-to-completion at the fastest rate of the run (the paper's 100 Mbit/s), where
    communication weighs least: how the profiles read the figures they were fitted to (statements 7
    and 16, RAW's), so every figure of these statements is read there too."""

    def judge(cells: Cells) -> Verdict:
        _needs(cells, size)
        fastest = cells.rates("mul")[-1]
        got = {m: cells.marshalling("mul", size, fastest, m) for m in targets}
        ok = all(abs(got[m][0] - t) <= RATIO_POINTS for m, t in targets.items())
        text = ", ".join(f"{m} {_pct(*got[m])}" for m in targets) + f" at {fastest:g} Mbit/s"
        return Verdict(text, HOLDS if ok else FAILS)

    return judge


def raw_half_of_json(cells: Cells) -> Verdict:
    _needs(cells, 400)
    ratios = [cells.to_json("mul", 400, r, "raw") for r in cells.rates("mul")]
    low, high = min(x[0] for x in ratios), max(x[0] for x in ratios)
    ok = all(0.40 <= x[0] <= 0.60 for x in ratios)
    return Verdict(f"{low:.0%}-{high:.0%}", HOLDS if ok else FAILS)


def gap(size: int, worse: str, target: float) -> Callable[[Cells], Verdict]:
    def judge(cells: Cells) -> Verdict:
        _needs(cells, size)
        value, half = cells.gap("mul", size, worse, "raw")
        return Verdict(_fig(value, half), _within(value, target, GAP_REL * target))

    return judge


def gap_between(size: int, low: float, high: float) -> Callable[[Cells], Verdict]:
    """RAW's cumulative penalty below uJSON's by between `low` and `high` seconds."""

    def judge(cells: Cells) -> Verdict:
        _needs(cells, size)
        value, half = cells.gap("mul", size, "ujson", "raw")
        return Verdict(_fig(value, half), HOLDS if low <= value <= high else FAILS)

    return judge


def ujson_first_at_600(cells: Cells) -> Verdict:
    _needs(cells, 400, 500, 600)
    groups = {s: cells.keys("mul", s, "ujson") for s in (400, 500, 600)}
    keys = [k for ks in groups.values() for k in ks]
    text = ", ".join(f"{s}: {_vector(cells, 'mul', s, 'ujson')}" for s in groups)
    return Verdict(
        text,
        decide(
            cells,
            keys,
            lambda m: _count(m, groups[400]) == _count(m, groups[500]) == 0 < _count(m, groups[600]),
        ),
    )


def same_vectors(size: int) -> Callable[[Cells], Verdict]:
    def judge(cells: Cells) -> Verdict:
        _needs(cells, size)
        groups = {m: cells.keys("mul", size, m) for m in METHODS}
        keys = [k for ks in groups.values() for k in ks]

        def same(marks: dict) -> bool:
            return len({tuple(marks[k] for k in ks) for ks in groups.values()}) == 1

        text = " ".join(f"{m} {_vector(cells, 'mul', size, m)}" for m in METHODS)
        return Verdict(text, decide(cells, keys, same))

    return judge


def unchanged(a: int, b: int) -> Callable[[Cells], Verdict]:
    def judge(cells: Cells) -> Verdict:
        _needs(cells, a, b)
        pairs = [(cells.keys("mul", a, m), cells.keys("mul", b, m)) for m in METHODS]
        keys = [k for x, y in pairs for k in (*x, *y)]

        def same(marks: dict) -> bool:
            return all([marks[k] for k in x] == [marks[k] for k in y] for x, y in pairs)

        text = "; ".join(
            f"{m} {_vector(cells, 'mul', a, m)} -> {_vector(cells, 'mul', b, m)}" for m in METHODS
        )
        return Verdict(text, decide(cells, keys, same))

    return judge


def close_behind(cells: Cells) -> Verdict:
    """ "The others close behind" RAW's six of six: at least four of six each."""
    _needs(cells, 1200)
    groups = {m: cells.keys("mul", 1200, m) for m in ("json", "ujson")}
    keys = [k for ks in groups.values() for k in ks]
    text = ", ".join(f"{m} {_vector(cells, 'mul', 1200, m)}" for m in groups)
    return Verdict(
        text, decide(cells, keys, lambda marks: all(_count(marks, ks) >= 4 for ks in groups.values()))
    )


def to_json_at(size: int, targets: dict[str, float]) -> Callable[[Cells], Verdict]:
    """Each method's completion time over JSON's in the same cell (the paper's "method-to-JSON ratio")
    at the fastest rate of the run, each within 5 points of its target: statement 24's reading."""

    def judge(cells: Cells) -> Verdict:
        _needs(cells, size)
        fastest = cells.rates("mul")[-1]
        got = {m: cells.to_json("mul", size, fastest, m) for m in targets}
        ok = all(abs(got[m][0] - t) <= RATIO_POINTS for m, t in targets.items())
        text = ", ".join(f"{m} {_pct(*got[m])}" for m in targets) + f" of JSON's at {fastest:g} Mbit/s"
        return Verdict(text, HOLDS if ok else FAILS)

    return judge


def ordering(cells: Cells) -> Verdict:
    """At every size: RAW offloads in at least as many cells as uJSON, uJSON as JSON."""
    sizes = cells.sizes("mul")
    if not sizes:
        raise NotMeasured("no mul cells")
    verdicts, text = [], []
    for size in sizes:  # each size on its own: its undecided cells resolve independently of the others'
        groups = {m: cells.keys("mul", size, m) for m in METHODS}
        keys = [k for ks in groups.values() for k in ks]
        verdicts.append(
            decide(
                cells,
                keys,
                lambda m, g=groups: _count(m, g["raw"]) >= _count(m, g["ujson"]) >= _count(m, g["json"]),
            )
        )
        if verdicts[-1] != HOLDS:
            text.append(f"{size}: {verdicts[-1]}")
    return Verdict("at every size" if not text else "; ".join(text), _all(verdicts))


def border_falls(cells: Cells) -> Verdict:
    """Per method, the lowest rate that pays never rises as the size grows (sizes where none pays skipped)."""
    sizes, rates = cells.sizes("mul"), cells.rates("mul")
    if not sizes:
        raise NotMeasured("no mul cells")
    verdicts, bad = [], []
    for method in METHODS:
        keys = [k for s in sizes for k in cells.keys("mul", s, method)]

        def falls(marks: dict, method=method) -> bool:
            lows = []
            for s in sizes:
                paying = [r for r in rates if marks[("mul", s, r, method)] == OFFLOAD]
                if paying:
                    lows.append(min(paying))
            return all(b <= a for a, b in zip(lows, lows[1:], strict=False))

        verdicts.append(decide(cells, keys, falls))
        if verdicts[-1] != HOLDS:
            bad.append(f"{method}: {verdicts[-1]}")
    return Verdict("falls for every method" if not bad else "; ".join(bad), _all(verdicts))


def _all(verdicts: list[str]) -> str:
    if FAILS in verdicts:
        return FAILS
    return UNDECIDED_VERDICT if UNDECIDED_VERDICT in verdicts else HOLDS
