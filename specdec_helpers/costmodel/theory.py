"""The cost model of speculative decoding, with measured costs as inputs (notation: docs/glossary.md).

A speculative step costs ``k * c + v(k + 1)`` target decode steps and yields ``E(alpha, k)`` tokens. The papers
(Leviathan et al. 2023; Chen et al. 2023) take ``v = 1``, near true on a GPU at small batch; on a CPU or at high
concurrency extra positions cost, so ``v`` is measured (:class:`VerifyCost`: ``v(n)``, a pass over n positions;
checking k drafts is ``v(k + 1)``)."""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable, Iterable, Mapping
from functools import partial

import numpy as np

from specdec_helpers.costmodel import rules

# alpha is searched on a grid of 2**-40 (about 1e-12): far beyond the precision of any measurement
_GRID = 2**40


def _number(x: object, not_number: str, ok: Callable[[float], bool], out_of_range: str) -> float:
    """``float(x)``, or a ValueError in plain words: learners read these in a notebook."""
    try:
        f = float(x)
    except (TypeError, ValueError):
        raise ValueError(f"{not_number}, got {x!r}") from None
    if not ok(f):  # every comparison with NaN is False: rejected too
        raise ValueError(f"{out_of_range}, got {x!r}")
    return f


_check_alpha = partial(_number, not_number="alpha must be a number between 0 and 1", ok=lambda a: 0.0 <= a <= 1.0,
                       out_of_range="alpha must be between 0 and 1 (an acceptance probability)")
_check_coverage = partial(_number, not_number="coverage must be a number between 0 and 1", ok=lambda f: 0 <= f <= 1,
                          out_of_range="coverage must be between 0 and 1 (a share of decode steps)")
_check_c = partial(_number, not_number="c (draft cost / target cost) must be a number", ok=lambda x: 0 <= x < math.inf,
                   out_of_range="c (draft step cost / target step cost) must be >= 0 and finite")


def _check_k(k: int, minimum: int = 0, name: str = "k (draft tokens per step)") -> int:
    if isinstance(k, bool) or not (isinstance(k, (int, np.integer, float, np.floating)) and float(k).is_integer()):
        raise ValueError(f"{name} must be a whole number, got {k!r}")
    if int(k) < minimum:
        raise ValueError(f"{name} must be at least {minimum}, got {k!r}")
    return int(k)


def expected_tokens_per_pass(alpha: float, k: int) -> float:
    """``E = 1 + alpha + ... + alpha**k`` (vLLM's mean acceptance length): notebook 01's rule, its inputs checked."""
    return float(rules.expected_tokens_per_pass(_check_alpha(alpha), _check_k(k)))


def alpha_from_mean_acceptance_length(mal: float | None, k: int, clip: bool = False) -> float:
    """The per-token ``alpha`` whose ``E(alpha, k)`` is a measured mean acceptance length; not vLLM's rate: later
    positions are reached only if all earlier ones were accepted. Assumes k-token drafts (shorter n-gram drafts: an
    underestimate). ``clip``: ``mal`` clipped into [1, k + 1], and NaN for an unknown one or ``k < 1``."""
    if clip and (mal is None or not math.isfinite(float(mal)) or k < 1):
        return math.nan
    if clip:
        mal = min(max(float(mal), 1.0), k + 1.0)
    g = _check_k(k, minimum=1)
    m = _number(mal, "mean acceptance length must be a number", lambda m: 1.0 <= m <= g + 1,
                f"mean acceptance length must be between 1 and k+1 = {g + 1}")
    if m == g + 1:  # every draft accepted (near alpha = 1 the closed form loses digits to cancellation)
        return 1.0
    # the smallest alpha on a grid of 2**-40 whose E reaches m (E rises with alpha)
    return bisect.bisect_left(range(_GRID + 1), m, key=lambda i: expected_tokens_per_pass(i / _GRID, g)) / _GRID


def alpha_from_per_position(rates: Iterable[float]) -> float:
    """The ``alpha`` of the geometric model ``rates[i-1] = alpha**i`` closest (least squares) to a per-position curve;
    real acceptance usually falls faster than geometric."""
    r = np.asarray(list(rates), dtype=float)
    if r.ndim != 1 or r.size == 0:
        raise ValueError("rates must be a non-empty list of per-position acceptance rates")
    if not np.all(np.isfinite(r)) or np.any(r < 0.0) or np.any(r > 1.0):
        raise ValueError(f"per-position rates must each be between 0 and 1, got {list(r)}")
    powers = np.arange(1, r.size + 1, dtype=float)
    lo, hi = 0.0, 1.0
    for _ in range(4):  # each round narrows the bracket 500-fold
        grid = np.linspace(lo, hi, 1001)
        j = int(np.argmin(np.sum((grid[:, None] ** powers - r) ** 2, axis=1)))
        lo, hi = grid[max(j - 1, 0)], grid[min(j + 1, grid.size - 1)]
    return float(grid[j])


