"""Medians, quartiles and bootstrap intervals for honest timing comparisons. Timings on a shared machine are
noisy and skewed (a run that collides with a background job is slow, never fast), so the notebooks report
medians with intervals; with a handful of prompts, the interval says how far a speedup could move on a rerun.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence

import numpy as np


def _as_clean_array(values: Iterable[float], what: str = "values") -> np.ndarray:
    """1-D float array with NaNs dropped (a failed run is a missing value, not a zero)."""
    try:
        arr = np.asarray(list(values) if not isinstance(values, np.ndarray) else values, dtype=float).ravel()
    except (TypeError, ValueError):
        raise ValueError(f"{what} must be numbers") from None
    arr = arr[~np.isnan(arr)]
    if arr.size == 0:
        raise ValueError(f"{what} is empty (after dropping NaN): nothing to summarise")
    if np.any(np.isinf(arr)):
        raise ValueError(f"{what} contains infinite values")
    return arr


def _check_confidence(confidence: float) -> None:
    if not (0.0 < float(confidence) < 1.0):
        raise ValueError(f"confidence must be between 0 and 1, got {confidence!r}")


def _resample_indices(size: int, n_resamples: int, seed: int | None) -> np.ndarray:
    """Row i: the indices of resample i (with replacement), deterministic for a given seed."""
    return np.random.default_rng(seed).integers(0, size, size=(int(n_resamples), size))


def _interval(point: float, boot: np.ndarray, confidence: float) -> tuple[float, float, float]:
    """``(point, low, high)`` with the percentile interval of the bootstrap values ``boot``."""
    tail = (1.0 - float(confidence)) / 2.0
    low, high = np.quantile(boot, [tail, 1.0 - tail])
    return point, float(low), float(high)


def median_iqr(values: Iterable[float]) -> tuple[float, float, float]:
    """``(median, q25, q75)`` of ``values``, NaNs dropped (numpy's linear quartiles): robust to a slow run."""
    q25, med, q75 = np.percentile(_as_clean_array(values), [25.0, 50.0, 75.0])
    return float(med), float(q25), float(q75)


def nearest_rank_percentile(values: Iterable[float], q: float) -> float:
    """The ``q``-th percentile (0 < q <= 100) by nearest rank: a tail latency one request really had, which with
    the 2 or 4 requests per level of a CPU run never falls below the median (p90 of two is the larger one)."""
    if not 0 < q <= 100:
        raise ValueError(f"q must be in (0, 100], got {q}")
    return float(np.percentile(_as_clean_array(values), q, method="inverted_cdf"))  # nearest rank


def _apply_stat(stat: Callable, samples: np.ndarray) -> np.ndarray:
    """Apply ``stat`` to each row of ``samples``, vectorised when ``stat`` accepts ``axis``."""
    try:
        out = np.asarray(stat(samples, axis=1), dtype=float)
        if out.shape == (samples.shape[0],):
            return out
    except TypeError:
        pass
    return np.array([float(stat(row)) for row in samples])


#: the fewest prompts (or requests) a 95% interval of a per-prompt claim is computed from. Below it a bootstrap is
#: not an interval: resampling n values can only return values between the sample's own min and max (with 2
#: values, exactly them), so it covers the true median far less often than 95%; the notebooks then print the
#: range of the n values and draw no verdict from it. Timings of repeated engine rounds (v(k)) are not prompts
#: and keep the bootstrap's own minimum of 2.
MIN_VALUES_FOR_INTERVAL = 8


def bootstrap_ci(values: Iterable[float], stat: Callable = np.median, n_resamples: int = 2000,
                 confidence: float = 0.95, seed: int | None = 0, min_n: int = 2) -> tuple[float, float, float]:
    """``(point, low, high)``: ``stat(values)`` with a percentile-bootstrap interval (no normality assumption: skewed
    timings). NaN interval with fewer than ``min_n`` values (NaNs dropped; at least 2); per-prompt claims pass
    ``MIN_VALUES_FOR_INTERVAL``."""
    _check_confidence(confidence)
    if int(n_resamples) < 1:
        raise ValueError(f"n_resamples must be at least 1, got {n_resamples!r}")
    arr = _as_clean_array(values)
    point = float(stat(arr))
    if arr.size < max(2, int(min_n)):
        return point, math.nan, math.nan
    return _interval(point, _apply_stat(stat, arr[_resample_indices(arr.size, n_resamples, seed)]), confidence)


def bootstrap_ratio_ci(numerators: Sequence[float], denominators: Sequence[float], n_resamples: int = 2000,
                       confidence: float = 0.95, seed: int | None = 0, min_n: int = 2) -> tuple[float, float, float]:
    """``(point, low, high)`` for a pooled ratio ``sum(numerators) / sum(denominators)``. vLLM's acceptance rate is
    pooled, so the interval resamples *requests* (pairs together) and recomputes the pooled ratio: a mean of
    per-request rates would weigh a 3-draft answer like a 30-draft one. Resamples with a zero denominator and
    pairs with a NaN are dropped; fewer than 2 pairs give a NaN interval."""
    num = np.asarray(numerators, dtype=float).ravel()
    den = np.asarray(denominators, dtype=float).ravel()
    if num.shape != den.shape:
        raise ValueError(f"numerators and denominators must be paired (same length), got {num.size} and {den.size}")
    _check_confidence(confidence)
    keep = ~(np.isnan(num) | np.isnan(den))
    num, den = num[keep], den[keep]
    if np.any(den < 0) or np.any(num < 0):
        raise ValueError("a pooled ratio needs non-negative counts")
    total = den.sum()
    point = float(num.sum() / total) if total > 0 else math.nan
    if num.size < max(2, int(min_n)) or not total > 0:
        return point, math.nan, math.nan
    idx = _resample_indices(num.size, n_resamples, seed)
    sums_den = den[idx].sum(axis=1)
    ok = sums_den > 0
    boot = num[idx].sum(axis=1)[ok] / sums_den[ok]
    if boot.size == 0:
        return point, math.nan, math.nan
    return _interval(point, boot, confidence)

