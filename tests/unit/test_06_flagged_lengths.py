"""Notebook 06's section 1 (its finding, prefill model and pick at the longest prompt) and section 3's c when the
physics guard left out every pair of a server at some length or at all (a real run: all three n-gram pairs at 256
tokens were above their bound, and the cell then raised on a NaN c_pre). The cells run as the notebook holds them,
on tables of that shape; no servers."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from specdec_helpers.costmodel import theory
from specdec_helpers.costmodel.rules import measured_reliably
from specdec_helpers.costmodel.verdict import decision_side

NOTEBOOK = Path(__file__).resolve().parents[2] / "notebooks" / "06_context_and_concurrency.ipynb"
CELLS = ("c07", "c06pre", "c06pre-rec", "c06pre-best")


def _run_cells(rows: dict[tuple[str, int], list[float]], flagged: dict[tuple[str, int], int] | None = None) -> dict:
    """``rows``: each (server, length) with pairs kept (one each); ``flagged``: how many pairs the guard left out."""
    cells = {c.get("id"): "".join(c["source"]) for c in json.loads(NOTEBOOK.read_text())["cells"]}
    index = pd.MultiIndex.from_tuples(sorted(rows), names=["server", "asked_tokens"])
    flagged = flagged or {}
    ctx = pd.DataFrame([{"server": s, "asked_tokens": n, "flagged": False} for s, n in rows]
                       + [{"server": s, "asked_tokens": n, "flagged": True} for (s, n), m in flagged.items()
                          for _ in range(m)], columns=["server", "asked_tokens", "flagged"])
    by_len = pd.DataFrame([rows[key] for key in sorted(rows)], index=index,
                          columns=["prompt_tokens", "decode_speedup", "end_to_end_speedup", "prefill_share",
                                   "ttft_ratio"]).assign(coverage=1.0, acceptance_rate=0.5)
    context = pd.DataFrame({"server": ["baseline", "draft", "ngram"], "answer_found": [True, True, False]})
    namespace = {"context": context, "np": np, "pd": pd, "theory": theory, "decision_side": decision_side, "min_gain": 0.1,
                 "by_len": by_len, "labels": {"draft": "the draft model", "ngram": "n-gram lookup"}, "ctx": ctx,
                 "measured_reliably": measured_reliably}
    for cell in CELLS:
        exec(compile(cells[cell], f"06:{cell}", "exec"), namespace)
    return namespace


def test_a_server_with_one_kept_length_gets_no_prediction_and_still_counts_at_the_longest_prompt():
    ns = _run_cells({("draft", 256): [235, 1.80, 1.23, 0.21, 1.56], ("draft", 1536): [1532, 1.50, 0.83, 0.74, 1.40],
                     ("ngram", 1536): [1532, 3.27, 1.19, 0.74, 1.03]})
    ngram = ns["prefill_model"].set_index("server").loc["ngram"]
    assert np.isnan(ngram["c_prefill"]) and np.isnan(ngram["predicted_end_to_end"])
    assert ns["prefill_model"].set_index("server").loc["draft", "predicted_end_to_end"].notna().all()
    assert ns["best_long"] == "ngram" and ns["best_pays"]


@pytest.mark.parametrize("ngram_e2e", [0.9, 1.3])
def test_a_server_without_a_kept_pair_at_the_longest_prompt_is_not_picked_there(ngram_e2e):
    ns = _run_cells({("draft", 256): [235, 1.80, 1.23, 0.21, 1.56], ("draft", 1536): [1532, 1.50, 0.83, 0.74, 1.40],
                     ("ngram", 256): [235, 3.0, ngram_e2e, 0.20, 1.01]})
    assert ns["best_long"] == "draft" and not ns["best_pays"]
    assert "it does not pay" in ns["longest_finding"] and "Not compared: n-gram lookup" in ns["longest_finding"]


def test_a_server_whose_pairs_at_the_longest_prompt_were_mostly_left_out_is_not_picked_there():
    """A run kept one n-gram pair of three at 1,536 tokens and named n-gram the best method there on it: a method is
    compared at the longest prompt only where its pairs pass 04's rule (more kept than left out)."""
    rows = {("draft", 256): [235, 1.80, 1.23, 0.21, 1.56], ("draft", 1536): [1532, 1.50, 0.83, 0.74, 1.40],
            ("ngram", 256): [235, 3.0, 2.2, 0.20, 1.01], ("ngram", 1536): [1532, 3.5, 1.17, 0.74, 1.03]}
    mostly_left_out = _run_cells(rows, flagged={("ngram", 1536): 2})
    assert mostly_left_out["best_long"] == "draft" and not mostly_left_out["best_pays"]
    assert "Not compared: n-gram lookup" in mostly_left_out["longest_finding"]
    one_left_out = _run_cells(rows, flagged={("ngram", 1536): 1, ("draft", 1536): 1})  # 1 kept, 1 out: not more
    assert one_left_out["best_long"] is None and "nothing measured reliably" in one_left_out["longest_finding"]
    assert _run_cells(rows)["best_long"] == "ngram"


