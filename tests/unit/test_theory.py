"""Unit tests for specdec_helpers.costmodel.theory and the cost-model rules the notebooks export (best k: 01,
speedup at b streams: 06), against values worked out by hand in the comments."""

import math
from functools import partial

import pytest

from specdec_helpers.costmodel import rules
from specdec_helpers.costmodel.theory import (
    VerifyCost,
    alpha_from_mean_acceptance_length,
    alpha_from_per_position,
    break_even_alpha,
    expected_tokens_per_pass,
    predicted_speedup,
    predicted_speedup_with_coverage,
)

# SmolLM2-135M on one CPU core: a forward over n positions vs one decode step (keys are positions,
# so the pass that checks k drafts costs CPU_VERIFY(k + 1))
CPU_VERIFY = VerifyCost({1: 1.0, 2: 1.6, 4: 2.1, 8: 2.3})


# ---------------------------------------------------------------- expected tokens per pass
def test_expected_tokens_paper_example():
    # alpha=0.8, k=4: E = (1 - 0.8^5) / 0.2 = (1 - 0.32768) / 0.2 = 3.3616
    assert expected_tokens_per_pass(0.8, 4) == pytest.approx(3.3616)


def test_expected_tokens_is_geometric_sum():
    # alpha=0.5, k=2: 1 + 0.5 + 0.25 = 1.75
    assert expected_tokens_per_pass(0.5, 2) == pytest.approx(1.75)


def test_expected_tokens_alpha_zero_and_k_zero():
    # nothing accepted: only the target's own token
    assert expected_tokens_per_pass(0.0, 5) == 1.0
    # no drafts: one token per pass, whatever alpha
    assert expected_tokens_per_pass(0.7, 0) == pytest.approx(1.0)


def test_expected_tokens_alpha_one_limit():
    # alpha -> 1: every draft accepted plus the bonus token = k + 1
    assert expected_tokens_per_pass(1.0, 4) == 5.0
    assert expected_tokens_per_pass(1.0 - 1e-9, 4) == pytest.approx(5.0, abs=1e-6)
    # continuity across the switch between closed form and direct sum
    assert expected_tokens_per_pass(1.0 - 2e-6, 7) == pytest.approx(8.0, abs=1e-4)


@pytest.mark.parametrize("alpha,k", [(-0.1, 3), (1.1, 3), (float("nan"), 3), (0.5, -1), (0.5, 2.5), ("x", 3)])
def test_expected_tokens_bad_input(alpha, k):
    with pytest.raises(ValueError):
        expected_tokens_per_pass(alpha, k)


# ---------------------------------------------------------------- alpha from vLLM metrics
def test_alpha_from_mean_acceptance_length_roundtrip():
    # mal 3.3616 at k=4 is alpha 0.8 (above); 1.75 at k=2 is alpha 0.5
    assert alpha_from_mean_acceptance_length(3.3616, 4) == pytest.approx(0.8, abs=1e-9)
    assert alpha_from_mean_acceptance_length(1.75, 2) == pytest.approx(0.5, abs=1e-9)
    # k=1: E = 1 + alpha, so mal 1.3 -> 0.3
    assert alpha_from_mean_acceptance_length(1.3, 1) == pytest.approx(0.3, abs=1e-9)
    assert alpha_from_mean_acceptance_length(1.0, 3) == 0.0
    assert alpha_from_mean_acceptance_length(4.0, 3) == 1.0


def test_alpha_from_mean_acceptance_length_clipped_inverts_expected_tokens():
    # the example: rate 0.186 with mean acceptance length 1.74 at k = 4 is alpha of about 0.43
    alpha = alpha_from_mean_acceptance_length(1.74, 4, clip=True)
    assert alpha == pytest.approx(0.43, abs=0.01)
    assert expected_tokens_per_pass(alpha, 4) == pytest.approx(1.74)
    assert math.isnan(alpha_from_mean_acceptance_length(float("nan"), 4, clip=True))
    assert alpha_from_mean_acceptance_length(9.0, 4, clip=True) == pytest.approx(1.0)  # clipped to k + 1


@pytest.mark.parametrize("mal,k", [(0.9, 3), (4.5, 3), (2.0, 0)])
def test_alpha_from_mean_acceptance_length_bad_input(mal, k):
    with pytest.raises(ValueError):
        alpha_from_mean_acceptance_length(mal, k)


