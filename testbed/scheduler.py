"""Handing a sweep's work to its testbeds (replicas): units of (rate, trials), taken one at a time.

A unit is a rate group of a round: each rate costs a shaping and an iperf3 validation, so a testbed
asks first for more of the rate it has (`take(rate)`). A fixed sweep's units are its phases (one
testbed: in the order a single testbed has always run them) or, for several, each phase's
repetitions (enough units to share). An adaptive sweep's rounds come from `Rounds`: a round is
computed from the results of the one before, so the next is handed out only once every unit of the
last has been done (`done`), whichever testbed ran it.
"""

from __future__ import annotations

import threading

from testbed.plan import Trial
from testbed.rounds import Rounds

Unit = tuple[float | None, list[Trial]]


def split_by_rep(units: list[Unit]) -> list[Unit]:
    """Each (rate, trials) unit as one unit per repetition, each keeping its trials' order."""
    out: list[Unit] = []
    for rate, trials in units:
        reps = dict.fromkeys(t.rep for t in trials)
        out += [(rate, [t for t in trials if t.rep == rep]) for rep in reps]
    return out


class WorkSource:
    """The units still to run; thread-safe, for one testbed or several."""

    def __init__(self, units: list[Unit] | None = None, rounds: Rounds | None = None) -> None:
        self.pending: list[Unit] = list(units or [])
        self.rounds = rounds
        self.in_flight = 0
        self.stopped = False
        self._cond = threading.Condition()

    def take(self, rate: float | None = None) -> Unit | None:
        """The next unit, one of `rate` if there is one; None when all is done (or `stop` was called).
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
                self.pending = self.rounds.round_blocks() if self.rounds else []
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