class _PiecewiseLinear:
    """Linear between measured points, the end segments extended (never below the smallest cost: noise)."""

    def __init__(self, points: Mapping[float, float], what: str) -> None:
        if not points:
            raise ValueError(f"{what}: need at least one measured point")
        pts = sorted((float(k), float(v)) for k, v in points.items())
        for x, y in pts:
            if not (math.isfinite(x) and x >= 1):
                raise ValueError(f"{what}: sizes must be >= 1, got {x!r}")
            if not (math.isfinite(y) and y > 0):
                raise ValueError(f"{what}: costs must be positive numbers, got {y!r} at {x:g}")
        self.points = dict(pts)  # {size: cost}, sorted
        self.what = what

    def __call__(self, x: float) -> float:
        x = float(x)
        if not (math.isfinite(x) and x >= 1):
            raise ValueError(f"{self.what}: size must be >= 1, got {x!r}")
        return float(rules.step_time(self.points, x))  # notebook 06's t(n), the one definition


class VerifyCost(_PiecewiseLinear):
    """Measured ``{n: time(forward over n positions) / time(decode step)}``; ``v(n) = self(n)``: checking k drafts
    is ``self(k + 1)``, ``n = 1`` is 1.0. Empty is an error: more likely a lost measurement than a claim that
    verifying is free."""

    def __init__(self, ratios: Mapping[int, float]) -> None:
        points = dict(ratios)
        if not points:
            raise ValueError("VerifyCost needs at least one measured {positions: ratio}; pass verify=None for v = 1")
        points.setdefault(1, 1.0)
        super().__init__(points, "VerifyCost")

    def __repr__(self) -> str:
        ratios = {int(n) if n.is_integer() else n: v for n, v in self.points.items()}
        return f"VerifyCost({ratios!r})"


VerifyLike = VerifyCost | float | int | None


def _v(verify: VerifyLike, k: int) -> float:
    """v(k + 1), the pass checking k drafts: 1 for None (the papers' free verification), else measured or given."""
    if verify is None:
        return 1.0
    if callable(verify):  # a VerifyCost: the pass checking k drafts processes k + 1 positions
        return float(verify(k + 1))
    return _number(verify, "verify cost must be a positive number", lambda v: 0 < v < math.inf,
                   "verify cost must be a positive number")


def predicted_speedup(alpha: float, k: int, c: float, verify: VerifyLike = None) -> float:
    """``E(alpha, k) / (k * c + v(k + 1))``, a draft every step: notebook 01's rule, its inputs checked;
    ``verify``: a VerifyCost, a number or None (v = 1)."""
    a, g, cf = _check_alpha(alpha), _check_k(k), _check_c(c)
    return float(rules.predicted_speedup(a, g, cf, _v(verify, g)))


def predicted_speedup_with_coverage(alpha: float, k: int, c: float, verify: VerifyLike = None,
                                    coverage: float = 1.0) -> float:
    """Predicted decode speedup when only a share ``f`` of decode steps carries a draft (n-gram lookup), the others
    being plain steps (cost 1, 1 token): ``(f * E + 1 - f) / (f * (k * c + v(k + 1)) + 1 - f)``, E notebook 01's."""
    a, g, cf, f = _check_alpha(alpha), _check_k(k), _check_c(c), _check_coverage(coverage)
    e = rules.expected_tokens_per_pass(a, g)
    return (f * e + 1.0 - f) / (f * (g * cf + _v(verify, g)) + 1.0 - f)


def c_from_step(step_ratio: float, k: int, v: float, coverage: float = 1.0) -> float:
    """The draft's cost c that a speculative server's measured decode step implies, the cost model run backwards:
    a step costs ``f * (k * c + v) + (1 - f)`` target steps, so ``c = (step_ratio - f * v - (1 - f)) / (f * k)``.
    ``step_ratio`` is the server's decode time per step over the baseline's per token, on the same prompt and time;
    the k draft steps inside one engine step pay no server overhead of their own, unlike a draft served alone.
    Not clipped: a negative c means a step cheaper than verification alone, which the physics guard flags."""
    f, g = _check_coverage(coverage), _check_k(k, minimum=1)
    if f == 0:
        return float("nan")  # no drafted step: nothing to learn about the draft's cost
    return (float(step_ratio) - f * float(v) - (1.0 - f)) / (f * g)


def break_even_alpha(k: int, c: float, verify: VerifyLike = None) -> float:
    """The per-token acceptance below which this ``k`` makes decoding slower (NaN when even ``alpha = 1`` loses):
    notebook 01's rule, its inputs checked. Coverage does not move it: plain steps neither gain nor lose."""
    g, cf = _check_k(k, minimum=1), _check_c(c)
    return float(rules.break_even_alpha(g, cf, _v(verify, g)))


def end_to_end_speedup(prefill_share: float, decode_speedup: float, prefill_cost: float = 0.0) -> float:
    """``1 / (p * (1 + c_pre) + (1 - p) / s_decode)``: a request spends ``prefill_share`` p of its time in prefill,
    which the draft lengthens by ``prefill_cost`` c_pre, and decodes ``decode_speedup`` times faster. Long prompts
    lose: as p grows, the draft's extra prefill weighs more and the decode gain less."""
    p = _number(prefill_share, "prefill_share must be a number", lambda x: 0.0 <= x <= 1.0,
                "prefill_share must lie in [0, 1]")
    s = _number(decode_speedup, "decode_speedup must be a number", lambda x: 0.0 < x < math.inf,
                "decode_speedup must be positive")
    cp = _number(prefill_cost, "prefill_cost must be a number", lambda x: -1.0 < x < math.inf,
                 "prefill_cost must be above -1")
    return 1.0 / (p * (1.0 + cp) + (1.0 - p) / s)
