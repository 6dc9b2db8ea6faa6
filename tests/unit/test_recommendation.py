"""Unit tests for the helpers behind notebooks 04 and 05 (no servers, no models)."""

from __future__ import annotations


import nbformat
import numpy as np
import pandas as pd
import pytest

from specdec_helpers.costmodel import recommendation


# ----------------------------------------------------------------------------- pooled acceptance
def _rows(accepted, proposed, drafts=None, k=4):
    drafts = drafts or [max(p // k, 1) for p in proposed]
    return pd.DataFrame({"accepted_tokens": accepted, "draft_tokens": proposed, "drafts": drafts,
                         "num_speculative_tokens": k})


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


def _fake_pair(bind_baseline, bind_spec):
    from types import SimpleNamespace

    from specdec_helpers.demo import ServerPair

    pair = ServerPair.__new__(ServerPair)  # no servers: only the bookkeeping is under test
    pair.baseline = SimpleNamespace(name="baseline", cpu_threads_bind=bind_baseline)
    pair.speculative = SimpleNamespace(name="speculative", cpu_threads_bind=bind_spec)
    return pair



def test_choose_draft_without_a_recommendation_uses_the_profile_draft(tmp_path):
    choice = recommendation.choose_draft(tmp_path, "draft-a", "target")
    assert choice.draft_model == "draft-a" and not choice.from_recommendation
    assert "profile's draft" in choice.reason


def test_choose_draft_uses_a_saved_draft_model_recommendation(tmp_path):
    recommendation.save_recommendation(tmp_path, {"candidate": "draft-b", "target_model": "target"})
    choice = recommendation.choose_draft(tmp_path, "draft-a", "target")
    assert choice.draft_model == "draft-b" and choice.from_recommendation
    assert "instead of the profile's" in choice.reason


@pytest.mark.parametrize("saved, why", [({"candidate": "ngram", "target_model": "target"}, "n-gram"),
                                        ({"candidate": "draft-b", "target_model": "other"}, "measured for target")])
def test_choose_draft_ignores_ngram_and_other_targets(tmp_path, saved, why):
    recommendation.save_recommendation(tmp_path, saved)
    choice = recommendation.choose_draft(tmp_path, "draft-a", "target")
    assert choice.draft_model == "draft-a" and not choice.from_recommendation and why in choice.reason


def test_executed_notebook_wins_over_the_saved_file(tmp_path):
    recommendation.save_recommendation(tmp_path, {"candidate": "draft-b", "target_model": "target"})
    nb = nbformat.v4.new_notebook()
    cell = nbformat.v4.new_code_cell("")
    cell.outputs = [nbformat.v4.new_output("display_data", data={
        "application/vnd.specdec.record+json": {"name": "recommendation",
                                                "value": {"candidate": "draft-c", "target_model": "target"}}})]
    nb.cells = [cell]
    (tmp_path / "notebooks").mkdir()
    nbformat.write(nb, tmp_path / "notebooks" / "04_choosing_a_draft.ipynb")
    choice = recommendation.choose_draft(tmp_path, "draft-a", "target")
    assert choice.draft_model == "draft-c" and "executed notebook" in choice.reason


def test_save_recommendation_needs_candidate_and_target(tmp_path):
    with pytest.raises(ValueError):
        recommendation.save_recommendation(tmp_path, {"candidate": "x"})

