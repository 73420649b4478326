"""Which trials a sweep runs, and in what order.

Trial ids number the grid in one fixed order (op, size, rate, method, server, rep; the local baseline
first), so a resumed sweep knows exactly which trials are missing. Only the method grpc has servers of
its own (`contracts.trials.offloads`): a run with the Python server alone numbers its trials as runs
before servers did. The execution order within each phase
(local baseline, then each rate) is shuffled from the experiment's seed, so slow drift on the machine
does not line up with any one factor.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from contracts.trials import LOCAL, offloads
from testbed.experiment import Experiment


@dataclass(frozen=True)
class Trial:
    trial: int
    op: str
    size: int
    dtype: str
    rate_mbps: float | None  # None for the local baseline
    method: str  # a codec, or "local"
    rep: int
    server: str = ""  # the server's language (contracts.trials.GRPC_SERVERS); "" for the local baseline

    @property
    def cell(self) -> tuple:
        return (self.op, self.size, self.rate_mbps, self.method, self.server)


def plan_trials(exp: Experiment) -> list[Trial]:
    trials: list[Trial] = []

    def add(op, size, rate, method, rep, server=""):
        trials.append(Trial(len(trials), op, size, exp.dtype, rate, method, rep, server))

    if exp.local:
        for op in exp.ops:
            for size in exp.sizes:
                for rep in range(exp.reps):
                    add(op, size, None, LOCAL, rep)
    for op in exp.ops:
        for size in exp.sizes:
            for rate in exp.rates_mbps:
                for method, server in offloads(exp.methods, exp.servers):
                    for rep in range(exp.reps):
                        add(op, size, rate, method, rep, server)
    return trials


def phases(
    exp: Experiment, trials: list[Trial], done: set[int] = frozenset()
) -> list[tuple[float | None, list[Trial]]]:
    """(rate, trials still to run) per phase in execution order: local baseline first, then rates ascending."""
    out = []
    for rate in ([None] if exp.local else []) + list(exp.rates_mbps):
        todo = [t for t in trials if t.rate_mbps == rate and t.trial not in done]
        rng = random.Random(f"{exp.seed}-{rate}")
        rng.shuffle(todo)
        if todo:
            out.append((rate, todo))
    return out
