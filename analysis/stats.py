"""95% confidence intervals (Student t) and Welch's test, vectorised over cells.

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


def welch(mean_a, std_a, n_a, mean_b, std_b, n_b) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Difference a - b, half-width of its 95% CI and Welch-Satterthwaite degrees of freedom.

    NaN where either side has fewer than two samples. When both samples have zero spread the
    difference is known exactly: half-width 0 (so any non-zero difference counts as significant) and
    the degrees of freedom, 0/0, stay NaN.
    """
    mean_a, std_a, n_a, mean_b, std_b, n_b = (
        np.asarray(x, dtype=float) for x in (mean_a, std_a, n_a, mean_b, std_b, n_b)
    )
    known = (n_a >= 2) & (n_b >= 2)
    with np.errstate(invalid="ignore", divide="ignore"):
        va = std_a**2 / n_a
        vb = std_b**2 / n_b
        se = np.sqrt(va + vb)
        dof = (va + vb) ** 2 / (va**2 / (n_a - 1) + vb**2 / (n_b - 1))
        half = np.where(se == 0, 0.0, t_quantile(dof) * se)
    diff = mean_a - mean_b
    return diff, np.where(known, half, np.nan), np.where(known & (se > 0), dof, np.nan)


def significant(diff, half) -> np.ndarray:
    """Whether a Welch difference is significant at 95%: its CI excludes zero; False where unknown (NaN)."""
    with np.errstate(invalid="ignore"):
        return np.abs(np.asarray(diff, dtype=float)) > np.asarray(half, dtype=float)
