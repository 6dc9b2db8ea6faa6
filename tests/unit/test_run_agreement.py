"""A run that agrees with itself: every speedup of one configuration the run folder holds (report.runs.speedups_in_run)
and the warning at the top of index.html when two measurements of it disagree (tools.run_series.disagreements)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from specdec_helpers.report.runs import speedups_in_run
from tools.run_series import NotebookRun, write_index

DRAFT = "qwen2.5-coder-0.5b-instruct"


def _write(run: Path, name: str, rows: list[dict]) -> None:
    (run / "results").mkdir(parents=True, exist_ok=True)
    pd.DataFrame(rows).to_csv(run / "results" / f"{name}.csv", index=False)


def _requests(server_k: int, draft: str = DRAFT) -> list[dict]:
    rows = []
    for cls, ids in (("structured", ["s1", "s2"]), ("creative", ["c1", "c2"])):
        for pid in ids:
            rows.append({"server": "baseline", "prompt_id": pid, "class": cls, "draft_model": draft,
                         "num_speculative_tokens": 0})
            rows.append({"server": "speculative", "prompt_id": pid, "class": cls, "draft_model": draft,
                         "num_speculative_tokens": server_k})
    return rows


def test_speedups_in_run_collects_05_and_07_at_the_profile_k(tmp_path):
    _write(tmp_path, "05_requests", _requests(4))
    _write(tmp_path, "05_cells", [
        {"server": "speculative", "class": c, "temperature": t, "n": 2, "speedup": s, "speedup_ci_low": float("nan"),
         "speedup_ci_high": float("nan"), "speedup_min": s - 0.1, "speedup_max": s + 0.1, "decode_speedup": s + 0.2}
        for c, t, s in (("structured", 0.0, 1.5), ("creative", 0.0, 0.8), ("structured", 1.0, 1.2))])
    spec_07 = [{**r, "server": DRAFT if r["server"] != "baseline" else "baseline"} for r in _requests(4)]
    _write(tmp_path, "07_requests", spec_07)
    _write(tmp_path, "07_by_class", [
        {"candidate": DRAFT, "k": 4, "class": c, "measured_speedup": s, "speedup_ci_low": s - 0.2,
         "speedup_ci_high": s + 0.2, "measured_decode_speedup": s, "n_pairs": 2, "speedup_min": s, "speedup_max": s}
        for c, s in (("structured", 1.45), ("creative", 0.85))] + [
        {"candidate": "ngram", "k": 4, "class": "structured", "measured_speedup": 0.9, "speedup_ci_low": 0.8,
         "speedup_ci_high": 1.0, "measured_decode_speedup": 0.9, "n_pairs": 2, "speedup_min": 0.9, "speedup_max": 0.9}])
    table = speedups_in_run(tmp_path, DRAFT, 4)
    assert list(table["notebook"]) == ["05", "05", "07", "07"]  # T = 1 and n-gram left out
    five = table[(table["notebook"] == "05") & (table["class"] == "structured")].iloc[0]
    assert (five["low"], five["high"], five["spread"]) == (1.4, 1.6, "range over prompts")  # no interval: the range
    seven = table[(table["notebook"] == "07") & (table["class"] == "structured")].iloc[0]
    assert seven["spread"] == "95% interval" and seven["prompts"] == five["prompts"] == "s1 s2"
    # another answer cap is another setup: the key says so, and the two rows no longer share one
    _write(tmp_path, "07_requests", [{**r, "max_tokens": 32} for r in spec_07])
    _write(tmp_path, "05_requests", [{**r, "max_tokens": 48} for r in _requests(4)])
    capped = speedups_in_run(tmp_path, DRAFT, 4).set_index(["notebook", "class"])["prompts"]
    assert capped[("05", "structured")] == "s1 s2 @48 tokens" and capped[("07", "structured")] == "s1 s2 @32 tokens"
    # 05 at another k is another configuration: not collected
    _write(tmp_path, "05_requests", _requests(2))
    assert list(speedups_in_run(tmp_path, DRAFT, 4)["notebook"]) == ["07", "07"]


def test_index_warns_only_when_a_run_disagrees_with_itself(tmp_path):
    agree = [NotebookRun("04_choosing_a_draft", tmp_path / "04.ipynb", records={"self_check": {
                 "what": "draft at k = 4", "section_3": 1.9, "k_sweep": 2.0, "ranges_overlap": True}}),
             NotebookRun("07_is_it_worth_it", tmp_path / "07.ipynb", records={"run_agreement": [
                 {"class": "structured", "first": "05 T = 0", "second": "07", "first_speedup": 1.5,
                  "second_speedup": 1.4, "agree": True}]})]
    page = write_index(tmp_path, agree, "cpu-coder", {}).read_text()
    assert "does not agree with itself" not in page
    agree[1].records["run_agreement"][0].update(agree=False, second_speedup=0.9)
    page = write_index(tmp_path, agree, "cpu-coder", {}).read_text()
    assert "does not agree with itself" in page and "0.9x" in page and "07_is_it_worth_it, structured" in page
