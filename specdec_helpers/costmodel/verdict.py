"""The series' rules from measured numbers to words: a speedup with its interval to "faster", "slower" or no verdict
(``speedup_reading``, defined in notebook 04 where it is first used), a point to its side of 1 + min_gain
(``decision_side``), and how a speedup is written. Notebook 07 writes the verdict and its reasons with them (its ``decide`` cell)."""

from __future__ import annotations

import math

from specdec_helpers.stats import MIN_VALUES_FOR_INTERVAL

#: a gain smaller than this is not worth a second model, its memory and its start-up (notebooks' ``min_gain``)
MIN_GAIN = 0.05
FASTER, SMALL_GAIN, NOT_DISTINGUISHABLE, SLOWER = ("faster", "faster, but by less than min_gain",
                                                  "not distinguishable from 1x", "slower")


def speedup_reading(point: float, low: float, high: float, n: int, min_gain: float = MIN_GAIN) -> str:
    """The series' one rule from a measured speedup (the median over n prompts, with its 95% interval) to words.
    Notebook 04 defines it (a test runs both); 05 and 07 apply it. Only FASTER means "enable it".

    - no interval (fewer than ``stats.MIN_VALUES_FOR_INTERVAL`` prompts): no verdict, only the range;
    - the whole interval above 1 + min_gain: FASTER;
    - the whole interval below 1: SLOWER;
    - above 1 but not by min_gain: SMALL_GAIN (real, yet not worth a second model);
    - otherwise the run cannot tell it from 1x: NOT_DISTINGUISHABLE."""
    if not math.isfinite(point):
        return "not measured"
    if n < MIN_VALUES_FOR_INTERVAL or not (math.isfinite(low) and math.isfinite(high)):
        return f"no verdict: {n} prompt(s), an interval needs {MIN_VALUES_FOR_INTERVAL}"
    if low > 1.0 + min_gain:
        return FASTER
    if high < 1.0:
        return SLOWER
    if low > 1.0:
        return SMALL_GAIN
    return NOT_DISTINGUISHABLE


#: notebook 04's floor for a reliable in-server c: a proposer cannot cost less than nothing, and a median c this far
#: below 0 is a server whose steps are faster than the baseline's, not timing noise around a free proposer
C_FLOOR = -0.1


def measured_reliably(n_kept: int, n_flagged: int, min_pairs: int, c_in_server: float | None = math.nan) -> bool:
    """Notebook 04's rule (a test runs both) for whether a candidate's pairs can decide anything (a pick, a rank, a
    verdict): at least ``min_pairs`` pairs kept by the physics guard, fewer flagged than kept, and an in-server c (the
    median over the kept pairs; NaN where none drafted) not below ``C_FLOOR``. A candidate whose pairs mostly broke
    the bound was measured on a server that differs from its baseline by more than speculation explains; whatever
    pairs survive are the luckiest, not a sample."""
    cheap_beyond_physics = c_in_server is not None and float(c_in_server) < C_FLOOR  # NaN: nothing drafted
    return int(n_kept) >= int(min_pairs) and int(n_flagged) < int(n_kept) and not cheap_beyond_physics


def decision_side(speedup: float, min_gain: float = MIN_GAIN) -> str:
    """The side of the rule's thresholds a speedup lies on, without its interval (a run's point vs a reference's)."""
    return "a loss" if speedup < 1.0 else "a gain too small" if speedup <= 1.0 + min_gain else "a gain"


def interval_text(point: float, low: float, high: float, n: int, lowest: float, highest: float) -> str:
    """How a speedup is written: with its 95% interval where there is one, else as the range of its n values."""
    if math.isfinite(low) and math.isfinite(high):
        return f"{point:.2f}x (95% interval {low:.2f}-{high:.2f}, {n} prompts)"
    return f"{point:.2f}x (range of {n} prompt(s): {lowest:.2f}-{highest:.2f}; too few for an interval)"
