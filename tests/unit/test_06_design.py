"""Notebook 06's concurrency model, written out in its cell (exported by `make rules`), against costmodel.theory."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from specdec_helpers.costmodel import rules, theory

NOTEBOOK = Path(__file__).resolve().parents[2] / "notebooks" / "06_context_and_concurrency.ipynb"


def test_06_model_with_coverage_is_the_decode_prediction_at_one_stream():
    """The notebook's speedup(b) with coverage f, at one stream with t(n) = v(n)·t(1), is the decode prediction with
    coverage (theory.predicted_speedup_with_coverage): one model for 04's lookups and 07's concurrency, k = 0 included;
    f = 1 is the formula written in the cell, f = 0 plain decoding."""
    verify = theory.VerifyCost({1: 1.0, 2: 1.05, 3: 1.1, 5: 1.3, 9: 2.0})
    t = {n: 0.05 * verify(n) for n in range(1, 10)}
    for alpha, k, c, f in itertools.product((0.0, 0.5, 0.979, 1.0), (0, 1, 2, 4, 8), (0.0, 0.428, 1.2),
                                            (0.0, 0.3, 1.0)):
        assert rules.model_speedup(alpha, k, c, t, 1, f) == pytest.approx(
            theory.predicted_speedup_with_coverage(alpha, k, c, verify, f), rel=1e-12)
    assert rules.model_speedup(0.8, 3, 0.1, {1: 0.1, 4: 0.2, 16: 0.5}, 4, 0.0) == 1.0


def test_the_step_time_reads_between_and_past_the_measured_sizes():
    t = {1: 0.1, 4: 0.2, 8: 0.4}
    assert rules.step_time(t, 2) == pytest.approx(0.1 + 0.1 / 3)
    assert rules.step_time(t, 16) == pytest.approx(0.8)  # the last segment extended
    assert rules.step_time({2: 0.05, 8: 0.04}, 1) == pytest.approx(0.05 + 0.01 / 6)  # the first segment extended
    assert rules.step_time({2: 0.05, 8: 0.04}, 100) == pytest.approx(0.04)  # but never below the fastest step


def _run_backwards(wide: pd.DataFrame, alpha: float, k: int, t: dict, c: float) -> pd.DataFrame:
    """06's cell e05back as the notebook holds it, on the given inputs."""
    cells = {cell.get("id"): "".join(cell["source"]) for cell in json.loads(NOTEBOOK.read_text())["cells"]}
    namespace = {"wide": wide, "alpha": alpha, "k": k, "t": t, "c": c, "theory": theory, "np": np,
                 "pd": pd, "step_time": rules.step_time}
    exec(compile(cells["e05back"], "06:e05back", "exec"), namespace)
    return namespace["backwards"]


def test_the_model_run_backwards_gives_back_the_c_it_was_run_with():
    """Fed the model's own predictions as the measurement, 06's backwards cell finds the c that made them at every
    level; a level without a measured speedup, or a run without alpha, implies nothing (NaN), never an error."""
    t, alpha, k, c = {1: 0.084, 2: 0.096, 4: 0.093, 5: 0.093, 10: 0.101, 20: 0.126}, 0.987, 4, 0.437
    predicted = [rules.model_speedup(alpha, k, c, t, b) for b in (1, 2, 4)]
    wide = pd.DataFrame({"throughput_speedup": predicted, "predicted_speedup": predicted}, index=[1, 2, 4])
    assert _run_backwards(wide, alpha, k, t, c)["c_implied"].tolist() == pytest.approx([c, c, c])
    # measured below the model at 4 streams: the draft would have to cost more there
    slower = wide.assign(throughput_speedup=[predicted[0], predicted[1], 0.95])
    assert _run_backwards(slower, alpha, k, t, c)["c_implied"].iloc[-1] > c
    gaps = wide.assign(throughput_speedup=[predicted[0], float("nan"), 0.0])
    assert _run_backwards(gaps, alpha, k, t, c)["c_implied"].iloc[1:].isna().all()
    assert _run_backwards(wide, float("nan"), k, t, c)["c_implied"].isna().all()
