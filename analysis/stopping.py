"""When an adaptive cell has run enough: the stopping rule over a cell's remote and local samples.

The sweep asks it after every round to decide which cells go on; the analysis asks it again over
trials.csv to say why each cell stopped (`stop_reason` in cells.csv). Both get the same answer
because the rule sees only what the trials leave: a cell's trials and every trial of its local
baseline so far (the baseline runs in every round while any of its cells is open). The whole
baseline, not its first n: the analysis decides each cell against the whole baseline, and a cell
closed against part of it could come out undecided once the baseline ran on for another cell
(measured: a smoke run's mul 700 uJSON at 100 Mbit/s closed as significant at 3 repetitions against
3 local ones, then undecided against the 4 the analysis saw). Re-asked every round, a cell the
grown baseline no longer decides opens again.

The decision test is the analysis's own: Welch's test at 95% (`analysis.stats`), remote vs local.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from analysis.stats import ci95, significant, welch
from contracts.run import Experiment

SIGNIFICANT = "significant"  # the decision is significant (no precision asked for)
PRECISE = "precise"  # significant, and the mean's 95% CI half-width is within the precision
MAX_REPS = "max_reps"  # ran the most repetitions allowed
FAILED = "failed"  # too few successful trials on a side to decide anything


@dataclass(frozen=True)
class Rule:
    min_reps: int
    max_reps: int
    precision: float | None = None  # a fraction of the mean; None: significance alone stops a cell

    @classmethod
    def of(cls, experiment: Experiment) -> Rule:
        """The rule of a run's experiment, for the sweep and the analysis alike (fixed: min = max = reps)."""
        reps = experiment.reps
        low = experiment.min_reps
        return cls(reps if low is None else low, reps, experiment.precision)


def stop_reason(remote: Sequence[float | None], local: Sequence[float | None], rule: Rule) -> str | None:
    """Why the cell stops after its trials `remote` (t_total in order of repetition, None where a
    trial failed), compared with `local` (every trial of its baseline so far); None: it goes on.

    A side with fewer than two successful trials cannot be tested: the cell fails once that side has
    `min_reps` failures (more of the same would not help) or reaches `max_reps`.
    """
    n = len(remote)
    if n < rule.min_reps:
        return None
    a = np.array([x for x in remote if x is not None], dtype=float)
    b = np.array([x for x in local if x is not None], dtype=float)
    if len(a) < 2 or len(b) < 2:
        failures = max(n - len(a), len(local) - len(b))
        return FAILED if failures >= rule.min_reps or n >= rule.max_reps else None
    if n >= rule.max_reps:
        return MAX_REPS
    diff, half, _ = welch(a.mean(), a.std(ddof=1), len(a), b.mean(), b.std(ddof=1), len(b))
    if not significant(diff, half):
        return None
    if rule.precision is None:
        return SIGNIFICANT
    within = ci95(a.std(ddof=1), len(a)) <= rule.precision * abs(a.mean())
    return PRECISE if within else None