def test_alpha_from_per_position_exact_geometric():
    # 0.8, 0.64, 0.512 = 0.8^1, 0.8^2, 0.8^3
    assert alpha_from_per_position([0.8, 0.64, 0.512]) == pytest.approx(0.8, abs=1e-6)
    # one position: the fit is the rate itself
    assert alpha_from_per_position([0.37]) == pytest.approx(0.37, abs=1e-6)


def test_alpha_from_per_position_least_squares():
    # rates fall faster than geometric: the fit lies between the last-position-implied
    # alpha (0.05^(1/3) = 0.368) and the first rate (0.5), and minimises squared error
    rates = [0.5, 0.2, 0.05]
    a = alpha_from_per_position(rates)
    assert 0.368 < a < 0.5

    def sse(x):
        return sum((x ** (i + 1) - r) ** 2 for i, r in enumerate(rates))

    assert sse(a) <= sse(a + 1e-3) and sse(a) <= sse(a - 1e-3)


def test_alpha_from_per_position_edges_and_bad_input():
    assert alpha_from_per_position([0.0, 0.0]) == pytest.approx(0.0, abs=1e-9)
    assert alpha_from_per_position([1.0, 1.0]) == pytest.approx(1.0, abs=1e-9)
    for bad in ([], [1.2], [-0.1, 0.2]):
        with pytest.raises(ValueError):
            alpha_from_per_position(bad)


# ---------------------------------------------------------------- VerifyCost
def test_verify_cost_interpolation_and_extrapolation():
    v = CPU_VERIFY
    assert v(1) == 1.0
    assert v(4) == pytest.approx(2.1)
    # positions between 2 (1.6) and 4 (2.1): n=3 -> 1.85
    assert v(3) == pytest.approx(1.85)
    # between 4 (2.1) and 8 (2.3): n=6 -> 2.2
    assert v(6) == pytest.approx(2.2)
    # beyond 8: slope of last segment (2.3-2.1)/4 = 0.05 per position; n=10 -> 2.4
    assert v(10) == pytest.approx(2.4)


def test_verify_cost_adds_k1():
    v = VerifyCost({3: 1.5})
    # n=1 -> 1.0 added; n=2 halfway to 1.5 -> 1.25; extrapolated slope 0.25 -> n=5 is 2.0
    assert v(1) == 1.0 and v(2) == pytest.approx(1.25) and v(5) == pytest.approx(2.0)


def test_verify_cost_falling_extrapolation_is_floored():
    # a noisy falling last segment (1.5 -> 1.4) must not extrapolate to a negative cost
    v = VerifyCost({2: 1.5, 4: 1.4})
    assert v(100) == pytest.approx(1.0)  # floored at the smallest measured ratio (n=1)


@pytest.mark.parametrize("bad", [{}, {2: -1.0}, {0: 1.0}, {2: float("nan")}])
def test_verify_cost_bad_input(bad):
    with pytest.raises(ValueError):
        v = VerifyCost(bad)
        v(2)


def test_verify_cost_bad_k():
    with pytest.raises(ValueError):
        CPU_VERIFY(0)


# ---------------------------------------------------------------- predicted speedup
def test_predicted_speedup_paper_formula():
    # free verify (v=1): 3.3616 / (4*0.1 + 1) = 3.3616 / 1.4 = 2.40114
    assert predicted_speedup(0.8, 4, 0.1) == pytest.approx(2.401142857)


def test_predicted_speedup_measured_verify():
    # c=0.25, verify pass over k+1 = 5 positions costs 2.1: 3.3616 / (1 + 2.1) = 1.08439
    assert predicted_speedup(0.8, 4, 0.25, 2.1) == pytest.approx(1.084387097)
    # v(4) is the VerifyCost at k+1 = 5 positions: CPU_VERIFY(5) = 2.15 -> 3.3616 / 3.15 = 1.06717
    assert predicted_speedup(0.8, 4, 0.25, CPU_VERIFY) == pytest.approx(3.3616 / 3.15)
    assert predicted_speedup(0.8, 4, 0.25, VerifyCost({5: 2.1})) == pytest.approx(1.084387097)


