"""The report's sentences that state a finding: each computed from the run's cells and vectors when the
page is written, so none can say what the data does not (which method offloads in most cells, where
offloading saves the most, which stage dominates the fastest offload, whose cumulative penalty is lowest).

Counts are of significant decisions only (`analysis.decisions.decision_marks`), as in the decision
vectors, and of firm ones: a decision the emulation's error could flip (`emulation_uncertain`, `1~` or
`0~` in the vectors) is counted apart as uncertain, never as offloading or staying local, and no
sentence names it as where offloading saves the most. A penalty is mean remote - mean local completion
time (s), negative where offloading saves time.
"""

from __future__ import annotations

import math

import pandas as pd

from analysis.cells import cell_devices, method_order
from analysis.decisions import (
    MISSING,
    OFFLOAD,
    STAY,
    UNCERTAIN,
    UNDECIDED,
    decision_marks,
    format_mbps,
    uncertain,
)
from analysis.report_html import e
from analysis.style import STAGE_LABELS
from contracts.stages import STAGES


def _and(items: list[str], word: str = "and") -> str:
    """`a`, `a and b`, `a, b and c` (or another `word`)."""
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + f" {word} " + items[-1]


def _firm(cells: pd.DataFrame) -> pd.Series:
    """Per cell, its mark with the uncertain decisions (`1~`, `0~`) as UNCERTAIN, an uncertain undecided
    cell (`?~`) as undecided: what the findings count."""
    marks = decision_marks(cells)
    return marks.where(~(marks.isin([OFFLOAD, STAY]).to_numpy() & uncertain(cells)), UNCERTAIN)


def _tally(cells: pd.DataFrame) -> dict[str, int]:
    marks = _firm(cells)
    return {mark: int((marks == mark).sum()) for mark in (OFFLOAD, STAY, UNDECIDED, MISSING, UNCERTAIN)}


def _open(tally: dict[str, int]) -> str:
    """`, 3 undecided, 1 missing, 2 uncertain`: what the firm significant counts leave out."""
    told = [f"{tally[UNDECIDED]} undecided"] if tally[UNDECIDED] else []
    told += [f"{tally[MISSING]} missing"] if tally[MISSING] else []
    if tally[UNCERTAIN]:
        told.append(f"{tally[UNCERTAIN]} uncertain (~: the emulation's error could flip them)")
    return "".join(f", {t}" for t in told)


def _span(values) -> str:
    values = sorted(set(values))
    return f"{values[0]:g}" if len(values) == 1 else f"{values[0]:g} to {values[-1]:g}"


def _sizes(values, of: int) -> str:
    """`size 500`, or `7 of 9 sizes (500 to 1200)`."""
    values = sorted(set(values))
    return f"size {values[0]:g}" if len(values) == 1 else f"{len(values)} of {of} sizes ({_span(values)})"


def question(cells: pd.DataFrame) -> str:
    """What the run asks, from the grid it measured."""
    methods = method_order(cells["method"].unique())
    return (
        f"<b>The question:</b> for {e(_and(sorted(map(str, cells['op'].unique()))))} at matrix sizes "
        f"{_span(cells['size'].unique())} over links of {_span(cells['rate_mbps'].unique())} Mbit/s, does "
        f"offloading to the server with {e(_and(methods, 'or'))} finish sooner than "
        "computing on the client?"
    )


def answer(cells: pd.DataFrame) -> str:
    """The run's answer: in how many cells offloading pays, overall and per method, most first."""
    if cells.empty:
        return "<b>The answer:</b> none; the run has no cells."
    total = _tally(cells)
    by_method = sorted(
        ((m, _tally(g)[OFFLOAD], len(g)) for m, g in cells.groupby("method", sort=False)),
        key=lambda t: (-t[1], method_order(cells["method"].unique()).index(t[0])),
    )
    per = _and([f"{e(m)} in {k} of {n}" for m, k, n in by_method])
    return (
        f"<b>The answer:</b> offloading pays, significantly (Welch's test, 95%), in {total[OFFLOAD]} of "
        f"{len(cells)} cells (op, size, rate and method){_open(total)}: {per}."
    )


