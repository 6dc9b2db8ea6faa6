"""Notebook 07's per-class verdicts (cell e01) pick, among the candidates measured reliably, one whose interval
clears 1 + min_gain before the fastest median: in a real run suffix decoding kept 7 structured pairs (a median of
1.27x, no interval) and the 0.5B draft 8 (1.21x, 95% interval 1.12-1.51x); picking by the median alone told the user
not to enable speculation for structured prompts that the draft measurably speeds up. Where nothing clears it, the
fastest median is named: another run's creative verdict named the draft at 0.71x (with an interval) while suffix
measured 1.08x on 7 pairs. The cell runs as the notebook holds it; no servers."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd

from specdec_helpers.costmodel.rules import MIN_GAIN, decide, enable_rule, measured_gain, measured_reliably

NOTEBOOK = Path(__file__).resolve().parents[2] / "notebooks" / "07_is_it_worth_it.ipynb"


def _row(candidate: str, cls: str, n: int, speedup: float, low: float, high: float) -> dict:
    return {"candidate": candidate, "class": cls, "n_pairs": n, "n_flagged": 8 - n, "measured_speedup": speedup,
            "speedup_ci_low": low, "speedup_ci_high": high, "speedup_min": 0.9, "speedup_max": 1.6, "k": 4,
            "best_k": 4, "acceptance_rate": 0.5, "mean_acceptance_length": 2.5, "c": 0.1, "coverage": 1.0,
            "verify_cost_k_plus_1": 1.2, "predicted_decode_speedup": speedup, "measured_decode_speedup": speedup}


def _class_verdicts(per_class: list[dict]) -> dict:
    cells = {c.get("id"): "".join(c["source"]) for c in json.loads(NOTEBOOK.read_text())["cells"]}
    namespace = {"classes": ["structured", "creative"], "per_class": per_class, "min_pairs": 3, "pd": pd,
                 "overall": [{"candidate": c, "c_in_server": 0.1} for c in {r["candidate"] for r in per_class}],
                 "measured_reliably": measured_reliably, "measured_gain": measured_gain, "decide": decide,
                 "enable_rule": enable_rule,
                 "MIN_GAIN": MIN_GAIN, "expected_concurrency": 1, "memory_note_for": lambda candidate: None,
                 "predicted_at_concurrency": lambda r: r["measured_speedup"],
                 "verdict": decide(_row("x", "all", 8, 1.0, 0.9, 1.1), rule=enable_rule, min_gain=MIN_GAIN,
                                   by_class={}, concurrency=1, predicted_at_concurrency=1.0, memory=None)}
    exec(compile(cells["e01"], "07:e01", "exec"), namespace)
    return namespace["class_verdicts"]


def test_a_class_is_judged_on_a_candidate_with_an_interval_before_a_faster_median_without_one():
    nan = math.nan
    verdicts = _class_verdicts([_row("suffix", "structured", 7, 1.27, nan, nan),
                                _row("draft", "structured", 8, 1.21, 1.12, 1.51),
                                _row("suffix", "creative", 8, 1.02, 0.76, 1.15),
                                _row("draft", "creative", 8, 0.60, 0.52, 0.76)])
    assert verdicts["structured"].candidate == "draft" and verdicts["structured"].enable
    assert verdicts["creative"].candidate == "suffix" and not verdicts["creative"].enable


def test_where_no_interval_clears_the_gain_the_fastest_median_is_named_and_not_enabled():
    nan = math.nan
    verdicts = _class_verdicts([_row("suffix", "structured", 8, 1.27, 1.09, 1.68),
                                _row("draft", "structured", 8, 1.49, 1.22, 1.68),
                                _row("suffix", "creative", 7, 1.08, nan, nan),
                                _row("draft", "creative", 8, 0.71, 0.67, 0.82)])
    assert verdicts["structured"].candidate == "draft" and verdicts["structured"].enable
    assert verdicts["creative"].candidate == "suffix" and not verdicts["creative"].enable
    assert "(suffix) measured 1.08x" in verdicts["creative"].headline()
    # a class's verdict speaks of that class, not of the whole workload
    assert "for the creative requests on this hardware" in verdicts["creative"].headline()
    assert "on the structured requests and this hardware" in verdicts["structured"].headline()


def test_without_any_interval_the_fastest_median_is_described_and_not_enabled():
    nan = math.nan
    verdicts = _class_verdicts([_row("suffix", "structured", 7, 1.27, nan, nan),
                                _row("draft", "structured", 5, 1.21, nan, nan),
                                _row("suffix", "creative", 8, 1.02, 0.76, 1.15),
                                _row("draft", "creative", 8, 0.60, 0.52, 0.76)])
    assert verdicts["structured"].candidate == "suffix" and not verdicts["structured"].enable