def test_predicted_speedup_alpha_zero_is_a_slowdown():
    # E = 1, so any draft cost makes it slower: 1 / (3*0.1 + 1) = 0.76923
    assert predicted_speedup(0.0, 3, 0.1) == pytest.approx(1 / 1.3)
    for c in (0.01, 0.1, 0.5):
        for g in (1, 4, 8):
            assert predicted_speedup(0.0, g, c) < 1.0


def test_predicted_speedup_alpha_one_and_k_zero():
    # alpha=1: (k+1) / (k*c + 1) = 5 / 1.4 = 3.5714
    assert predicted_speedup(1.0, 4, 0.1) == pytest.approx(5 / 1.4)
    # k=0 is plain decoding: exactly 1 whatever the costs
    assert predicted_speedup(0.9, 0, 0.3, CPU_VERIFY) == 1.0


@pytest.mark.parametrize("args", [(0.8, 4, -0.1), (0.8, 4, float("nan")), (1.5, 4, 0.1), (0.8, -2, 0.1)])
def test_predicted_speedup_bad_input(args):
    with pytest.raises(ValueError):
        predicted_speedup(*args)


def test_predicted_speedup_bad_verify_number():
    with pytest.raises(ValueError):
        predicted_speedup(0.8, 4, 0.1, 0.0)


# ---------------------------------------------------------------- best k (notebook 01's rule, exported)
def test_best_k_clear_optimum():
    # alpha=0.6, c=0.2, free verify:
    #   k=1: 1.6 / 1.2 = 1.3333;  k=2: 1.96 / 1.4 = 1.4;  k=3: 2.176 / 1.6 = 1.36
    g, s = rules.best_k(0.6, 0.2, 1.0)
    assert g == 2
    assert s == pytest.approx(1.4)


def test_best_k_high_acceptance():
    # alpha=0.8, c=0.1: k=5: 3.68928/1.5 = 2.45952; k=6: (1-0.8^7)/0.2 = 3.951424,
    # /1.6 = 2.46964; k=7: 4.1611392/1.7 = 2.44773 -> optimum 6
    assert rules.best_k(0.8, 0.1, 1.0) == (6, pytest.approx(2.46964))
    # capped search range
    assert rules.best_k(0.8, 0.1, 1.0, max_k=4) == (4, pytest.approx(2.401142857))


def test_best_k_do_not_speculate():
    # alpha=0.3 with the CPU costs: k=1 gives 1.3 / (0.25 + 1.6) = 0.70 < 1, all worse
    assert rules.best_k(0.3, 0.25, lambda k: CPU_VERIFY(k + 1)) == (0, 1.0)


# ---------------------------------------------------------------- break-even
def test_break_even_alpha_by_hand():
    # k=1, c=0.25, v(1) = CPU_VERIFY(2 positions) = 1.6: need 1 + alpha = 0.25 + 1.6 -> alpha = 0.85
    assert break_even_alpha(1, 0.25, CPU_VERIFY) == pytest.approx(0.85, abs=1e-9)
    # k=1, c=0.2, free verify: 1 + alpha = 1.2 -> alpha = 0.2
    assert break_even_alpha(1, 0.2) == pytest.approx(0.2, abs=1e-9)


@pytest.mark.parametrize("k,c,verify", [(4, 0.1, None), (3, 0.3, CPU_VERIFY), (6, 0.05, 1.5)])
def test_break_even_alpha_gives_speedup_one(k, c, verify):
    a = break_even_alpha(k, c, verify)
    assert predicted_speedup(a, k, c, verify) == pytest.approx(1.0, abs=1e-9)


def test_break_even_alpha_edges():
    # free draft and free verify: never slower, breaks even at 0 (notebook 01's bisection: within 2**-50 of it)
    assert break_even_alpha(3, 0.0) == pytest.approx(0.0, abs=1e-12)
    # costs too high to ever pay: (k+1) = 2 < 1*1.5 + 1 -> nan
    assert math.isnan(break_even_alpha(1, 1.5))
    with pytest.raises(ValueError):
        break_even_alpha(0, 0.1)


