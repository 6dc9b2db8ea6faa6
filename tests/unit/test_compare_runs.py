"""tools.compare_runs: two run folders side by side (04's best k with the k's it cannot tell apart, 05's intervals and
readings), on tables of the shape the notebooks save."""

from __future__ import annotations

from pathlib import Path

import nbformat
import pandas as pd

from specdec_helpers.report.record import MIME_TYPE
from tools.compare_runs import compare, main


def _run(folder: Path, sweep: list[tuple], cells: list[tuple], readings: dict[str, str]) -> Path:
    (folder / "results").mkdir(parents=True)
    (folder / "notebooks").mkdir()
    pd.DataFrame([{"class": c, "k": k, "measured_decode_speedup": m, "decode_speedup_min": lo,
                   "decode_speedup_max": hi, "hardware": "AMD EPYC (2 cores; avx2 avx512_vnni)"}
                  for c, k, m, lo, hi in sweep]).to_csv(folder / "results" / "04_k_sweep.csv", index=False)
    pd.DataFrame([{"class": c, "temperature": t, "n": 8, "speedup": s, "speedup_ci_low": lo, "speedup_ci_high": hi,
                   "speedup_min": lo, "speedup_max": hi} for c, t, s, lo, hi in cells]
                 ).to_csv(folder / "results" / "05_cells.csv", index=False)
    cell = nbformat.v4.new_code_cell("record('cell_readings', ...)")  # as record() leaves it in an executed notebook
    cell.outputs = [nbformat.v4.new_output("display_data", data={MIME_TYPE: {"name": "cell_readings",
                                                                             "value": readings}})]
    nbformat.write(nbformat.v4.new_notebook(cells=[cell]), folder / "notebooks" / "05_structured_vs_creative.ipynb")
    return folder


SWEEP = [("structured", 2, 1.40, 1.25, 1.70), ("structured", 4, 1.67, 1.38, 1.83), ("structured", 6, 1.69, 1.36, 1.85),
         ("creative", 1, 1.07, 0.93, 1.18), ("creative", 4, 0.83, 0.70, 0.94)]
CELLS = [("structured", 0.0, 1.45, 1.37, 1.59), ("creative", 0.0, 0.79, 0.66, 0.85)]
READINGS = {"structured@0": "faster", "creative@0": "slower"}


def test_runs_that_agree_and_one_that_does_not(tmp_path):
    first = _run(tmp_path / "a", SWEEP, CELLS, READINGS)
    # best structured k 4 instead of 6, inside the first run's tie set; 05's points inside each other's intervals
    second_sweep = [(c, k, m + (0.05 if (c, k) == ("structured", 4) else 0), lo, hi) for c, k, m, lo, hi in SWEEP]
    second = _run(tmp_path / "b", second_sweep, [(c, t, s + 0.02, lo, hi) for c, t, s, lo, hi in CELLS], READINGS)
    page, agree = compare(first, second)
    assert agree, page
    assert "| structured | 6 (2, 4) | 4 (2, 6) | yes |" in page
    assert "avx512_vnni" in page
    # a creative point outside the other's interval, and another reading: they disagree, and the page says where
    third = _run(tmp_path / "c", SWEEP, [CELLS[0], ("creative", 0.0, 1.10, 1.02, 1.20)],
                 {**READINGS, "creative@0": "no verdict"})
    page, agree = compare(first, third)
    assert not agree and "**no**" in page
    assert main([str(first), str(third)]) == 1 and main([str(first), str(second)]) == 0


def test_a_folder_that_is_not_a_run_is_refused(tmp_path, capsys):
    import pytest

    with pytest.raises(SystemExit):
        main([str(tmp_path), str(tmp_path)])
    assert "not a run folder" in capsys.readouterr().err
