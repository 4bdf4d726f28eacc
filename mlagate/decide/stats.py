"""Deciding on timing samples: is head slower than base? Pure functions: no I/O, no GPU.

scipy is imported by the functions that need it: it is slow to import, and the verdict types
(hence the report and the command line's error path) import this module.
"""

from mlagate.measure.summary import median


def slower_p_value(base, head) -> float:
    """One-sided Mann-Whitney U: p-value for "head times are larger than base"."""
    from scipy import stats as _scipy

    return float(_scipy.mannwhitneyu(head, base, alternative="greater").pvalue)


def median_ratio(base, head) -> float:
    """median(head) / median(base): 1.05 means head is 5% slower."""
    return median(head) / median(base)
