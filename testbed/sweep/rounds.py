"""The order of an adaptive sweep: rounds across the cells still open, until the stopping rule closes them.

Round r runs repetition r of every open cell: each remote cell the stopping rule
(`analysis.stopping`) has not closed, and the local baseline of an (op, size) while any of its remote
cells is open. A round's trials are grouped by the point of the link (rate, and delay and loss where varied: one
shaping per point and round); the order of
the groups and of the trials within each is shuffled from the seed and the round, so drift does not
line up with a factor.

The state is derived from the trial results alone (trials.csv, the contract), so a resumed sweep
continues exactly where each cell stopped: a round cut short is completed first (its cells that
already ran wait), then the rule decides as it would have.
"""

from __future__ import annotations

import random
from collections.abc import Iterator

from analysis.stopping import Rule, stop_reason
from contracts.grid import LinkPoint
from contracts.run import TrialRecord
from contracts.stages import LOCAL
from testbed.experiment import Experiment
from testbed.sweep.plan import Trial


class Rounds:
    """An adaptive sweep's schedule over `trials` (the plan at the most repetitions)."""

    def __init__(self, exp: Experiment, trials: list[Trial], results: dict[int, float | None]) -> None:
        self.exp = exp
        self.rule = Rule.of(exp)
        self.results = dict(results)  # trial id -> t_total, None for a failed trial
        self.cells: dict[tuple, list[Trial]] = {}
        for t in sorted(trials, key=lambda t: t.rep):
            self.cells.setdefault(t.cell, []).append(t)

    def record(self, row: TrialRecord) -> None:
        self.results[row.trial] = row.t_total if row.ok else None

    def done(self, cell: tuple) -> int:
        """Repetitions the cell has run (always its first ones: rounds run them in order)."""
        return sum(t.trial in self.results for t in self.cells[cell])

    def samples(self, cell: tuple, n: int) -> list[float | None]:
        return [self.results[t.trial] for t in self.cells[cell][:n]]

    def reason(self, cell: tuple) -> str | None:
        """Why a remote cell stopped, or None while it is open (or waits for its baseline's round)."""
        op, size = cell[:2]
        n, base = self.done(cell), (op, size, None, LOCAL, "")
        if self.done(base) < n:
            return None
        return stop_reason(self.samples(cell, n), self.samples(base, self.done(base)), self.rule)

    def open_cells(self) -> list[tuple]:
        remote = [c for c in self.cells if c[3] != LOCAL and self.reason(c) is None]
        needed = {(op, size, None, LOCAL, "") for op, size, *_ in remote}
        local = [c for c in self.cells if c in needed and self.done(c) < self.rule.max_reps]
        return local + remote

    def next_round(self) -> list[Trial]:
        """The next repetition of each open cell that is behind (all of them, unless resuming)."""
        cells = self.open_cells()
        if not cells:
            return []
        r = min(self.done(c) for c in cells)
        return [self.cells[c][r] for c in cells if self.done(c) == r]

    def blocks(self) -> Iterator[tuple[LinkPoint | None, list[Trial]]]:
        """(point of the link, trials) groups, round after round; each round is computed once the last
        one ran."""
        while round_ := self.round_blocks():
            yield from round_

    def round_blocks(self) -> list[tuple[LinkPoint | None, list[Trial]]]:
        """The next round's (point of the link, trials) groups, in their shuffled order (empty: every
        cell closed). Computed from the results so far: every trial handed out before must have been
        recorded."""
        trials = self.next_round()
        if not trials:
            return []
        rng = random.Random(f"{self.exp.seed}-round-{trials[0].rep}")
        points = sorted({t.link for t in trials}, key=lambda p: (-1.0,) if p is None else p.sort_key())
        rng.shuffle(points)
        out = []
        for point in points:
            block = [t for t in trials if t.link == point]
            rng.shuffle(block)
            out.append((point, block))
        return out

    def stopped(self) -> dict[tuple, str]:
        """Remote cells the rule has closed, and why."""
        reasons = {c: self.reason(c) for c in self.cells if c[3] != LOCAL}
        return {c: r for c, r in reasons.items() if r is not None}
