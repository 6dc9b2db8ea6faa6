"""The 04 -> 05/06 hand-off through the run's records (report.record, report.recommendation): no servers."""

from __future__ import annotations

import json

import nbformat
import pytest

from specdec_helpers.costmodel.rules import draft_rule
from specdec_helpers.report import recommendation
from specdec_helpers.report.record import keep_records_in, record, records_file, run_records


def _record_as_04(run_dir, value):
    keep_records_in(run_dir, "04_choosing_a_draft")
    record("recommendation", value)


def choose_draft(run_dir, profile_draft, target_model):  # as notebooks 05 and 06 call the rule
    return draft_rule(*recommendation.find_recommendation(run_dir), profile_draft, target_model)


def test_choose_draft_without_a_recommendation_uses_the_profile_draft(tmp_path):
    choice = choose_draft(tmp_path, "draft-a", "target")
    assert choice.draft_model == "draft-a" and not choice.from_recommendation
    assert "profile's draft" in choice.reason


def test_choose_draft_uses_a_recorded_draft_model_recommendation(tmp_path):
    _record_as_04(tmp_path, {"candidate": "draft-b", "method": "draft_model", "draft_model": "draft-b",
                             "target_model": "target"})
    choice = choose_draft(tmp_path, "draft-a", "target")
    assert choice.draft_model == "draft-b" and choice.from_recommendation
    assert "instead of the profile's" in choice.reason


# every outcome notebook 04 can record: the kind of a candidate comes from the configuration its server ran, not from
# its name (a proposer written in a notebook cell, "my-lookup", is no name the package knows)
@pytest.mark.parametrize("saved, why", [
    ({"candidate": "ngram", "method": "ngram", "draft_model": None, "target_model": "target"}, "method: ngram"),
    ({"candidate": "traffic", "method": "custom_class", "draft_model": None, "target_model": "target"},
     "method: custom_class"),
    ({"candidate": "my-lookup", "method": "custom_class", "draft_model": None, "target_model": "target"},
     "has no draft model"),
    ({"candidate": "suffix", "method": "suffix", "draft_model": None, "target_model": "target"}, "method: suffix"),
    ({"candidate": "my-lookup", "target_model": "target"}, "no speculative configuration recorded"),
    ({"candidate": None, "target_model": "target", "reason": "no candidate had 3 pairs kept"}, "recommended nothing"),
    ({"candidate": "draft-b", "method": "draft_model", "draft_model": "draft-b", "target_model": "other"},
     "measured for target")])
def test_choose_draft_takes_the_profile_draft_for_every_outcome_without_a_draft_model(tmp_path, saved, why):
    _record_as_04(tmp_path, saved)
    choice = choose_draft(tmp_path, "draft-a", "target")
    assert choice.draft_model == "draft-a" and not choice.from_recommendation and why in choice.reason


def test_a_04_that_died_mid_write_leaves_05_the_profile_draft(tmp_path):
    path = records_file(tmp_path, "04_choosing_a_draft")
    path.parent.mkdir()
    path.write_text('{"records": {"recommendation": {"cand')
    choice = choose_draft(tmp_path, "draft-a", "target")
    assert choice.draft_model == "draft-a" and "cannot be read" in choice.reason


def test_records_file_holds_every_record_and_starts_empty_when_the_notebook_runs_again(tmp_path):
    keep_records_in(tmp_path, "04_choosing_a_draft")
    record("k_sweep", {"best_k_measured": {"structured": 4}})
    record("recommendation", {"candidate": "draft-b", "target_model": "t"})
    data = json.loads(records_file(tmp_path, "04_choosing_a_draft").read_text())
    assert data["notebook"] == "04_choosing_a_draft" and set(data["records"]) == {"k_sweep", "recommendation"}
    keep_records_in(tmp_path, "04_choosing_a_draft")  # run again: nothing stale survives
    assert run_records(tmp_path, "04_choosing_a_draft") == {}


def test_an_executed_notebook_is_read_when_there_is_no_records_file(tmp_path):
    nb = nbformat.v4.new_notebook()
    cell = nbformat.v4.new_code_cell("")
    cell.outputs = [nbformat.v4.new_output("display_data", data={
        "application/vnd.specdec.record+json": {"name": "recommendation",
                                                "value": {"candidate": "draft-c", "method": "draft_model",
                                                          "draft_model": "draft-c", "target_model": "target"}}})]
    nb.cells = [cell]
    (tmp_path / "notebooks").mkdir()
    nbformat.write(nb, tmp_path / "notebooks" / "04_choosing_a_draft.ipynb")
    choice = choose_draft(tmp_path, "draft-a", "target")
    assert choice.draft_model == "draft-c" and "recorded by notebook 04" in choice.reason


def test_a_damaged_records_file_names_itself(tmp_path):
    path = records_file(tmp_path, "04_choosing_a_draft")
    path.parent.mkdir()
    path.write_text("{not json")
    with pytest.raises(ValueError, match="04_choosing_a_draft.json.*run 04_choosing_a_draft again"):
        run_records(tmp_path, "04_choosing_a_draft")