def test_cpu_case_needs_high_acceptance():
    # measured on a CPU: c is about 0.25-0.3 and verifying 4 tokens costs about 2x, so even the
    # best k needs per-token acceptance near 0.7 (the model gives about 0.77-0.80)
    for c in (0.25, 0.3):
        best = min(break_even_alpha(g, c, CPU_VERIFY) for g in range(1, 9))
        assert 0.65 <= best <= 0.85
    # versus the GPU-at-small-batch case (c=0.1, free verify): far lower
    assert min(break_even_alpha(g, 0.1) for g in range(1, 9)) < 0.15


# ---------------------------------------------------------------- concurrency
STEP_TIMES = {1: 10.0, 8: 11.0, 32: 14.0, 64: 25.0, 256: 100.0}  # ms, GPU-like shape


def test_concurrency_speedup_by_hand():
    # alpha=0.8, k=3: E = 1 + 0.8 + 0.64 + 0.512 = 2.952
    # b=1: t(1)=10, t(4)=10 + 3/7 = 10.428571; 2.952*10 / (0.3*10 + 10.428571) = 2.19830
    assert rules.model_speedup(0.8, 3, 0.1, STEP_TIMES, 1) == pytest.approx(2.198297872)
    # b=64: t(64)=25, t(256)=100; 2.952*25 / (0.3*25 + 100) = 73.8 / 107.5 = 0.68651
    assert rules.model_speedup(0.8, 3, 0.1, STEP_TIMES, 64) == pytest.approx(0.686511628)


def test_concurrency_speedup_falls_with_batch():
    s = [rules.model_speedup(0.8, 3, 0.1, STEP_TIMES, b) for b in (1, 8, 32, 64)]
    assert s == sorted(s, reverse=True)
    assert s[0] > 1.0 > s[-1]


def test_concurrency_speedup_batch_one_matches_predicted():
    times = {1: 0.05, 2: 0.08, 4: 0.105, 8: 0.115}
    v = VerifyCost({n: t / times[1] for n, t in times.items()})
    assert rules.model_speedup(0.7, 3, 0.25, times, 1) == pytest.approx(predicted_speedup(0.7, 3, 0.25, v))


def test_coverage_mixes_speculative_and_plain_steps():
    from specdec_helpers.costmodel.theory import (
        predicted_speedup,
        predicted_speedup_with_coverage,
    )

    # Full coverage is the plain formula; alpha=0.8, k=4, c=0.1, v=1: 3.3616 / 1.4 = 2.4011.
    assert predicted_speedup_with_coverage(0.8, 4, 0.1, None, 1.0) == pytest.approx(predicted_speedup(0.8, 4, 0.1))
    # Half the steps speculate: (0.5*3.3616 + 0.5) / (0.5*1.4 + 0.5) = 2.1808 / 1.2 = 1.8173.
    assert predicted_speedup_with_coverage(0.8, 4, 0.1, None, 0.5) == pytest.approx(1.8173, abs=1e-4)
    # No step speculates: exactly 1.
    assert predicted_speedup_with_coverage(0.8, 4, 0.1, None, 0.0) == pytest.approx(1.0)
    with pytest.raises(ValueError, match="coverage"):
        predicted_speedup_with_coverage(0.8, 4, 0.1, None, 1.5)


# ---------------------------------------------------------------- coverage everywhere
# v(k) = 1 + 0.5 k: VerifyCost keyed by positions, n = k + 1 -> 1 + 0.5 (n - 1)
LINEAR_VERIFY = VerifyCost({1: 1.0, 2: 1.5})


def test_coverage_formula_by_hand_with_measured_verify():
    from specdec_helpers.costmodel.theory import predicted_speedup_with_coverage

    # alpha=0.8, k=2, c=0.1, v(2) = 2.0: E = 2.44; drafted step = 2*0.1 + 2.0 = 2.2
    # f=0.25: tokens = 0.25*2.44 + 0.75 = 1.36; time = 0.25*2.2 + 0.75 = 1.3 -> 1.046153846
    assert predicted_speedup_with_coverage(0.8, 2, 0.1, LINEAR_VERIFY, 0.25) == pytest.approx(1.36 / 1.3)
    # f=1: 2.44 / 2.2 = 1.109090909
    assert predicted_speedup_with_coverage(0.8, 2, 0.1, LINEAR_VERIFY, 1.0) == pytest.approx(2.44 / 2.2)


