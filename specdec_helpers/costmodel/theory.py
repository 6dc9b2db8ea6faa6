"""The cost model of speculative decoding, with measured costs as inputs.

Speculative decoding (Leviathan, Kalman & Matias 2023; Chen et al. 2023) lets a cheap draft
model propose ``k`` tokens (the papers call it gamma), then runs the target model once over them.
The target keeps the longest prefix it agrees with and always adds one token of its own, so a
target pass yields between 1 and ``k + 1`` tokens.

Symbols used throughout (one notation across the series):

``k``
    draft tokens proposed per step (vLLM's ``num_speculative_tokens``; the papers' gamma).
    ``k = 0`` means "do not speculate".
``alpha``
    per-token acceptance probability, assumed the same at every position and independent
    (the papers' simplification; real acceptance falls with position, see
    :func:`alpha_from_per_position`).
``E(alpha, k)``
    expected tokens per target pass, ``(1 - alpha**(k+1)) / (1 - alpha)``
    (:func:`expected_tokens_per_pass`; vLLM's *mean acceptance length*).
``c``
    cost of one draft forward step divided by the cost of one target decode step.
``v(k)``
    cost of the target pass that checks ``k`` drafted tokens, divided by the cost of one
    target decode step. That pass processes ``k + 1`` token positions (the ``k`` drafts plus
    the position whose logits give the bonus/correction token), so ``v(0) = 1`` is a plain
    decode step. A :class:`VerifyCost` is a measured curve indexed by *positions* (what a
    benchmark that times "a forward over n tokens" measures): ``v(k) = VerifyCost(k + 1)``.
``f`` (coverage)
    share of decode steps that carried a draft. A draft model proposes at every step
    (``f = 1``); n-gram prompt lookup proposes only when the recent text repeats earlier text.

One speculative step therefore costs ``k * c + v(k)`` decode steps and yields ``E`` tokens.

The papers assume the verify pass costs one decode step (``v = 1``), which is close to true on
a GPU at small batch, where decoding is memory-bound and extra positions are nearly free. On a
CPU, or on a GPU at high concurrency, a forward over more tokens costs more, and that is the
main reason speculation can stop paying. So ``v`` is a measured input here, not a constant.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Union

import numpy as np
import pandas as pd

__all__ = [
    "expected_tokens_per_pass",
    "alpha_from_mean_acceptance_length",
    "alpha_from_per_position",
    "VerifyCost",
    "predicted_speedup",
    "predicted_speedup_with_coverage",
    "best_k",
    "speedup_table",
    "concurrency_speedup",
    "break_even_alpha",
]

# Bisection on [0, 1] to this width gives alpha to well beyond the precision of any measurement.
_BISECT_TOL = 1e-12
_BISECT_MAX_ITER = 200


# ---------------------------------------------------------------------------------------------
# validation helpers: plain messages, because these are read by learners in a notebook
# ---------------------------------------------------------------------------------------------
def _check_alpha(alpha: float) -> float:
    try:
        a = float(alpha)
    except (TypeError, ValueError):
        raise ValueError(f"alpha must be a number between 0 and 1, got {alpha!r}") from None
    if not (0.0 <= a <= 1.0):  # also rejects NaN
        raise ValueError(f"alpha must be between 0 and 1 (an acceptance probability), got {alpha!r}")
    return a


def _check_k(k: int, minimum: int = 0, name: str = "k (draft tokens per step)") -> int:
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)):
        if isinstance(k, (float, np.floating)) and float(k).is_integer():
            k = int(k)
        else:
            raise ValueError(f"{name} must be a whole number, got {k!r}")
    g = int(k)
    if g < minimum:
        raise ValueError(f"{name} must be at least {minimum}, got {k!r}")
    return g


def _check_c(c: float) -> float:
    try:
        cf = float(c)
    except (TypeError, ValueError):
        raise ValueError(f"c (draft cost / target cost) must be a number, got {c!r}") from None
    if not (cf >= 0.0) or math.isinf(cf):
        raise ValueError(f"c (draft step cost / target step cost) must be >= 0 and finite, got {c!r}")
    return cf


# ---------------------------------------------------------------------------------------------
# tokens per target pass, and recovering alpha from what vLLM reports
# ---------------------------------------------------------------------------------------------
def expected_tokens_per_pass(alpha: float, k: int) -> float:
    """Expected tokens produced per target forward pass: ``(1 - alpha**(k+1)) / (1 - alpha)``.

    Why this form: the i-th draft token survives only if it and all before it are accepted
    (probability ``alpha**i``), and the target always contributes one token, so
    ``E = 1 + alpha + ... + alpha**k``, a geometric sum. At ``alpha = 1`` the closed form is
    0/0; the limit is ``k + 1`` (every draft accepted plus the bonus token), and near 1 we sum
    the series directly to avoid cancellation.

    This is the quantity vLLM calls *mean acceptance length* (``1 + accepted / drafts``).
    """
    a = _check_alpha(alpha)
    g = _check_k(k)
    if a > 1.0 - 1e-6:
        # direct sum: exact at alpha=1 and free of cancellation just below it
        return float(sum(a**i for i in range(g + 1)))
    return (1.0 - a ** (g + 1)) / (1.0 - a)


def alpha_from_mean_acceptance_length(mal: float, k: int) -> float:
    """Per-token ``alpha`` whose :func:`expected_tokens_per_pass` equals a measured mean
    acceptance length ``mal`` at draft length ``k``.

    Why: vLLM reports mean acceptance length (``1 + accepted / drafts``), but the cost model
    and comparisons across different ``k`` need a per-token rate. ``E`` is strictly
    increasing in ``alpha`` on [0, 1] (from 1 to ``k + 1``), so bisection finds the unique
    root. Assumes every draft had ``k`` tokens (true for a draft model; n-gram drafts can be
    shorter, which makes this an underestimate).
    """
    g = _check_k(k, minimum=1)
    try:
        m = float(mal)
    except (TypeError, ValueError):
        raise ValueError(f"mean acceptance length must be a number, got {mal!r}") from None
    if not (1.0 <= m <= g + 1):
        raise ValueError(
            f"mean acceptance length must be between 1 and k+1 = {g + 1}, got {mal!r}"
        )
    if m == 1.0:
        return 0.0
    if m == g + 1:
        return 1.0
    lo, hi = 0.0, 1.0
    for _ in range(_BISECT_MAX_ITER):
        mid = 0.5 * (lo + hi)
        if expected_tokens_per_pass(mid, g) < m:
            lo = mid
        else:
            hi = mid
        if hi - lo < _BISECT_TOL:
            break
    return 0.5 * (lo + hi)


def alpha_from_per_position(rates: Iterable[float]) -> float:
    """Per-token ``alpha`` from vLLM's per-position acceptance rates, by least squares.

    ``rates[0]`` is the fraction of drafts whose 1st draft token was accepted, ``rates[1]`` the
    2nd, and so on (vLLM: ``num_accepted_tokens_per_pos[i] / num_drafts``; position ``i`` is
    0-based there). A token at position ``i`` (1-based) is counted only if all earlier ones were
    accepted, so the geometric model predicts ``rates[i-1] = alpha**i``.

    Method: the ``alpha`` in [0, 1] minimising ``sum_i (alpha**i - rates[i-1])**2`` over
    ``i = 1..k`` (a dense grid, then golden-section refinement inside the best grid cell).
    We fit the curve rather than take the simple estimate ``rates[0]`` because real acceptance
    usually falls with position faster than geometric; the fit gives the single ``alpha`` that
    best reproduces the whole curve, which is what :func:`expected_tokens_per_pass` consumes.
    Compare ``rates`` with ``alpha**i`` to see how far from geometric your draft is.
    """
    r = np.asarray(list(rates), dtype=float)
    if r.ndim != 1 or r.size == 0:
        raise ValueError("rates must be a non-empty list of per-position acceptance rates")
    if not np.all(np.isfinite(r)) or np.any(r < 0.0) or np.any(r > 1.0):
        raise ValueError(f"per-position rates must each be between 0 and 1, got {list(r)}")
    powers = np.arange(1, r.size + 1, dtype=float)

    def sse(a: float) -> float:
        return float(np.sum((a**powers - r) ** 2))

    grid = np.linspace(0.0, 1.0, 1001)
    errs = np.sum((grid[:, None] ** powers[None, :] - r[None, :]) ** 2, axis=1)
    j = int(np.argmin(errs))
    lo, hi = grid[max(j - 1, 0)], grid[min(j + 1, grid.size - 1)]
    # golden-section search inside the bracket around the best grid point
    inv_phi = (math.sqrt(5.0) - 1.0) / 2.0
    x1, x2 = hi - inv_phi * (hi - lo), lo + inv_phi * (hi - lo)
    f1, f2 = sse(x1), sse(x2)
    for _ in range(_BISECT_MAX_ITER):
        if hi - lo < _BISECT_TOL:
            break
        if f1 <= f2:
            hi, x2, f2 = x2, x1, f1
            x1 = hi - inv_phi * (hi - lo)
            f1 = sse(x1)
        else:
            lo, x1, f1 = x1, x2, f2
            x2 = lo + inv_phi * (hi - lo)
            f2 = sse(x2)
    best = 0.5 * (lo + hi)
    # the grid endpoint may beat the interior (e.g. all rates 0 or 1)
    candidates = [(sse(best), best), (float(errs[j]), float(grid[j]))]
    return float(min(candidates)[1])


# ---------------------------------------------------------------------------------------------
# measured costs
# ---------------------------------------------------------------------------------------------
class _PiecewiseLinear:
    """Linear interpolation between measured points, linear extrapolation beyond the last two.

    Shared by :class:`VerifyCost` and :func:`concurrency_speedup`: both need a cost at sizes we
    did not measure, and straight lines are the least surprising guess.
    """

    def __init__(self, points: Mapping[float, float], what: str) -> None:
        if not points:
            raise ValueError(f"{what}: need at least one measured point")
        xs, ys = [], []
        for x, y in sorted((float(k), float(v)) for k, v in points.items()):
            if not (math.isfinite(x) and x >= 1):
                raise ValueError(f"{what}: sizes must be >= 1, got {x!r}")
            if not (math.isfinite(y) and y > 0):
                raise ValueError(f"{what}: costs must be positive numbers, got {y!r} at {x:g}")
            xs.append(x)
            ys.append(y)
        self.xs = np.asarray(xs)
        self.ys = np.asarray(ys)
        self.what = what

    def __call__(self, x: float) -> float:
        x = float(x)
        if not (math.isfinite(x) and x >= 1):
            raise ValueError(f"{self.what}: size must be >= 1, got {x!r}")
        xs, ys = self.xs, self.ys
        if xs.size == 1:
            return float(ys[0])
        if x < xs[0]:
            # below the first measurement: extend the first segment, kept positive
            slope = (ys[1] - ys[0]) / (xs[1] - xs[0])
            return float(max(ys[0] + slope * (x - xs[0]), np.min(ys)))
        if x <= xs[-1]:
            return float(np.interp(x, xs, ys))
        slope = (ys[-1] - ys[-2]) / (xs[-1] - xs[-2])
        # a noisy falling last segment must not extrapolate to zero or negative cost
        return float(max(ys[-1] + slope * (x - xs[-1]), np.min(ys)))



class VerifyCost:
    """Measured cost of one target forward pass over ``n`` positions, relative to a decode step.

    Built from ``{n: ratio}`` where ``ratio = time(forward over n tokens) / time(decode step)``,
    so ``n = 1`` is 1.0 by definition (added if missing; an empty mapping is an error, since it
    is more likely a lost measurement than a claim that verifying is free: say
    :meth:`VerifyCost.free` for that). Between measured ``n`` it interpolates
    linearly; beyond the largest it extrapolates the line through the last two points (never
    below the smallest measured ratio, so noise cannot produce a free or negative pass).

    ``n`` counts positions processed: the pass that checks ``k`` drafted tokens processes
    ``n = k + 1`` positions, so the series' ``v(k)`` is ``VerifyCost(k + 1)``. Example
    (SmolLM2-135M on one CPU core): ``VerifyCost({1: 1.0, 2: 1.6, 4: 2.1, 8: 2.3})``.
    """

    def __init__(self, ratios: Mapping[int, float]) -> None:
        points = dict(ratios)
        if not points:
            raise ValueError("VerifyCost needs at least one measured {positions: ratio}; "
                             "use VerifyCost.free() for v(k) = 1")
        if 1 not in points and 1.0 not in points:
            points[1] = 1.0
        self._ratios = {int(n) if float(n).is_integer() else float(n): float(v) for n, v in points.items()}
        self._curve = _PiecewiseLinear(self._ratios, "VerifyCost")

    @classmethod
    def free(cls) -> "VerifyCost":
        """The papers' idealisation ``v(k) = 1``: extra positions cost nothing.

        Close to true on a GPU at small batch, where a decode step is limited by reading the
        weights and a few more positions ride along for free.
        """
        return cls({1: 1.0})

    @classmethod
    def from_times(cls, times: Mapping[int, float]) -> "VerifyCost":
        """Build from raw seconds ``{n: time of a forward over n tokens}``; needs ``n = 1``."""
        if 1 not in times:
            raise ValueError("from_times needs the time of a plain decode step (n=1 position) to normalise by")
        base = float(times[1])
        if not (base > 0):
            raise ValueError(f"time at n=1 must be positive, got {times[1]!r}")
        return cls({n: float(t) / base for n, t in times.items()})

    @property
    def ratios(self) -> dict:
        """The measured points, ``{n: ratio}``, sorted by ``n`` (positions processed)."""
        return dict(sorted(self._ratios.items()))

    def __call__(self, n: float) -> float:
        """Cost of a forward over ``n`` positions; ``v(k)`` is ``self(k + 1)``."""
        return self._curve(n)

    def __repr__(self) -> str:
        return f"VerifyCost({self.ratios!r})"


VerifyLike = Union[VerifyCost, float, int, None]


def _verify_cost(verify: VerifyLike, k: int) -> float:
    """``v(k)``, the pass that checks ``k`` drafts, for any accepted form of ``verify``.

    None -> 1 (the papers' free verification); a :class:`VerifyCost` or any callable is
    called with the ``k + 1`` positions the pass processes; a number is used as is.
    """
    if verify is None:
        return 1.0
    if isinstance(verify, VerifyCost):
        return verify(k + 1)
    if callable(verify):
        return float(verify(k + 1))
    v = float(verify)
    if not (v > 0 and math.isfinite(v)):
        raise ValueError(f"verify cost must be a positive number, got {verify!r}")
    return v


# ---------------------------------------------------------------------------------------------
# the speedup model
# ---------------------------------------------------------------------------------------------
def predicted_speedup(alpha: float, k: int, c: float, verify: VerifyLike = None) -> float:
    """Predicted decode speedup over plain decoding: ``E(alpha, k) / (k * c + v(k))``.

    Why: one speculative step costs ``k`` draft steps (``k * c`` decode steps) plus one verify
    pass that checks the ``k`` drafts (``v(k)`` decode steps) and yields ``E`` tokens on
    average, while plain decoding yields 1 token per decode step. Every step carries a draft
    here (coverage 1); :func:`predicted_speedup_with_coverage` is the general form.

    ``verify``: a :class:`VerifyCost` (measured per position; called with ``k + 1``
    positions), a number (``v(k)`` at this ``k``, used as is), or None for the papers'
    ``v = 1``, which gives Leviathan et al.'s ``E / (k * c + 1)``. ``k = 0`` gives exactly 1.0
    (no speculation) when ``verify`` is None or a VerifyCost.
    """
    return predicted_speedup_with_coverage(alpha, k, c, verify, 1.0)


def _check_coverage(coverage: float) -> float:
    try:
        f = float(coverage)
    except (TypeError, ValueError):
        raise ValueError(f"coverage must be a number between 0 and 1, got {coverage!r}") from None
    if not 0.0 <= f <= 1.0:  # also rejects NaN
        raise ValueError(f"coverage must be between 0 and 1 (a share of decode steps), got {coverage!r}")
    return f


def predicted_speedup_with_coverage(alpha: float, k: int, c: float, verify: VerifyLike = None,
                                    coverage: float = 1.0) -> float:
    """Predicted decode speedup when only a share ``f = coverage`` of decode steps carries a draft.

    Coverage ``f`` is the share of decode steps that carried a draft (one definition across the
    series; :func:`specdec_helpers.evaluate.draft_coverage` measures it from vLLM's counters).
    Prompt lookup (n-gram) proposes tokens only when the recent text matches earlier text; the
    other steps are plain one-token decode steps at cost 1. A draft model proposes at every step
    (``f = 1``), which gives back :func:`predicted_speedup`. Averaged over decode steps::

        time per decode step   = f * (k * c + v(k)) + (1 - f) * 1      (in plain decode steps)
        tokens per decode step = f * E(alpha, k)    + (1 - f) * 1
        speedup                = tokens per step / time per step

    Example: alpha = 0.8, k = 4, c = 0, v = 1 (n-gram on a GPU at small batch) predicts 3.36x at
    ``f = 1`` but ``(0.2 * 3.3616 + 0.8) / 1 = 1.47x`` when only 20% of steps find a match.
    """
    f = _check_coverage(coverage)
    a, g, cf = _check_alpha(alpha), _check_k(k), _check_c(c)
    e = expected_tokens_per_pass(a, g)
    step = g * cf + _verify_cost(verify, g)
    return (f * e + (1.0 - f)) / (f * step + (1.0 - f))


def best_k(alpha: float, c: float, verify: VerifyLike = None, max_k: int = 10,
           coverage: float = 1.0) -> tuple[int, float]:
    """The draft length in ``0..max_k`` with the highest predicted speedup at this coverage.

    Returns ``(k, speedup)`` from :func:`predicted_speedup_with_coverage`; ``(0, 1.0)`` means
    "do not speculate" (nothing beats plain decoding). Coverage matters: with n-gram lookup
    that drafts on few steps, a long ``k`` that looks good per drafted step buys little per
    decode step, and the prediction must say so (a prediction of 2.2x next to a measured 1.0x
    is what ignoring it gives). Searched exhaustively: the range is small and the curve need
    not be unimodal once ``v(k)`` is measured. Ties go to the smaller ``k`` (less work for the
    same gain).
    """
    _check_alpha(alpha)
    _check_c(c)
    _check_coverage(coverage)
    m = _check_k(max_k, name="max_k")
    best = (0, 1.0)
    for g in range(1, m + 1):
        s = predicted_speedup_with_coverage(alpha, g, c, verify, coverage)
        if s > best[1] + 1e-12:
            best = (g, s)
    return best


def speedup_table(
    alphas: Iterable[float],
    ks: Iterable[int],
    c: float | Iterable[float],
    verify: VerifyLike = None,
    coverage: float = 1.0,
) -> pd.DataFrame:
    """Tidy grid of the model: one row per (alpha, k, c).

    Columns: ``alpha, k, c, E, verify_cost, predicted_speedup`` (``verify_cost`` is the
    ``v(k)`` used). Tidy so a notebook can plot it with seaborn (hue="k") or pivot it.
    ``c`` may be one number or several; ``coverage`` applies to every row.
    """
    cs = [c] if np.isscalar(c) else list(c)
    rows = []
    for cf in cs:
        for a in alphas:
            for g in ks:
                g = _check_k(g)
                rows.append(
                    {
                        "alpha": float(a),
                        "k": g,
                        "c": float(cf),
                        "E": expected_tokens_per_pass(a, g),
                        "verify_cost": _verify_cost(verify, g),
                        "predicted_speedup": predicted_speedup_with_coverage(a, g, cf, verify, coverage),
                    }
                )
    return pd.DataFrame(rows, columns=["alpha", "k", "c", "E", "verify_cost", "predicted_speedup"])


def concurrency_speedup(
    alpha: float,
    k: int,
    c: float,
    step_time_at_batch: Mapping[int, float],
    batch: int,
    coverage: float = 1.0,
) -> float:
    """Predicted speedup when ``batch`` sequences decode together: why speculation fades with load.

    ``step_time_at_batch`` maps a number of tokens processed in one target forward to its
    measured time (a plain decode step of ``b`` sequences processes ``b`` tokens); it is
    interpolated linearly and extrapolated from the last two points, like :class:`VerifyCost`.

    Model, with ``t`` the step time and ``f = coverage`` as in
    :func:`predicted_speedup_with_coverage`::

        time per step   = f * (k * c * t(b) + t(b * (k + 1))) + (1 - f) * t(b)
        tokens per step = f * E(alpha, k) + (1 - f)            (per sequence)
        speedup(b)      = tokens per step * t(b) / time per step

    At ``f = 1``: ``E * t(b) / (k * c * t(b) + t(b * (k + 1)))``.

    Assumptions, kept deliberately simple:
    - plain decoding makes 1 token per sequence per step of time ``t(b)``;
    - the draft's step at batch ``b`` costs ``c * t(b)``: its cost grows with batch the way
      the target's does;
    - verifying ``k + 1`` positions for each of ``b`` sequences costs one target forward
      over ``b * (k + 1)`` tokens, i.e. what a decode step at that token batch costs
      (ignores differences in attention work and scheduling);
    - every sequence has the same ``alpha`` and the same coverage; rejected positions still
      cost compute.

    At small ``b`` the target is memory-bound, ``t(b*(k+1))`` is close to ``t(b)`` and
    speculation pays; once the batch already saturates compute, ``t`` grows linearly and the
    extra ``k`` positions per sequence are paid in full. With ``batch = 1`` this equals
    :func:`predicted_speedup_with_coverage` with ``v(k) = t(k + 1) / t(1)``.
    """
    a = _check_alpha(alpha)
    g = _check_k(k)
    cf = _check_c(c)
    f = _check_coverage(coverage)
    b = _check_k(batch, minimum=1, name="batch (concurrent sequences)")
    t = _PiecewiseLinear(step_time_at_batch, "step_time_at_batch")
    e = expected_tokens_per_pass(a, g)
    tb = t(b)
    step = f * (g * cf * tb + t(b * (g + 1))) + (1.0 - f) * tb
    return (f * e + (1.0 - f)) * tb / step


def break_even_alpha(k: int, c: float, verify: VerifyLike = None, coverage: float = 1.0) -> float:
    """The per-token acceptance at which the predicted speedup equals 1 (bisection).

    Why: it turns the cost side (``c``, ``v``) into one number to compare with a measured
    acceptance: below it, this ``k`` makes decoding slower. Speedup rises monotonically with
    ``alpha``, so the root is unique. Coverage does not move the break-even point (a step
    without a draft costs and yields exactly 1) unless it is 0, where every alpha breaks even.
    Returns 0.0 if speculation already breaks even at ``alpha = 0`` (only when it costs
    nothing), and ``nan`` if it cannot break even even with every draft accepted (costs too
    high for this ``k``).
    """
    g = _check_k(k, minimum=1)
    cf = _check_c(c)
    f = _check_coverage(coverage)

    def speedup(a: float) -> float:
        return predicted_speedup_with_coverage(a, g, cf, verify, f)

    if speedup(0.0) >= 1.0:
        return 0.0
    if speedup(1.0) < 1.0:
        return float("nan")
    lo, hi = 0.0, 1.0
    for _ in range(_BISECT_MAX_ITER):
        mid = 0.5 * (lo + hi)
        if speedup(mid) < 1.0:
            lo = mid
        else:
            hi = mid
        if hi - lo < _BISECT_TOL:
            break
    return 0.5 * (lo + hi)
