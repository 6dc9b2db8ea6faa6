"""Unit tests for costmodel.analysis, the tables behind notebooks 04 and 05 (no servers, no models)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from specdec_helpers.costmodel import analysis, theory
from specdec_helpers.costmodel.acceptance import pooled_acceptance
from specdec_helpers.stats import bootstrap_ratio_ci


# ----------------------------------------------------------------------------- pooled acceptance
def _rows(accepted, proposed, drafts=None, k=4):
    drafts = drafts or [max(p // k, 1) for p in proposed]
    return pd.DataFrame({"accepted_tokens": accepted, "draft_tokens": proposed, "drafts": drafts,
                         "num_speculative_tokens": k})


def test_ratio_ci_point_is_the_pooled_ratio_not_the_mean_of_rates():
    # one long answer accepted well, two short ones badly: pooled 0.7 vs mean of rates (0.75+0+0)/3 = 0.25
    num, den = [30, 0, 0], [40, 2, 4]
    point, lo, hi = bootstrap_ratio_ci(num, den, seed=1)
    assert point == pytest.approx(30 / 46)
    assert lo <= point <= hi
    assert bootstrap_ratio_ci(num, den, seed=1) == (point, lo, hi)  # deterministic


def test_ratio_ci_edge_cases():
    p, lo, hi = bootstrap_ratio_ci([3], [4])
    assert p == 0.75 and math.isnan(lo) and math.isnan(hi)
    p, lo, hi = bootstrap_ratio_ci([0, 0], [0, 0])
    assert math.isnan(p)
    with pytest.raises(ValueError):
        bootstrap_ratio_ci([1, 2], [3])
    with pytest.raises(ValueError):
        bootstrap_ratio_ci([1, -1], [3, 3])


def _paired_rows(spec: pd.DataFrame) -> pd.DataFrame:
    """``spec`` as one speculative server's requests, each paired with a baseline request on its prompt."""
    spec = spec.assign(server="speculative", prompt_id=[f"p{i}" for i in range(len(spec))], repeat=0,
                       temperature=0.0, e2e_s=1.0, completion_tokens=10, decode_tokens_per_s=10.0)
    base = spec[["prompt_id", "repeat", "temperature", "e2e_s", "completion_tokens", "decode_tokens_per_s"]]
    return pd.concat([base.assign(server="baseline"), spec], ignore_index=True)


def test_cell_summary_acceptance_interval_is_around_the_pooled_acceptance():
    rows = _rows([10, 2, 7, 0, 9, 3, 6, 1], [12, 8, 8, 4, 12, 8, 8, 4])
    cell = analysis.cell_summary(_paired_rows(rows), by=()).iloc[0]
    point, lo, hi = cell["acceptance_rate"], cell["acceptance_ci_low"], cell["acceptance_ci_high"]
    assert point == pytest.approx(pooled_acceptance(rows)["acceptance_rate"]) == pytest.approx(38 / 64)
    assert lo <= point <= hi
    # four requests: the pooled rate, but no interval (stats.MIN_VALUES_FOR_INTERVAL)
    cell = analysis.cell_summary(_paired_rows(rows.iloc[:4]), by=()).iloc[0]
    assert cell["acceptance_rate"] == pytest.approx(19 / 32)
    assert math.isnan(cell["acceptance_ci_low"]) and math.isnan(cell["acceptance_ci_high"])


def _results():
    """Two prompts, both servers, T=0: one identical answer and one that parts at character 3."""
    base = dict(temperature=0.0, repeat=0, e2e_s=1.0, completion_tokens=10, decode_tokens_per_s=10.0)
    rows = [
        dict(base, server="baseline", prompt_id="a", **{"class": "structured"}, text="abcdef"),
        dict(base, server="speculative", prompt_id="a", **{"class": "structured"}, text="abcdef", e2e_s=0.5),
        dict(base, server="baseline", prompt_id="b", **{"class": "creative"}, text="abcxyz"),
        dict(base, server="speculative", prompt_id="b", **{"class": "creative"}, text="abcdef", e2e_s=2.0),
    ]
    df = pd.DataFrame(rows)
    for col, val in (("drafts", 2), ("draft_tokens", 8), ("accepted_tokens", 4), ("num_speculative_tokens", 4),
                     ("accept_pos1", 0.5), ("accept_pos2", 0.5)):
        df[col] = np.where(df["server"] == "speculative", val, np.nan)
    df["acceptance_rate"] = df["accepted_tokens"] / df["draft_tokens"]
    return df


def test_greedy_agreement_counts_identical_and_finds_the_parting_point():
    agreement = analysis.greedy_agreement(_results()).set_index("prompt_id")
    assert bool(agreement.loc["a", "identical"]) and agreement.loc["a", "first_difference"] == -1
    assert not agreement.loc["b", "identical"] and agreement.loc["b", "first_difference"] == 3


@pytest.mark.parametrize("a, b, first", [("abc", "abc", None), ("abc", "abd", 2), ("ab", "abc", 2), ("abc", "", 0),
                                         ([1, 2, 3], [1, 2, 4], 2), ([5, 6], [5, 6], None), ([5], [5, 6, 7], 1)])
def test_first_difference_of_strings_and_token_lists(a, b, first):
    assert analysis.first_difference(a, b) == first


def test_cell_summary_uses_one_estimator_for_acceptance_and_its_interval():
    cells = analysis.cell_summary(_results(), by=("class",)).set_index("class")
    assert cells.loc["structured", "speedup"] == pytest.approx(2.0)
    assert cells.loc["creative", "speedup"] == pytest.approx(0.5)
    assert cells.loc["structured", "acceptance_rate"] == pytest.approx(0.5)
    assert cells.loc["structured", "alpha_per_token"] == pytest.approx(theory.alpha_from_mean_acceptance_length(3.0, 4, clip=True))
