"""Unit tests for specdec_helpers.stats."""

import math

import numpy as np
import pytest

from specdec_helpers.stats import bootstrap_ci, median_iqr, nearest_rank_percentile


def test_median_iqr_by_hand():
    # 1..5: median 3; numpy linear quartiles at positions 1 and 3 -> 2 and 4
    assert median_iqr([5, 1, 4, 2, 3]) == (3.0, 2.0, 4.0)
    # 1..4: median 2.5, q25 at position 0.75 -> 1.75, q75 at 2.25 -> 3.25
    assert median_iqr([1, 2, 3, 4]) == pytest.approx((2.5, 1.75, 3.25))


def test_p90_is_an_observed_value_never_below_the_median():
    """Notebook 06 reports p90 latency from 1, 2 or 4 requests per level."""
    assert nearest_rank_percentile([22.0, 17.0], 90) == 22.0  # of two, the slower one
    assert nearest_rank_percentile([1.0, 4.0, 2.0, 3.0], 90) == 4.0
    assert nearest_rank_percentile(range(1, 11), 90) == 9.0 and nearest_rank_percentile([5.0], 90) == 5.0
    assert nearest_rank_percentile([3.0, 1.0, 2.0], 50) == 2.0 and nearest_rank_percentile([3.0, 1.0], 100) == 3.0
    for values in ([2.0, 9.0], [1.0, 5.0, 7.0, 8.0], [4.0, 4.0, 1.0]):
        assert nearest_rank_percentile(values, 90) >= median_iqr(values)[0]


def test_median_iqr_drops_nan_and_rejects_empty():
    assert median_iqr([1.0, float("nan"), 3.0]) == (2.0, 1.5, 2.5)
    with pytest.raises(ValueError):
        median_iqr([])
    with pytest.raises(ValueError):
        median_iqr([float("nan")])


def test_bootstrap_ci_contains_median_and_is_deterministic():
    rng = np.random.default_rng(42)
    x = rng.lognormal(mean=0.0, sigma=0.3, size=40)
    point, lo, hi = bootstrap_ci(x, n_resamples=1000, seed=7)
    assert point == pytest.approx(float(np.median(x)))
    assert lo <= point <= hi
    assert lo < hi
    assert bootstrap_ci(x, n_resamples=1000, seed=7) == (point, lo, hi)
    assert bootstrap_ci(x, n_resamples=1000, seed=8) != (point, lo, hi)


def test_bootstrap_ci_small_and_constant():
    p, lo, hi = bootstrap_ci([3.0])
    assert p == 3.0 and math.isnan(lo) and math.isnan(hi)
    # no spread -> degenerate interval at the value
    assert bootstrap_ci([2.0, 2.0, 2.0], n_resamples=200) == (2.0, 2.0, 2.0)


def test_bootstrap_ci_other_stat_and_bad_input():
    # a stat without an axis argument still works (row-by-row fallback)
    p, lo, hi = bootstrap_ci([1, 2, 3, 4, 5], stat=lambda v: float(np.mean(v)), n_resamples=200)
    assert p == 3.0 and 1.0 <= lo <= 3.0 <= hi <= 5.0
    with pytest.raises(ValueError):
        bootstrap_ci([])


def test_the_copy_bandwidth_reference_splits_each_copy_over_every_thread(monkeypatch):
    """02's CPU bandwidth reference splits one copy into one part per thread (decode uses every core): each timed
    copy moves the whole array once, in ``threads`` non-empty parts, and the rate counts a read and a write."""
    import threading

    from specdec_helpers.measure import phases

    for threads in (1, 2, 3):
        parts, workers, real_copy = [], set(), phases.np.copyto

        def spy(dst, src):
            parts.append(src.size)
            workers.add(threading.get_ident())
            real_copy(dst, src)

        monkeypatch.setattr(phases.np, "copyto", spy)
        gb_s = phases.copy_bandwidth_gb_s(megabytes=8, repeats=2, threads=threads)
        monkeypatch.setattr(phases.np, "copyto", real_copy)
        elements = 8 * (1 << 20) // 8
        copies = [parts[i:i + threads] for i in range(0, len(parts), threads)]
        assert len(copies) == 3  # the untimed first copy and the two timed ones
        assert all(len(c) == threads and sum(c) == elements and min(c) > 0 for c in copies), copies
        assert threading.get_ident() not in workers  # copied by the pool's threads, not the caller
        assert math.isfinite(gb_s) and gb_s > 0


def test_the_verify_cost_interval_is_a_paired_bca_over_whole_rounds():
    """02's v(n): rounds whose passes cost 1 + 0.1 (n - 1) decode steps with noise; the BCa interval (scipy's, not
    ours) resamples whole rounds, holds the point, narrows with more rounds, and v(1) is exactly 1."""
    import pandas as pd

    from specdec_helpers.measure import phases

    def table(rounds: int, seed: int = 3) -> pd.DataFrame:
        rng = np.random.default_rng(seed)
        rows = []
        for repeat in range(rounds):
            step = 0.1 * rng.lognormal(0, 0.05)
            for n in (1, 2, 8):
                base = 0.05 + 0.1 * (1 + 0.1 * (n - 1))
                rows.append({"n": n, "repeat": repeat, "engine_s": base * rng.lognormal(0, 0.05),
                             "decode_step_s": step})
        return pd.DataFrame(rows)

    small, large = phases.summarize_verify_cost(table(11)), phases.summarize_verify_cost(table(60))
    assert small.loc[1, ["v", "ci_low", "ci_high"]].tolist() == [1.0, 1.0, 1.0]
    for summary in (small, large):
        assert (summary["ci_low"] <= summary["v"]).all() and (summary["v"] <= summary["ci_high"]).all()
        assert summary.loc[8, "ci_low"] < summary.loc[8, "ci_high"]
    assert 1.3 < large.loc[8, "v"] < 2.1
    width = lambda s: s.loc[8, "ci_high"] - s.loc[8, "ci_low"]  # noqa: E731
    assert width(large) < width(small)
    assert phases.summarize_verify_cost(table(11)).equals(small)  # seeded: the same table gives the same interval
