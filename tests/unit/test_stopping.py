"""The adaptive stopping rule on small cells whose answers are worked out by hand.

Welch at 95% for [1, 2, 3] vs [4, 5, 6]: difference 3, standard error sqrt(1/3 + 1/3) = 0.8165, 4
degrees of freedom, t = 2.776, half-width 2.267: significant. Against [3, 4, 5] the difference is 2,
inside the half-width: not significant.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from analysis.stopping import FAILED, MAX_REPS, PRECISE, SIGNIFICANT, Rule, stop_reason
from contracts.run import Experiment

RULE = Rule(min_reps=3, max_reps=6)


def test_a_clear_cell_stops_as_significant_at_min():
    # the example: JSON mul 300 at 40 Mbit/s, 3.9 s remote against under 0.1 s local
    assert stop_reason([3.9, 4.0, 4.1], [0.09, 0.10, 0.11], RULE) == SIGNIFICANT


def test_nothing_stops_before_min():
    assert stop_reason([3.9, 4.0], [0.09, 0.10], RULE) is None
    assert stop_reason([None, None], [0.1, 0.1], RULE) is None


@pytest.mark.parametrize(
    ("local", "expected"), [([4.0, 5.0, 6.0], SIGNIFICANT), ([3.0, 4.0, 5.0], None)], ids=["diff 3", "diff 2"]
)
def test_the_welch_border_is_where_the_hand_computation_puts_it(local, expected):
    assert stop_reason([1.0, 2.0, 3.0], local, RULE) == expected
    assert stop_reason([1.0, 2.0, 3.0], local, Rule(3, 3)) == MAX_REPS  # at max it stops either way


def test_a_borderline_cell_goes_on_to_max():
    remote, local = [1.0, 1.2, 0.8, 1.1, 0.9], [1.05, 0.95, 1.1, 0.9, 1.0]
    assert stop_reason(remote, local, RULE) is None
    assert stop_reason([*remote, 1.0], [*local, 1.0], RULE) == MAX_REPS


def test_precision_also_needs_the_mean_within_its_fraction():
    # mean 10, sd 0.1, n 3: 95% half-width 4.303 * 0.1 / sqrt(3) = 0.248, 2.5% of the mean
    remote, local = [10.0, 10.1, 9.9], [1.0, 1.1, 0.9]
    assert stop_reason(remote, local, Rule(3, 6, precision=0.05)) == PRECISE
    assert stop_reason(remote, local, Rule(3, 6, precision=0.02)) is None
    assert stop_reason(remote, local, Rule(3, 6)) == SIGNIFICANT


def test_failed_trials_are_not_samples_and_a_cell_without_samples_fails():
    assert stop_reason([None, None, None], [0.1, 0.1, 0.1], RULE) == FAILED
    assert stop_reason([3.9, 4.0, 4.1], [None, None, None], RULE) == FAILED  # no baseline to compare
    assert stop_reason([3.9, None, 4.1], [0.09, 0.10, None], RULE) == SIGNIFICANT  # two a side suffice
    # one success in three is not yet a failure (two failures < min); at max it is
    assert stop_reason([3.9, None, None], [0.1, 0.1, 0.1], RULE) is None
    assert stop_reason([3.9, None, None, None, None, None], [0.1] * 6, Rule(3, 6)) == FAILED


def test_identical_samples_with_different_means_are_significant():
    assert stop_reason([2.0, 2.0, 2.0], [1.0, 1.0, 1.0], RULE) == SIGNIFICANT
    assert stop_reason([1.0, 1.0, 1.0], [1.0, 1.0, 1.0], RULE) is None


def test_the_rule_of_a_run_comes_from_its_manifest():
    exp = Experiment("e", ("mul",), (100,), (10.0,), ("raw",), reps=40, min_reps=5, precision=0.05)
    assert Rule.of(exp) == Rule(5, 40, 0.05)
    assert Rule.of(replace(exp, reps=3, min_reps=None, precision=None)) == Rule(3, 3, None)  # a fixed run


def test_a_cell_the_grown_baseline_no_longer_decides_opens_again():
    """A cell closed against three local runs ([1, 2, 3] against [4, 5, 6]: significant) opens again
    when its baseline runs a fourth time for another cell and the whole baseline, [4, 5, 6, 2], no
    longer decides it (difference 2.25, half-width 2.7): the analysis decides against the whole
    baseline, so a cell stopped as significant must be significant there."""
    from testbed.sweep.plan import plan_trials
    from testbed.sweep.rounds import Rounds
    from tests.fakes import FAKE_SWEEP

    exp = replace(FAKE_SWEEP, sizes=(100,), rates_mbps=(10.0,), methods=("json", "raw"), reps=6, min_reps=3)
    trials = plan_trials(exp)
    by = {(t.method, t.rep): t.trial for t in trials}
    results = {by["json", r]: v for r, v in enumerate([1.0, 2.0, 3.0])}
    results |= {by["raw", r]: 4.5 for r in range(3)} | {
        by["local", r]: v for r, v in enumerate([4.0, 5.0, 6.0])
    }
    json_cell, local_cell = ("mul", 100, 10.0, "json", "python"), ("mul", 100, None, "local", "")
    assert Rounds(exp, trials, results).reason(json_cell) == SIGNIFICANT
    results |= {by["raw", 3]: 4.4, by["local", 3]: 2.0}  # the raw cell went on, and its baseline with it
    rounds = Rounds(exp, trials, results)
    assert rounds.reason(json_cell) is None and json_cell in rounds.open_cells()
    assert [t.trial for t in rounds.next_round()] == [by["json", 3]]  # it catches up first
    assert local_cell in rounds.open_cells()
