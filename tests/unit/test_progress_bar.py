"""A request bar's saved text ends at its final count: GitHub and text dumps of an executed notebook show a widget's
text view as it was first displayed, so without the update on close every bar there read "0/n" after the run."""

from __future__ import annotations

import nbformat
import papermill


def _bar_texts(tmp_path, enabled: bool, fail_after: int | None = None) -> list[str]:
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(
        "from specdec_helpers.report.display import progress_bar\n"
        f"with progress_bar(5, 'requests', enabled={enabled}) as bar:\n"
        "    for i in range(5):\n"
        f"        assert i != {fail_after}, 'the server died'\n"
        "        bar.update()\n")]
    source, executed = tmp_path / "bar.ipynb", tmp_path / "bar-out.ipynb"
    nbformat.write(nb, source)
    try:
        papermill.execute_notebook(str(source), str(executed), kernel_name="python3", progress_bar=False,
                                   cwd=str(tmp_path))
    except papermill.PapermillExecutionError:
        assert fail_after is not None
    # the first code cell: papermill puts a failure's note above it
    cell = next(c for c in nbformat.read(executed, as_version=4).cells if c.cell_type == "code")
    return [o.get("data", {}).get("text/plain", "") for o in cell.outputs]


def test_a_notebook_bar_is_saved_at_its_final_count(tmp_path):
    texts = _bar_texts(tmp_path, enabled=True)
    assert len(texts) == 1, texts  # one display, updated in place: no second bar
    assert "5/5" in texts[0] and "0/5" not in texts[0], texts


def test_a_failed_cell_s_bar_is_saved_where_it_stopped(tmp_path):
    texts = [t for t in _bar_texts(tmp_path, enabled=True, fail_after=3) if t]
    assert len(texts) == 1 and "3/5" in texts[0], texts


def test_a_disabled_bar_shows_nothing(tmp_path):
    assert _bar_texts(tmp_path, enabled=False) == []
