"""Describing timing samples: median, spread, a distribution-free interval, outliers. Pure.

scipy is imported where it is needed: it is slow to import, and the report and the command
line's error path import the verdict types, which use the median.
"""

import math

import numpy as np


def median(samples) -> float:
    return float(np.median(np.asarray(samples, dtype=float)))


def iqr(samples) -> float:
    q1, q3 = np.percentile(np.asarray(samples, dtype=float), [25, 75])
    return float(q3 - q1)


def median_ci(samples, confidence: float = 0.99) -> tuple:
    """Distribution-free CI of the median from order statistics (binomial).

    Returns (low, high), or (nan, nan) when there are too few samples for the
    requested confidence (n < 8 at 99%)."""
    from scipy import stats as _scipy

    x = np.sort(np.asarray(samples, dtype=float))
    n = len(x)
    alpha = 1 - confidence
    # Largest k with P(Binom(n, 1/2) <= k - 1) <= alpha / 2: x[k-1] and x[n-k] bound the median.
    k = int(_scipy.binom.ppf(alpha / 2, n, 0.5))
    while k > 0 and _scipy.binom.cdf(k - 1, n, 0.5) > alpha / 2:
        k -= 1
    if k < 1:
        return (math.nan, math.nan)
    return (float(x[k - 1]), float(x[n - k]))


def outlier_fraction(samples) -> float:
    """Share of samples beyond 1.5 IQR of the quartiles (Tukey fences)."""
    x = np.asarray(samples, dtype=float)
    q1, q3 = np.percentile(x, [25, 75])
    spread = q3 - q1
    return float(np.mean((x < q1 - 1.5 * spread) | (x > q3 + 1.5 * spread)))


def describe(samples, confidence: float = 0.99) -> dict:
    low, high = median_ci(samples, confidence)
    return {"n": len(samples), "median": median(samples), "iqr": iqr(samples), "ci_low": low, "ci_high": high,
            "min": float(np.min(samples)), "max": float(np.max(samples)), "outliers": outlier_fraction(samples)}
