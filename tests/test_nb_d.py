"""Unit tests for the helpers behind notebooks 04 and 05 (no servers, no models)."""

from __future__ import annotations

import json
import math

import nbformat
import numpy as np
import pandas as pd
import pytest

from specdec_helpers import analysis, pair_contrast, recommendation, theory
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


def test_pooled_acceptance_ci_matches_pooled_acceptance():
    rows = _rows([10, 2, 7, 0], [12, 8, 8, 4])
    point, lo, hi = analysis.pooled_acceptance_ci(rows)
    assert point == pytest.approx(analysis.pooled_acceptance(rows)["acceptance_rate"]) == pytest.approx(19 / 32)
    assert lo <= point <= hi


def test_alpha_per_token_inverts_expected_tokens():
    # the example: rate 0.186 with mean acceptance length 1.74 at k = 4 is alpha of about 0.43
    alpha = analysis.alpha_per_token(1.74, 4)
    assert alpha == pytest.approx(0.43, abs=0.01)
    assert theory.expected_tokens_per_pass(alpha, 4) == pytest.approx(1.74)
    assert math.isnan(analysis.alpha_per_token(float("nan"), 4))
    assert analysis.alpha_per_token(9.0, 4) == pytest.approx(1.0)  # clipped to k + 1


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


def test_cell_summary_uses_one_estimator_for_acceptance_and_its_interval():
    cells = analysis.cell_summary(_results(), by=("class",)).set_index("class")
    assert cells.loc["structured", "speedup"] == pytest.approx(2.0)
    assert cells.loc["creative", "speedup"] == pytest.approx(0.5)
    assert cells.loc["structured", "acceptance_rate"] == pytest.approx(0.5)
    assert cells.loc["structured", "alpha_per_token"] == pytest.approx(analysis.alpha_per_token(3.0, 4))


@pytest.mark.parametrize("point, lo, hi, reading", [
    (1.4, 1.2, 1.5, "faster"), (0.8, 0.7, 0.9, "slower"), (1.1, 0.9, 1.3, "not distinguishable from 1x"),
    (1.2, float("nan"), float("nan"), "faster (one prompt, no interval)"), (float("nan"), 0, 0, "not measured")])
def test_speedup_reading(point, lo, hi, reading):
    assert analysis.speedup_reading(point, lo, hi) == reading


# ----------------------------------------------------------------------------- 04 -> 05 hand-off
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


# ----------------------------------------------------------------------------- other pairs
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


# ----------------------------------------------------------------------------- the demo's comparison
def _fake_pair(bind_baseline, bind_spec):
    from types import SimpleNamespace

    from specdec_helpers.demo import ServerPair

    pair = ServerPair.__new__(ServerPair)  # no servers: only the bookkeeping is under test
    pair.baseline = SimpleNamespace(name="baseline", cpu_threads_bind=bind_baseline)
    pair.speculative = SimpleNamespace(name="speculative", cpu_threads_bind=bind_spec)
    return pair


@pytest.mark.parametrize("binds, own", [(("0", "1"), True), ((None, None), False), (("0-1", "0-1"), False)])
def test_own_cores_only_when_the_servers_have_different_cores(binds, own):
    pair = _fake_pair(*binds)
    assert pair.own_cores is own
    assert pair.comparison(False).startswith("one after the other")
    assert ("confounded" in pair.comparison(True)) is (not own)


def test_run_both_asks_one_after_the_other_without_own_cores(monkeypatch):
    import threading
    from types import SimpleNamespace

    from specdec_helpers import demo

    active, overlaps = [], []

    def fake_measure(server, messages, **sampling):
        active.append(server.name)
        overlaps.append(len(active))
        threading.Event().wait(0.05)
        active.remove(server.name)
        result = SimpleNamespace(text="x", ttft_s=0.1, e2e_s=1.0, completion_tokens=10,
                                 decode_tokens_per_s=20.0 if server.name == "speculative" else 10.0)
        return SimpleNamespace(result=result, counters=SimpleNamespace(acceptance_rate=0.5))

    monkeypatch.setattr(demo, "measure_request", fake_measure)
    pair = _fake_pair(None, None)
    df = pair.run_both([{"role": "user", "content": "hi"}], temperature=0.0, max_tokens=8)
    assert max(overlaps) == 1  # never both at once
    assert df.set_index("server").loc["speculative", "speedup_tokens_per_s"] == pytest.approx(2.0)
    assert df["compared"].iloc[0].startswith("one after the other")
