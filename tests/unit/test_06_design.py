"""Notebook 06's concurrency model, written out in its cell (exported by `make rules`), against costmodel.theory."""

from __future__ import annotations

import itertools

import pytest

from specdec_helpers.costmodel import rules, theory


def test_06_writes_out_the_concurrency_model_that_theory_computes():
    """The notebook's speedup(b) = E(alpha, k)·t(b) / (k·c·t(b) + t(b·(k+1))), with its own t(n) between and past the
    measured sizes, is theory.concurrency_speedup (coverage 1) for every input, k = 0 included."""
    steps = [{1: 0.0969, 2: 0.1033, 4: 0.0933, 5: 0.0931, 10: 0.1227, 20: 0.164},  # the cpu-coder run's t(n)
             {1: 0.02, 4: 0.03, 5: 0.05, 16: 0.12, 20: 0.2},  # cost grows: extrapolated past 20
             {2: 0.05, 8: 0.04}]  # falls with n: never below the fastest measured step
    for t, alpha, k, c, b in itertools.product(steps, (0.0, 0.5, 0.979, 1.0), (0, 1, 2, 4, 8), (0.0, 0.428, 1.2),
                                               (1, 2, 3, 4, 7, 40)):
        assert rules.model_speedup(alpha, k, c, t, b) == pytest.approx(theory.concurrency_speedup(alpha, k, c, t, b),
                                                                       rel=1e-12)


def test_the_step_time_reads_between_and_past_the_measured_sizes():
    t = {1: 0.1, 4: 0.2, 8: 0.4}
    assert rules.step_time(t, 2) == pytest.approx(0.1 + 0.1 / 3)
    assert rules.step_time(t, 16) == pytest.approx(0.8)  # the last segment extended
    assert rules.step_time({2: 0.05, 8: 0.04}, 1) == pytest.approx(0.05 + 0.01 / 6)  # the first segment extended
    assert rules.step_time({2: 0.05, 8: 0.04}, 100) == pytest.approx(0.04)  # but never below the fastest step
