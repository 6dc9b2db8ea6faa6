"""The run's report, index.html: it opens with what the run found, in the notebooks' own sentences, before any
notebook's raw records (built from records as the notebooks write them; no servers)."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from tools import run_series as runner  # noqa: E402


def fake_run(run_dir: Path) -> list[runner.NotebookRun]:
    """Records shaped as notebooks 00, 04-07 write them, and 05's figure."""
    (run_dir / "figures").mkdir(parents=True)
    fig, ax = plt.subplots(figsize=(8, 4))
    ax.bar(["structured", "creative"], [1.39, 0.83])
    fig.savefig(run_dir / "figures" / "05_acceptance_and_speedup.png")
    plt.close(fig)
    nb = run_dir / "notebooks"
    return [
        runner.NotebookRun("00_setup_check", nb / "00.ipynb", 190.0, records={"hardware": "AMD EPYC (2 cores)"}),
        runner.NotebookRun("04_choosing_a_draft", nb / "04.ipynb", 700.0, records={
            "findings": ["**Best candidate**: `qwen-0.5b`, measured 1.77x end to end: faster."],
            "candidates": [{"candidate": "ngram", "n_flagged": 1}]}),
        runner.NotebookRun("05_structured_vs_creative", nb / "05.ipynb", 360.0, records={
            "findings": ["**Speed, structured at T=0:** 1.39x (95% interval 1.27-1.65, 8 prompts)."],
            "flagged": []}),
        runner.NotebookRun("06_context_and_concurrency", nb / "06.ipynb", 600.0, ok=False, error="boom",
                           records={"takeaways": ["Concurrency: no crossover up to 4 streams."]}),
        runner.NotebookRun("07_is_it_worth_it", nb / "07.ipynb", 440.0, records={
            "findings": ["**Whole workload:** Do not enable speculative decoding (1.09x).",
                         "**structured**: Enable speculative decoding with qwen-0.5b (1.45x)."]}),
    ]


def test_the_report_leads_with_the_verdicts_and_05s_figure_then_the_notebooks(tmp_path):
    runs = fake_run(tmp_path)
    page = runner.write_index(tmp_path, runs, "cpu-coder", {"max_tokens": 48}).read_text()
    found, by_notebook = page.index("What this run found"), page.index("Notebook by notebook")
    order = [page.index(s) for s in ("Do not enable speculative decoding", "structured at T=0",
                                     'src="figures/05_acceptance_and_speedup.png"', "Best candidate",
                                     "no crossover up to 4 streams")]
    assert found < order[0] and order == sorted(order) and order[-1] < by_notebook  # 07, 05 + figure, 04, 06
    assert "<b>Whole workload:</b>" in page and "<code>qwen-0.5b</code>" in page  # their markdown, as HTML
    assert "Failed:</b> 06_context_and_concurrency" in page and "notebook 04: 1" in page  # what the run flagged
    assert page.index("<details><summary>its 2 recorded values (raw)") > by_notebook  # raw records, collapsed
    assert "on AMD EPYC (2 cores)" in page and "4 of 5 notebooks ran" in page


def test_the_report_counts_every_notebooks_flagged_pairs_and_shows_the_a_a_noise_floor(tmp_path):
    runs = fake_run(tmp_path)
    runs[1].records["aa_control"] = [
        {"ratio": "decode (engine)", "pairs": 8, "median": 1.01, "ci_low": 0.97, "ci_high": 1.04, "min": 0.9, "max": 1.1},
        {"ratio": "end to end", "pairs": 8, "median": 0.99, "ci_low": None, "ci_high": None, "min": 0.8, "max": 1.2}]
    runs[4].records["flagged"] = ["traffic: s02: 1.24x decode, 1.41x end to end > bound 1.10x",
                                  "ngram: s05: 1.30x decode, 1.30x end to end > bound 1.05x"]
    runs[1].records["k_sweep_flagged"] = 2  # 04's k sweep flags pairs of its own
    page = runner.write_index(tmp_path, runs, "cpu-coder", {}).read_text()
    assert "Flagged: 5 measured pair(s)" in page and "notebook 04: 3, notebook 07: 2" in page  # 07's count too
    floor = page[page.index("Noise floor"):]
    assert "decode (engine) 1.01x (95% interval 0.97-1.04, 8 pairs)" in floor
    assert "end to end 0.99x (range 0.80-1.20, 8 pairs)" in floor  # no interval: the range
    assert page.index("Noise floor") < page.index("Do not enable speculative decoding")  # next to the verdicts
