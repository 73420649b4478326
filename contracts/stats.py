"""95% confidence intervals of a mean (Student t): the analysis's cells and the client's calibration
both say how well a mean is known, and must say it the same way.

The t quantile comes from scipy rather than a hand-written approximation: Welch's degrees of freedom
are fractional and small (2-5 for a handful of repetitions), where approximations are least accurate.
"""

from __future__ import annotations

import numpy as np

LEVEL = 0.95


def t_quantile(dof) -> np.ndarray:
    """Two-sided 95% Student t quantile; NaN where dof is not positive."""
    from scipy import stats  # here, not at the top: plotting processes import this package without needing it

    dof = np.asarray(dof, dtype=float)
    with np.errstate(invalid="ignore"):
        return np.where(dof > 0, stats.t.ppf(0.5 + LEVEL / 2, np.where(dof > 0, dof, 1.0)), np.nan)


def ci95(std, n) -> np.ndarray:
    """Half-width of the 95% CI of a mean from n samples; NaN for n < 2 (no spread to estimate)."""
    std = np.asarray(std, dtype=float)
    n = np.asarray(n, dtype=float)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(n >= 2, t_quantile(n - 1) * std / np.sqrt(n), np.nan)


def binomial_ci(k: int, n: int, level: float = 0.99) -> tuple[float, float]:
    """The Wilson score interval of a proportion from k successes in n trials (a loss rate from the
    packets lost): it stays inside [0, 1] and holds at k = 0 or k = n, where the normal one collapses.
    (nan, nan) without trials."""
    from scipy import stats

    if n <= 0:
        return float("nan"), float("nan")
    z = float(stats.norm.ppf(0.5 + level / 2))
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z / (1 + z * z / n) * np.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return max(0.0, float(centre - half)), min(1.0, float(centre + half))