def most_offloading(cells: pd.DataFrame, op: str) -> str:
    """One op's methods by the cells where offloading pays, the most first."""
    mine = cells[cells["op"] == op]
    counts = {m: _tally(g)[OFFLOAD] for m, g in mine.groupby("method", sort=False)}
    cells_of = mine["method"].value_counts()
    tally = _tally(mine)
    if not any(counts.values()):
        return f"{e(op)}: offloading pays significantly in none of its {len(mine)} cells{_open(tally)}."
    order = method_order(counts)
    ranked = sorted(order, key=lambda m: (-counts[m], order.index(m)))
    top = [m for m in ranked if counts[m] == counts[ranked[0]]]
    verb = "offloads" if len(top) == 1 else "offload"
    told = [f"{counts[m]} of {cells_of[m]}" for m in top]
    lead = f"{e(_and(top))} {verb} in the most cells ({', '.join(dict.fromkeys(told))})"
    rest = [f"{e(m)} in {counts[m]}" for m in ranked if m not in top]
    return f"{e(op)}: {lead}" + (f", then {_and(rest)}" if rest else "") + f"{_open(tally)}."


def map_finding(cells: pd.DataFrame) -> str:
    """One decision map's cells (an op and a method): how they split, and where offloading saves most."""
    tally = _tally(cells)
    told = f"Offloading pays in {tally[OFFLOAD]} of {len(cells)} cells, stays local in {tally[STAY]}"
    told += _open(tally)
    pays = cells[(_firm(cells) == OFFLOAD).to_numpy()]
    known = cells[cells["penalty"].notna()]
    if len(pays):
        best = pays.loc[pays["penalty"].idxmin()]
        told += f"; it saves the most at size {best['size']:g}, {format_mbps(best['rate_mbps'])} Mbit/s"
        told += f" ({best['penalty']:+.3g} s)"
    elif len(known):
        best = known.loc[known["penalty"].idxmin()]
        told += f"; it comes closest at size {best['size']:g}, {format_mbps(best['rate_mbps'])} Mbit/s"
        told += f" ({best['penalty']:+.3g} s)"
    return told + "."


def stage_finding(cells: pd.DataFrame) -> str:
    """One stage figure's cells (an op and size, of one client device): the local time, the fastest
    offload and its largest stage, and in how many cells offloading pays."""
    local = cells["local_mean"].dropna()
    remote = cells[cells["mean"].notna()]
    told = f"Local: {local.iloc[0]:.3g} s. " if len(local) else "No local baseline. "
    if remote.empty:
        return told + "No offload succeeded."
    fast = remote.loc[remote["mean"].idxmin()]
    told += f"Fastest offload: {e(fast['method'])} at {format_mbps(fast['rate_mbps'])} Mbit/s, "
    told += f"{fast['mean']:.3g} s"
    stages = {s: fast.get(f"{s}_mean") for s in STAGES}
    stages = {s: v for s, v in stages.items() if v is not None and not math.isnan(v)}
    if stages and fast["mean"] > 0:
        stage = max(stages, key=stages.get)
        told += f", {stages[stage] / fast['mean']:.0%} of it {STAGE_LABELS[stage]}"
    tally = _tally(cells)
    told += f". Offloading pays in {tally[OFFLOAD]} of {len(cells)} cells"
    return told + (f", {tally[UNCERTAIN]} uncertain (~)." if tally[UNCERTAIN] else ".")


def of_stage_figure(cells: pd.DataFrame, op: str, size, device: str) -> pd.DataFrame:
    """The cells a stage figure draws (`Plot.about`: op, size, client device)."""
    devices = pd.Series(cell_devices(cells["method"]), index=cells.index)
    return cells[(cells["op"] == op) & (cells["size"] == size) & (devices == device)]


def penalty_finding(penalties: pd.DataFrame, op: str) -> str:
    """One op's cumulative penalties: whose is lowest at how many sizes, and where offloading saves time
    over all rates together (a negative sum)."""
    mine = penalties[(penalties["op"] == op) & penalties["cumulative_penalty"].notna()]
    if mine.empty:
        return f"{e(op)}: no size has a cumulative penalty (a rate is missing at every one)."
    lowest = mine.loc[mine.groupby("size")["cumulative_penalty"].idxmin(), "method"].value_counts()
    order = method_order(lowest.index)
    ranked = sorted(order, key=lambda m: (-lowest[m], order.index(m)))
    sizes = mine["size"].nunique()
    told = _and([f"{e(m)}'s at {lowest[m]} of {sizes} size{'s' if sizes > 1 else ''}" for m in ranked])
    saves = mine[mine["cumulative_penalty"] < 0]
    if saves.empty:
        where = "no method saves time summed over the rates at any size"
    else:
        per = [f"{e(m)} at {_sizes(g['size'], sizes)}" for m, g in saves.groupby("method", sort=False)]
        where = "summed over the rates, offloading saves time for " + _and(per)
    return f"{e(op)}: the lowest cumulative penalty is {told}; {where}."