def best_k_with_coverage(alpha, c, verify, max_k=10, coverage=1.0):
    """01's search over the prediction with coverage f, as measure.evaluate runs it."""
    def v(k):
        return 1.0 if verify is None else verify(k + 1)

    return rules.best_k(alpha, c, v, max_k, partial(predicted_speedup_with_coverage, coverage=coverage))


def test_best_k_uses_coverage():
    # n-gram-like: c=0, free verify, alpha=0.8. Per drafted step the longest k wins:
    # k=8: E = (1 - 0.8^9) / 0.2 = 4.32891136, time 1 -> 4.33x at full coverage,
    assert best_k_with_coverage(0.8, 0.0, None, max_k=8) == (8, pytest.approx(4.32891136))
    # but with drafts on 10% of steps: (0.1*4.32891136 + 0.9) / (0.1*1 + 0.9) = 1.332891136
    assert best_k_with_coverage(0.8, 0.0, None, max_k=8, coverage=0.1) == (8, pytest.approx(1.332891136))
    # no step drafted: nothing beats plain decoding
    assert best_k_with_coverage(0.8, 0.0, None, max_k=8, coverage=0.0) == (0, 1.0)


def test_best_k_coverage_can_change_the_answer():
    # alpha=0.8, c=0, v(k) = 1 + 0.5 k. f=1: k=1: 1.8/1.5 = 1.2; k=2: 2.44/2.0 = 1.22;
    # k=3: 2.952/2.5 = 1.1808 -> k=2, 1.22
    assert best_k_with_coverage(0.8, 0.0, LINEAR_VERIFY, max_k=6) == (2, pytest.approx(1.22))
    # f=0.5: k=1: (0.9+0.5)/(0.75+0.5) = 1.12; k=2: (1.22+0.5)/(1.0+0.5) = 1.146667;
    # k=3: (1.476+0.5)/(1.25+0.5) = 1.129143 -> k=2, 1.146667 (lower than at f=1)
    assert best_k_with_coverage(0.8, 0.0, LINEAR_VERIFY, max_k=6, coverage=0.5) == (2, pytest.approx(1.72 / 1.5))
    with pytest.raises(ValueError, match="coverage"):
        best_k_with_coverage(0.8, 0.0, None, coverage=-0.1)


def test_concurrency_speedup_with_coverage_by_hand():
    # alpha=0.8, k=3, c=0.1, b=1: t(1) = 10, t(4) = 10 + 3/7 = 10.428571; E = 2.952
    # f=0.5: time = 0.5*(0.3*10 + 10.428571) + 0.5*10 = 11.714286; tokens = 0.5*2.952 + 0.5 = 1.976
    # speedup = 1.976 * 10 / 11.714286 = 1.686829
    t4 = 10 + 3 / 7
    expected = 1.976 * 10 / (0.5 * (3 + t4) + 5)
    assert rules.model_speedup(0.8, 3, 0.1, STEP_TIMES, 1, 0.5) == pytest.approx(expected)
    assert expected == pytest.approx(1.686829, abs=1e-6)
    # f=1 is the formula without coverage; f=0 is plain decoding
    assert rules.model_speedup(0.8, 3, 0.1, STEP_TIMES, 1, 1.0) == pytest.approx(2.198297872)
    assert rules.model_speedup(0.8, 3, 0.1, STEP_TIMES, 64, 0.0) == pytest.approx(1.0)


def test_end_to_end_speedup_weighs_the_drafts_prefill_by_the_prefill_share():
    from specdec_helpers.costmodel.theory import end_to_end_speedup

    assert end_to_end_speedup(0.0, 2.0, 0.5) == pytest.approx(2.0)  # no prefill: the decode speedup
    assert end_to_end_speedup(1.0, 2.0, 0.5) == pytest.approx(1 / 1.5)  # all prefill: the draft's prefill only
    assert end_to_end_speedup(0.5, 2.0, 0.0) == pytest.approx(1 / (0.5 + 0.25))
    # the same decode gain turns into a loss as the prompt's share grows
    assert end_to_end_speedup(0.2, 1.5, 0.4) > 1 > end_to_end_speedup(0.8, 1.5, 0.4)
    with pytest.raises(ValueError, match="prefill_share"):
        end_to_end_speedup(1.5, 2.0)
