"""Confidence intervals and Welch's test against textbook values and explicit formulas."""

import math
import statistics

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from analysis.cells import method_order
from analysis.stats import ci95, t_quantile, welch

# two-sided 95% quantiles from a printed t table
TABLE = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 9: 2.262, 10: 2.228, 30: 2.042, 39: 2.023}


@pytest.mark.parametrize(("dof", "value"), TABLE.items())
def test_t_quantile_matches_the_table(dof, value):
    assert t_quantile(dof) == pytest.approx(value, abs=5e-4)


def test_t_quantile_of_no_degrees_of_freedom_is_nan():
    assert np.isnan(t_quantile([0.0, -1.0, np.nan])).all()


def test_t_quantile_between_neighbouring_integers():
    assert t_quantile(2) > t_quantile(2.5) > t_quantile(3)


def test_ci95_needs_two_samples():
    assert np.isnan(ci95(1.0, 1)) and np.isnan(ci95(np.nan, 0))
    assert ci95(0.5, 3) == pytest.approx(4.302652729749462 * 0.5 / math.sqrt(3))


def test_welch_textbook_example():
    # a: 20.0 22.0 24.0 (sd 2, n 3), b: 10 11 12 13 14 (sd 1.5811, n 5)
    a, b = [20.0, 22.0, 24.0], [10.0, 11.0, 12.0, 13.0, 14.0]
    va, vb = statistics.variance(a) / 3, statistics.variance(b) / 5
    dof = (va + vb) ** 2 / (va**2 / 2 + vb**2 / 4)
    assert dof == pytest.approx(
        3.5328, abs=1e-4
    )  # by hand: 1.8333^2 / (1.3333^2 / 2 + 0.5^2 / 4) = 3.3611 / 0.9514
    diff, half, got_dof = welch(22.0, statistics.stdev(a), 3, 12.0, statistics.stdev(b), 5)
    assert diff == 10.0 and got_dof == pytest.approx(dof)
    assert half == pytest.approx(t_quantile(dof) * math.sqrt(va + vb))
    assert (
        2.776 * math.sqrt(va + vb) < half < 3.182 * math.sqrt(va + vb)
    )  # 3 < dof < 4: t between t(4) and t(3)


def test_welch_one_sided_spread_gives_n_minus_one():
    _, half, dof = welch(2.0, 0.5, 3, 4.0, 0.0, 3)
    assert dof == pytest.approx(2.0) and half == pytest.approx(4.302652729749462 * 0.5 / math.sqrt(3))


def test_welch_exact_and_unknown_cases():
    diff, half, dof = welch(3.0, 0.0, 2, 4.0, 0.0, 3)
    assert (diff, half) == (-1.0, 0.0) and np.isnan(dof)
    _, half, dof = welch(3.0, np.nan, 1, 4.0, 1.0, 3)
    assert np.isnan(half) and np.isnan(dof)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.floats(0.01, 100.0), min_size=2, max_size=12),
    st.lists(st.floats(0.01, 100.0), min_size=2, max_size=12),
)
def test_welch_dof_between_smaller_sample_and_pooled(a, b):
    sa, sb = statistics.stdev(a), statistics.stdev(b)
    _, half, dof = welch(statistics.fmean(a), sa, len(a), statistics.fmean(b), sb, len(b))
    if sa == 0 and sb == 0:
        assert half == 0
        return
    assert min(len(a), len(b)) - 1 - 1e-9 <= dof <= len(a) + len(b) - 2 + 1e-9
    assert half >= 0


def test_method_order():
    assert method_order(["raw", "msgpack", "orjson", "json", "ujson"]) == [
        "json",
        "ujson",
        "raw",
        "msgpack",
        "orjson",
    ]
    assert method_order(["zeta", "Alpha", "raw"]) == ["raw", "Alpha", "zeta"]
