"""Handing a sweep's work to its testbeds (replicas): units of (rate, trials), taken one at a time.

A unit is a rate group of a round: each rate costs a shaping and an iperf3 validation, so a testbed
asks first for more of the rate it has (`take(rate)`). A fixed sweep's units are its rate groups (one
testbed: in the order a single testbed has always run them) or, for several, each rate group's
repetitions (enough units to share). An adaptive sweep's rounds come from `Rounds`: a round is
computed from the results of the one before, so the next is handed out only once every unit of the
last has been done (`done`), whichever testbed ran it. With several testbeds each of a round's rate
groups is split in as many units (`split_blocks`): the slowest rate's group alone is about half of a
round of the paper's grid (moving bytes at 10 Mbit/s takes as long as at the five other rates
together), and as one unit it held the round on one testbed while the others waited (measured: four
testbeds ran a sub-grid's trials only 1.3 times as fast as one). A testbed validates a rate once and
shapes its link in milliseconds, so several of them at one rate cost little. Where the sweep varies
delay or loss, a rate group is a group at one point of the link (`LinkPoint`: rate, delay, loss).
"""

from __future__ import annotations

import threading

from contracts.grid import LinkPoint
from testbed.sweep.plan import Trial
from testbed.sweep.rounds import Rounds

Unit = tuple[LinkPoint | None, list[Trial]]  # a group at one point of the link (None: local)


def split_by_rep(units: list[Unit]) -> list[Unit]:
    """Each (rate, trials) unit as one unit per repetition, each keeping its trials' order."""
    out: list[Unit] = []
    for rate, trials in units:
        reps = dict.fromkeys(t.rep for t in trials)
        out += [(rate, [t for t in trials if t.rep == rep]) for rep in reps]
    return out


def split_blocks(units: list[Unit], parts: int) -> list[Unit]:
    """Each (rate, trials) unit as up to `parts` units of consecutive trials, as equal in number as
    can be (a round's blocks are shuffled already, so each part is a fair sample of its rate's cells)."""
    out: list[Unit] = []
    for rate, trials in units:
        n = min(parts, len(trials))
        bounds = [round(i * len(trials) / n) for i in range(n + 1)]
        out += [(rate, trials[a:b]) for a, b in zip(bounds, bounds[1:], strict=False) if b > a]
    return out


class WorkSource:
    """The units still to run; thread-safe, for one testbed or several (`parts`: an adaptive round's
    rate groups are split in that many units)."""

    def __init__(self, units: list[Unit] | None = None, rounds: Rounds | None = None, parts: int = 1) -> None:
        self.pending: list[Unit] = list(units or [])
        self.rounds = rounds
        self.parts = parts
        self.in_flight = 0
        self.stopped = False
        self._cond = threading.Condition()

    def take(self, rate: LinkPoint | None = None) -> Unit | None:
        """The next unit, one at the point of the link `rate` if there is one; None when all is done
        (or `stop` was called).
        Waits while the next round depends on units still being run."""
        with self._cond:
            while not self.stopped:
                if self.pending:
                    i = next((i for i, (r, _) in enumerate(self.pending) if r == rate), 0)
                    self.in_flight += 1
                    return self.pending.pop(i)
                if self.in_flight:
                    self._cond.wait()
                    continue
                self.pending = split_blocks(self.rounds.round_blocks(), self.parts) if self.rounds else []
                if not self.pending:
                    return None
            return None

    def done(self) -> None:
        with self._cond:
            self.in_flight -= 1
            self._cond.notify_all()

    def stop(self) -> None:
        """No more units for anyone (a testbed failed, or the user interrupted)."""
        with self._cond:
            self.stopped = True
            self._cond.notify_all()
