"""Small helpers for honest timing comparisons.

Timings on a laptop or a shared machine are noisy and skewed (a run that collides with a
background job is slow, never fast), so the notebooks report medians with inter-quartile ranges
and bootstrap confidence intervals rather than a mean and a single number. With the handful of
prompts a notebook can afford, the interval says how much the headline speedup could move on a
rerun.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from typing import Literal

import numpy as np
import pandas as pd

__all__ = ["median_iqr", "bootstrap_ci", "bootstrap_ratio_ci", "paired_speedup_ci", "summarize"]


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


def median_iqr(values: Iterable[float]) -> tuple[float, float, float]:
    """``(median, q25, q75)`` of ``values``, NaNs dropped.

    Why: medians and quartiles are robust to the occasional slow run that noisy machines produce.
    Quartiles use numpy's default linear interpolation.
    """
    arr = _as_clean_array(values)
    q25, med, q75 = np.percentile(arr, [25.0, 50.0, 75.0])
    return float(med), float(q25), float(q75)


def nearest_rank_percentile(values: Iterable[float], q: float) -> float:
    """The ``q``-th percentile (0 < q <= 100) by nearest rank: the smallest observed value with at
    least q% of the values at or below it.

    Why: a tail latency should be one a request really had, and with the few requests of a CPU run
    (2 or 4 per level) it must not fall below the median: p90 of two latencies is the larger one.
    """
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


def bootstrap_ci(
    values: Iterable[float],
    stat: Callable = np.median,
    n_resamples: int = 2000,
    confidence: float = 0.95,
    seed: int | None = 0,
) -> tuple[float, float, float]:
    """``(point, low, high)``: ``stat(values)`` with a percentile-bootstrap confidence interval.

    Percentile bootstrap: resample ``values`` with replacement ``n_resamples`` times, compute
    ``stat`` on each, and take the ``(1-confidence)/2`` and ``(1+confidence)/2`` quantiles. It
    makes no normality assumption, which suits skewed timings; with very few values it is too
    narrow, so read it as a rough guide, not a guarantee. Deterministic for a given ``seed``
    (reproducible notebooks). With fewer than 2 values there is nothing to resample: returns
    ``(stat(values), nan, nan)``. NaNs are dropped first.
    """
    if not (0.0 < float(confidence) < 1.0):
        raise ValueError(f"confidence must be between 0 and 1, got {confidence!r}")
    if int(n_resamples) < 1:
        raise ValueError(f"n_resamples must be at least 1, got {n_resamples!r}")
    arr = _as_clean_array(values)
    point = float(stat(arr))
    if arr.size < 2:
        return point, math.nan, math.nan
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, arr.size, size=(int(n_resamples), arr.size))
    boot = _apply_stat(stat, arr[idx])
    tail = (1.0 - float(confidence)) / 2.0
    low, high = np.quantile(boot, [tail, 1.0 - tail])
    return point, float(low), float(high)


def bootstrap_ratio_ci(
    numerators: Sequence[float],
    denominators: Sequence[float],
    n_resamples: int = 2000,
    confidence: float = 0.95,
    seed: int | None = 0,
) -> tuple[float, float, float]:
    """``(point, low, high)`` for a pooled ratio ``sum(numerators) / sum(denominators)``.

    Why: vLLM's acceptance rate over many requests is pooled (all accepted tokens over all
    proposed ones), so its interval must come from the same estimator: resample *requests*
    (pairs kept together) and recompute the pooled ratio each time. A mean of per-request rates
    would weigh a 3-draft answer like a 30-draft one and describe a different number. Resamples
    whose denominator is 0 are dropped. Pairs with a NaN on either side are dropped; with fewer
    than 2 pairs the interval is ``(nan, nan)``; a zero total denominator gives a NaN point.
    """
    num = np.asarray(numerators, dtype=float).ravel()
    den = np.asarray(denominators, dtype=float).ravel()
    if num.shape != den.shape:
        raise ValueError(f"numerators and denominators must be paired (same length), got {num.size} and {den.size}")
    if not (0.0 < float(confidence) < 1.0):
        raise ValueError(f"confidence must be between 0 and 1, got {confidence!r}")
    keep = ~(np.isnan(num) | np.isnan(den))
    num, den = num[keep], den[keep]
    if np.any(den < 0) or np.any(num < 0):
        raise ValueError("a pooled ratio needs non-negative counts")
    total = den.sum()
    point = float(num.sum() / total) if total > 0 else math.nan
    if num.size < 2 or not total > 0:
        return point, math.nan, math.nan
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, num.size, size=(int(n_resamples), num.size))
    sums_den = den[idx].sum(axis=1)
    ok = sums_den > 0
    boot = num[idx].sum(axis=1)[ok] / sums_den[ok]
    if boot.size == 0:
        return point, math.nan, math.nan
    tail = (1.0 - float(confidence)) / 2.0
    low, high = np.quantile(boot, [tail, 1.0 - tail])
    return point, float(low), float(high)


def paired_speedup_ci(
    baseline_times: Sequence[float],
    spec_times: Sequence[float],
    method: Literal["median_ratio", "ratio_of_means"] = "median_ratio",
    n_resamples: int = 2000,
    confidence: float = 0.95,
    seed: int | None = 0,
) -> tuple[float, float, float]:
    """Speedup of speculative over baseline on the same prompts: ``(point, low, high)``.

    Pairs matter: prompt ``i`` was timed both ways, and prompts differ far more from each other
    than the two methods do, so we compare within each prompt. Speedup > 1 means speculation
    was faster. ``method``:

    - ``"median_ratio"`` (default): the median over prompts of ``baseline_i / spec_i``, with a
      percentile-bootstrap CI of that median. Answers "on a typical prompt, how much faster?"
    - ``"ratio_of_means"``: ``sum(baseline) / sum(spec)``, bootstrapping prompts (pairs kept
      together). Answers "for the whole workload, how much less time?"; long prompts weigh more.

    Times must be positive; a pair with a NaN on either side is dropped.
    """
    b = np.asarray(baseline_times, dtype=float).ravel()
    s = np.asarray(spec_times, dtype=float).ravel()
    if b.shape != s.shape:
        raise ValueError(
            f"baseline_times and spec_times must be paired (same length), got {b.size} and {s.size}"
        )
    keep = ~(np.isnan(b) | np.isnan(s))
    b, s = b[keep], s[keep]
    if b.size == 0:
        raise ValueError("no complete (baseline, spec) pairs to compare")
    if np.any(b <= 0) or np.any(s <= 0) or np.any(np.isinf(b)) or np.any(np.isinf(s)):
        raise ValueError("times must be positive and finite")
    if method == "median_ratio":
        return bootstrap_ci(b / s, np.median, n_resamples, confidence, seed)
    if method == "ratio_of_means":
        if not (0.0 < float(confidence) < 1.0):
            raise ValueError(f"confidence must be between 0 and 1, got {confidence!r}")
        point = float(b.sum() / s.sum())
        if b.size < 2:
            return point, math.nan, math.nan
        rng = np.random.default_rng(seed)
        idx = rng.integers(0, b.size, size=(int(n_resamples), b.size))
        boot = b[idx].sum(axis=1) / s[idx].sum(axis=1)
        tail = (1.0 - float(confidence)) / 2.0
        low, high = np.quantile(boot, [tail, 1.0 - tail])
        return point, float(low), float(high)
    raise ValueError(f"method must be 'median_ratio' or 'ratio_of_means', got {method!r}")


def summarize(
    df: pd.DataFrame,
    group_cols: str | Sequence[str],
    value_col: str,
    n_resamples: int = 2000,
    confidence: float = 0.95,
    seed: int | None = 0,
) -> pd.DataFrame:
    """Per-group ``n, median, q25, q75, ci_low, ci_high`` of ``value_col``.

    The CI is a percentile bootstrap of the median (:func:`bootstrap_ci`); it is NaN for groups
    with a single value. NaN values are dropped and not counted in ``n``; a group with none
    left is omitted. One row per group, group columns first, so it prints as a results table.
    """
    cols = [group_cols] if isinstance(group_cols, str) else list(group_cols)
    missing = [c for c in cols + [value_col] if c not in df.columns]
    if missing:
        raise ValueError(f"columns not in the DataFrame: {missing}")
    out_cols = cols + ["n", "median", "q25", "q75", "ci_low", "ci_high"]
    rows = []
    groups = df.groupby(cols, sort=True, dropna=False) if cols else [((), df)]
    for key, sub in groups:
        vals = pd.to_numeric(sub[value_col], errors="coerce").to_numpy(dtype=float)
        vals = vals[~np.isnan(vals)]
        if vals.size == 0:
            continue
        med, q25, q75 = median_iqr(vals)
        _, lo, hi = bootstrap_ci(vals, np.median, n_resamples, confidence, seed)
        key = key if isinstance(key, tuple) else (key,)
        rows.append(list(key) + [int(vals.size), med, q25, q75, lo, hi])
    return pd.DataFrame(rows, columns=out_cols)
