"""Sampling the time of work on a shared host: rounds, shuffled, until each mean is known.

A mean of a few samples is not a fact on a shared host; each work is sampled in rounds (as a sweep
interleaves its trials) until its mean is known within a precision (95% CI) or its budget is spent.
Used by the scaled calibration, the throttle check and a measured device profile alike.
"""

from __future__ import annotations

import math
import random
import statistics
import time
from collections.abc import Callable

from contracts.stats import ci95

Work = Callable[[], object]


class SelfTimed:
    """Work that times itself: a call returns its own seconds, which `sampled` takes in place of the
    clock around it (a child process's CPU time, which the parent's clock does not count)."""

    def __init__(self, run: Callable[[], float]) -> None:
        self.run = run

    def __call__(self) -> float:
        return self.run()


MIN_SAMPLE_S = 0.02  # a sample repeats work shorter than this, so the clock's noise does not dominate
BUDGET_S = 5.0  # scaled calibration: sampling a work goes on until its mean is known, or this is spent
MAX_ROUNDS = 400


def precise(samples: list[float], precision: float) -> bool:
    """Whether the mean's 95% CI half-width is within `precision` of the mean."""
    if len(samples) < 2:
        return False
    return float(ci95(statistics.stdev(samples), len(samples))) <= precision * statistics.mean(samples)


def sampled(
    jobs: list[Work],
    rounds: int,
    clock=time.process_time,
    seed: int = 1,
    batch: bool = True,
    before: Callable[[int], object] | None = None,
    enough: Callable[[int, list[float]], bool] | None = None,
    budget_s: float = BUDGET_S,
    max_rounds: int = MAX_ROUNDS,
) -> list[list[float]]:
    """Seconds of one run of each work, one sample per round: `samples[i][r]`.

    Each round runs every work once, in an order shuffled from the seed, as a sweep interleaves its
    trials: a work never follows itself, so caches and the allocator are as cold as in a trial
    (back-to-back repetitions of one work reuse its memory and come out faster than any trial).
    With `batch`, work shorter than `MIN_SAMPLE_S` is repeated within its sample and divided;
    without, every sample is one run (what a throttled trial sees, quota periods and all).
    `before(i)` runs ahead of every sample of work `i`, outside it (the throttle's quota and period
    alignment).

    With `enough`, sampling goes on after `rounds` (in pairs of rounds) for every work `i` whose
    samples are not yet `enough(i, samples)`, until `budget_s` has gone into it (its samples and what
    `before` waited) or it has `max_rounds` samples: a mean of a few samples is not a fact on a shared host (measured
    here: CPU time of one run spread over 58-346% of its median, two means of 5 samples 10-20%
    apart). Work alone in a round is preceded by an untimed run of the other work closest to it in
    length (as much memory through the caches, and no long wait under a throttle's quota), so that
    it still never follows itself.
    """
    runs, first = [], []
    for job in jobs:
        start = clock()
        took = job()
        first.append(max(took if isinstance(job, SelfTimed) else clock() - start, 1e-6))
        runs.append(
            max(1, math.ceil(MIN_SAMPLE_S / first[-1])) if batch and not isinstance(job, SelfTimed) else 1
        )
    samples: list[list[float]] = [[] for _ in jobs]
    spent = [0.0] * len(jobs)
    rng = random.Random(seed)
    done = 0
    while True:
        if done < rounds:
            order = list(range(len(jobs)))
        elif enough is None:
            break
        else:
            order = [
                i
                for i in range(len(jobs))
                if not enough(i, samples[i]) and spent[i] < budget_s and len(samples[i]) < max_rounds
            ]
            if not order:
                break
        for _ in range(1 if done < rounds else 2):
            rng.shuffle(order)
            if len(order) == 1 and len(jobs) > 1:
                alone = order[0]
                others = [i for i in range(len(jobs)) if i != alone]
                jobs[min(others, key=lambda i: abs(math.log(first[i] / first[alone])))]()
            for i in order:
                ahead, wall = clock(), time.perf_counter()
                if before:
                    before(i)
                if isinstance(jobs[i], SelfTimed):  # one run, its own seconds
                    samples[i].append(jobs[i]())
                    # its budget pays the child's whole run (a fresh process's start-up and every other
                    # stage of its request), not the few milliseconds of the stage it reports
                    spent[i] += time.perf_counter() - wall
                    continue
                start = clock()
                for _ in range(runs[i]):
                    jobs[i]()
                end = clock()
                spent[i] += end - ahead  # a throttle's alignment counts against the budget too
                samples[i].append((end - start) / runs[i])
            done += 1
    return samples


def mean_seconds(
    jobs: list[Work],
    reps: int,
    precision: float,
    budget_s: float = BUDGET_S,
    settled: list[bool] | None = None,
    **how,
) -> tuple[list[float], list[int]]:
    """Seconds of one run of each work, the mean of at least `reps` samples taken in rounds, and more
    until the mean is known within `precision` (95% CI) or `budget_s` is spent (`sampled`), except
    for work `settled` beforehand; and how many samples each took."""

    def enough(i: int, s: list[float]) -> bool:
        return bool(settled and settled[i]) or precise(s, precision)

    samples = sampled(jobs, reps, enough=enough, budget_s=budget_s, **how)
    return [statistics.mean(s) for s in samples], [len(s) for s in samples]
