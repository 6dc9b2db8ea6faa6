"""Medians, quartiles and bootstrap intervals: timings on a shared machine are noisy and skewed (a run that
collides with a background job is slow, never fast), so the notebooks report medians with intervals."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence

import numpy as np


def _as_clean_array(values: Iterable[float]) -> np.ndarray:
    """1-D float array with NaNs dropped (a failed run is a missing value, not a zero)."""
    arr = np.asarray(values if isinstance(values, np.ndarray) else list(values), dtype=float).ravel()
    arr = arr[~np.isnan(arr)]
    if arr.size == 0:
        raise ValueError("values is empty (after dropping NaN): nothing to summarise")
    if np.any(np.isinf(arr)):
        raise ValueError("values contains infinite values")
    return arr


def median_iqr(values: Iterable[float]) -> tuple[float, float, float]:
    """``(median, q25, q75)`` of ``values``, NaNs dropped (numpy's linear quartiles): robust to a slow run."""
    q25, med, q75 = np.percentile(_as_clean_array(values), [25.0, 50.0, 75.0])
    return float(med), float(q25), float(q75)


def nearest_rank_percentile(values: Iterable[float], q: float) -> float:
    """The ``q``-th percentile (0 < q <= 100) by nearest rank: a latency one request really had, which with the few
    requests per level of a CPU run never falls below the median."""
    return float(np.percentile(_as_clean_array(values), q, method="inverted_cdf"))  # nearest rank


#: the fewest prompts a 95% interval of a per-prompt claim is computed from: resampling few values covers the true
#: median far less often than 95%, so notebooks print their range and draw no verdict (v(n)'s rounds keep 2).
MIN_VALUES_FOR_INTERVAL = 8


def bca_interval(data: tuple[np.ndarray, ...], stat: Callable, n_resamples: int = 2000, confidence: float = 0.95,
                 seed: int | None = 0) -> tuple[float, float]:
    """scipy's BCa bootstrap interval, which corrects the percentile interval's bias and skew (a median of few timings
    has both); several arrays are resampled together (paired: one request's numbers stay one request's)."""
    import warnings

    from scipy import stats as scipy_stats

    with warnings.catch_warnings():  # a degenerate resample gives NaN, which the callers read as "no interval"
        warnings.simplefilter("ignore")
        result = scipy_stats.bootstrap(data, stat, n_resamples=int(n_resamples), confidence_level=float(confidence),
                                       method="BCa", paired=len(data) > 1, rng=np.random.default_rng(seed))
    return float(result.confidence_interval.low), float(result.confidence_interval.high)


def bootstrap_ci(values: Iterable[float], stat: Callable = np.median, n_resamples: int = 2000,
                 seed: int | None = 0, min_n: int = 2) -> tuple[float, float, float]:
    """``(point, low, high)``: ``stat(values)`` with a 95% BCa bootstrap interval; a NaN interval with fewer than
    ``min_n`` values (at least 2), NaNs dropped; values without spread give the value itself."""
    arr = _as_clean_array(values)
    point = float(stat(arr))
    if arr.size < max(2, int(min_n)):
        return point, math.nan, math.nan
    if np.all(arr == arr[0]):
        return point, point, point
    return (point, *bca_interval((arr,), stat, n_resamples, seed=seed))


def bootstrap_ratio_ci(numerators: Sequence[float], denominators: Sequence[float], n_resamples: int = 2000,
                       seed: int | None = 0, min_n: int = 2) -> tuple[float, float, float]:
    """``(point, low, high)`` for a pooled ratio ``sum(numerators) / sum(denominators)``, like vLLM's acceptance rate:
    the interval resamples requests (a mean of per-request rates would weigh a 3-draft answer like a 30-draft one).
    Pairs with a NaN, or of two zeros (no say in the ratio), are dropped."""
    num, den = np.asarray(numerators, dtype=float).ravel(), np.asarray(denominators, dtype=float).ravel()
    if num.shape != den.shape:
        raise ValueError(f"numerators and denominators must be paired (same length), got {num.size} and {den.size}")
    keep = ~(np.isnan(num) | np.isnan(den))
    num, den = num[keep], den[keep]
    if np.any(den < 0) or np.any(num < 0):
        raise ValueError("a pooled ratio needs non-negative counts")
    total = den.sum()
    point = float(num.sum() / total) if total > 0 else math.nan
    drafted = (num > 0) | (den > 0)
    num, den = num[drafted], den[drafted]
    if num.size < max(2, int(min_n)) or not total > 0:
        return point, math.nan, math.nan
    if np.all(num * den[0] == den * num[0]):  # every request at the same rate
        return point, point, point

    def pooled(n: np.ndarray, d: np.ndarray, axis: int = -1) -> np.ndarray:
        return n.sum(axis=axis) / d.sum(axis=axis)

    return (point, *bca_interval((num, den), pooled, n_resamples, seed=seed))