def test_every_pair_left_out_at_the_longest_prompt_reads_as_nothing_measured_there_not_a_shorter_length():
    rows = {("draft", 256): [235, 1.80, 1.23, 0.21, 1.56], ("ngram", 256): [235, 3.0, 2.2, 0.20, 1.01]}
    ns = _run_cells(rows, flagged={("draft", 1536): 3, ("ngram", 1536): 3})
    assert ns["best_long"] is None and not ns["best_pays"]
    assert ns["longest_finding"].startswith("At the longest prompt, nothing measured reliably")


def test_a_server_without_any_kept_pair_is_left_out_of_the_prefill_model():
    ns = _run_cells({("draft", 256): [235, 1.80, 1.23, 0.21, 1.56], ("draft", 1536): [1532, 1.50, 0.83, 0.74, 1.40]})
    assert set(ns["prefill_model"]["server"]) == {"draft"} and set(ns["c_pre_by_server"]) == {"draft"}
    assert ns["best_long"] == "draft"


def test_no_kept_pair_of_either_server_reads_as_nothing_measured():
    ns = _run_cells({})
    assert ns["prefill_model"].empty and ns["best_long"] is None and not ns["best_pays"]
    assert "nothing measured reliably" in ns["context_finding"]
    assert "nothing measured reliably" in ns["longest_finding"]


def test_without_kept_draft_pairs_the_finding_says_so_and_c_comes_from_all_its_pairs():
    ns = _run_cells({("ngram", 256): [235, 3.0, 1.3, 0.20, 1.01]})
    assert "nothing measured reliably with the draft model" in ns["context_finding"] and ns["best_long"] == "ngram"
    cell = {c.get("id"): "".join(c["source"]) for c in json.loads(NOTEBOOK.read_text())["cells"]}["c10"]
    ctx = pd.DataFrame({"server": ["draft", "draft", "ngram"], "asked_tokens": [256, 1536, 256],
                        "c_in_server": [0.30, 0.50, 0.01], "flagged": [True, True, False]})
    ns.update(kept=ctx[~ctx["flagged"]], ctx=ctx, target_steps=pd.DataFrame({"sequences": [1, 5], "step_s": [0.1, 0.2]}))
    exec(compile(cell, "06:c10", "exec"), ns)
    assert ns["c"] == pytest.approx(0.30)  # the draft's shortest length, flagged pairs included


def test_each_left_out_pair_is_reported_with_the_bound_it_went_past():
    """A pair left out for its end-to-end ratio is not reported as a decode speedup above the decode bound (a run
    recorded "3.46x > 3.79x")."""
    cells = {c.get("id"): "".join(c["source"]) for c in json.loads(NOTEBOOK.read_text())["cells"]}
    ctx = pd.DataFrame({"server": ["ngram", "ngram", "draft"], "prompt_id": ["ctx-256-0", "ctx-1536-0", "ctx-256-0"],
                        "repeat": [0, 0, 0], "flagged": [True, True, False], "decode_speedup": [4.50, 3.46, 1.8],
                        "decode_bound": [4.33, 3.79, 4.2], "per_token_speedup": [1.3, 1.25, 1.1],
                        "e2e_bound": [1.4, 1.10, 1.2], "flag_reason": ["decode above bound", "end to end above bound", ""]})
    namespace = {"ctx": ctx}
    for cell in ("c05flag-why", "c05flag"):
        exec(compile(cells[cell], f"06:{cell}", "exec"), namespace)
    assert namespace["left_out"] == [
        "ngram on ctx-256-0 (repeat 0): decode above bound, 4.50x against at most 4.33x",
        "ngram on ctx-1536-0 (repeat 0): end to end above bound, 1.25x against at most 1.10x"]
