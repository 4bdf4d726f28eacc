"""Deciding on timing samples: is head slower than base? Pure functions: no I/O, no GPU.

scipy is imported by the functions that need it: it is slow to import, and the verdict types
(hence the report and the command line's error path) import this module.
"""

from mlagate.measure.summary import iqr, median, median_ci


def slower_p_value(base, head) -> float:
    """One-sided Mann-Whitney U: p-value for "head times are larger than base"."""
    from scipy import stats as _scipy

    return float(_scipy.mannwhitneyu(head, base, alternative="greater").pvalue)


def median_ratio(base, head) -> float:
    """median(head) / median(base): 1.05 means head is 5% slower."""
    return median(head) / median(base)


def change_interval(base, head, confidence: float = 0.99) -> tuple | None:
    """Bounds of head/base - 1 from the order-statistic intervals of both medians (conservative: the
    ratio of the far ends), or None where either interval does not exist."""
    (b_lo, b_hi), (h_lo, h_hi) = median_ci(base, confidence), median_ci(head, confidence)
    if any(v != v for v in (b_lo, b_hi, h_lo, h_hi)):
        return None
    return h_lo / b_hi - 1, h_hi / b_lo - 1


def _z(p: float) -> float:
    from statistics import NormalDist

    return NormalDist().inv_cdf(p)


ROBUST_SD = 1.349  # IQR / sd of a normal distribution


def detectable_change(base, head, alpha: float, power: float = 0.8) -> float | None:
    """The smallest slowdown (head/base - 1) a one-sided test at ``alpha`` would catch with ``power`` on
    samples of this spread and count: (z_(1-alpha) + z_power) x sqrt(sd_b^2/n_b + sd_h^2/n_h) / median(base),
    each side's sd read robustly from its IQR (sd = IQR / 1.349 for a normal). Samples taken in windows are
    not independent, so this is the within-run figure: what this run's own spread allows, not record-to-record
    noise. None with fewer than 2 samples on a side."""
    if len(base) < 2 or len(head) < 2:
        return None
    spread = sum((iqr(s) / ROBUST_SD) ** 2 / len(s) for s in (base, head)) ** 0.5
    return (_z(1 - alpha) + _z(power)) * spread / median(base)
