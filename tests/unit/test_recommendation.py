"""Unit tests for report.recommendation, the 04 -> 05 hand-off (no servers, no models)."""

from __future__ import annotations

import nbformat
import pytest

from specdec_helpers.report import recommendation


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

