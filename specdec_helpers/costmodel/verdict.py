"""The words and thresholds the series' rules share: the four readings of a speedup, ``MIN_GAIN`` (the notebooks'
``min_gain`` default), a point's side of 1 + min_gain (``decision_side``) and how a speedup is written
(``interval_text``). The rules themselves (``speedup_reading``, ``measured_reliably``, 07's ``decide``...) are defined
in the notebooks and exported to :mod:`specdec_helpers.costmodel.rules` by ``make rules``, which imports from here
(so this module never imports that one)."""

from __future__ import annotations

import math

#: a gain smaller than this is not worth a second model, its memory and its start-up (notebooks' ``min_gain``)
MIN_GAIN = 0.05
FASTER, SMALL_GAIN, NOT_DISTINGUISHABLE, SLOWER = ("faster", "faster, but by less than min_gain",
                                                  "not distinguishable from 1x", "slower")


def decision_side(speedup: float, min_gain: float = MIN_GAIN) -> str:
    """The side of the rule's thresholds a speedup lies on, without its interval (a run's point vs a reference's)."""
    return "a loss" if speedup < 1.0 else "a gain too small" if speedup <= 1.0 + min_gain else "a gain"


def interval_text(point: float, low: float, high: float, n: int, lowest: float, highest: float) -> str:
    """How a speedup is written: with its 95% interval where there is one, else as the range of its n values."""
    if math.isfinite(low) and math.isfinite(high):
        return f"{point:.2f}x (95% interval {low:.2f}-{high:.2f}, {n} prompts)"
    return f"{point:.2f}x (range of {n} prompt(s): {lowest:.2f}-{highest:.2f}; too few for an interval)"
