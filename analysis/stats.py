"""95% confidence intervals (Student t, from `contracts.stats`, which the client's calibration
shares) and Welch's test, vectorised over cells."""

from __future__ import annotations

import numpy as np

from contracts.stats import LEVEL, ci95, t_quantile

__all__ = ["LEVEL", "ci95", "significant", "t_quantile", "welch"]


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
