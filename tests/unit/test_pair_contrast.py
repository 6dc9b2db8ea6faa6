"""Unit tests for report.pair_contrast, notebook 04's table of other pairs (no servers, no models)."""

from __future__ import annotations

import json
import math

import pytest

from specdec_helpers.costmodel import theory
from specdec_helpers.report import pair_contrast


def test_manifest_rows_convert_mean_acceptance_length_and_label_the_source(tmp_path):
    manifest = {"target": "t", "drafts": {"d1": {"total_parameters": 25, "measured": {
        "conditions": "test conditions", "k": 4, "c": 0.25,
        "structured": {"acceptance_rate": 0.186, "mean_acceptance_length": 1.74}}}}}
    path = tmp_path / "manifest.json"
    path.write_text(json.dumps(manifest))
    (row,) = pair_contrast.manifest_rows(100, manifest=path)
    assert row["pair"] == "t + d1" and row["size_ratio"] == 4.0
    assert row["alpha_per_token"] == pytest.approx(0.43, abs=0.01)
    assert "manifest.json" in row["source"] and "test conditions" in row["source"]
    # with free verification, E(alpha, 4) must reach 1 + 4c = 2
    assert theory.expected_tokens_per_pass(row["break_even_alpha_free_verify"], 4) == pytest.approx(2.0)


def test_reference_rows_skip_the_current_profile_and_read_candidates(tmp_path):
    values = {"candidates[candidate=d]/acceptance_rate": 0.8, "candidates[candidate=d]/c": 0.3,
              "candidates[candidate=d]/measured_speedup": 1.3}
    for profile in ("p1", "p2"):
        (tmp_path / f"{profile}.json").write_text(json.dumps({
            "profile": profile, "provenance": {"parameters": {"target_model": f"t-{profile}",
                                                              "num_speculative_tokens": 4}},
            "notebooks": {"04_choosing_a_draft": {"values": values}}}))
    rows = pair_contrast.reference_rows("p1", reference_dir=tmp_path)
    assert [r["pair"] for r in rows] == ["t-p2 + d"]
    assert rows[0]["c"] == 0.3 and rows[0]["measured_speedup"] == 1.3 and "p2.json" in rows[0]["source"]
    assert math.isnan(rows[0]["alpha_per_token"])  # no mean acceptance length stored: no conversion


def test_contrast_table_puts_live_rows_first_and_skips_duplicate_pairs():
    live = [pair_contrast.row("smollm2-135m-instruct + smollm2-draft-2l", "smollm2-draft-2l", "this run (live)",
                              k=4, c=0.3, acceptance_rate=0.2, mean_acceptance_length=1.7)]
    table = pair_contrast.contrast_table(live, profile="cpu-tiny", smollm2_parameters=134.5e6)
    assert table.iloc[0]["source"] == "this run (live)"
    assert list(table["pair"]).count("smollm2-135m-instruct + smollm2-draft-2l") == 1
    assert list(table.columns) == pair_contrast.COLUMNS

