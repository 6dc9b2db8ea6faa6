"""The series' notebooks read like a book: short code cells that each do one thing and show it
(tools/notebook_shape.py counts them). The table is printed with every run of this test (pytest -s shows it)."""

from __future__ import annotations

import json

from tools import notebook_shape

#: notebooks whose cells are still being split (the limits hold for every other one; take a notebook off this list
#: when it meets them: the test fails while it stays here after it does, so the list only shrinks)
STILL_OVER: set[str] = set()


def test_every_notebook_meets_the_cell_limits_or_is_listed_as_still_over():
    rows = notebook_shape.shapes()
    print("\n" + notebook_shape.table(rows))
    assert {r.notebook for r in rows} >= STILL_OVER
    over = {r.notebook for r in rows if not r.reads_like_a_book}
    assert over <= STILL_OVER, f"over the cell limits: {sorted(over - STILL_OVER)} (split the long cells)"
    assert STILL_OVER <= over, f"now within the limits, take off STILL_OVER: {sorted(STILL_OVER - over)}"


def test_the_count_leaves_out_the_parameters_cell_and_blank_lines(tmp_path):
    cells = [{"cell_type": "code", "metadata": {"tags": ["parameters"]}, "source": "x = 1\n" * 80},
             {"cell_type": "code", "metadata": {}, "source": "a = 1\n\n\nb = 2\n"},
             {"cell_type": "code", "metadata": {}, "source": ["print(f'the run took {t} s')\n", "record('t', t)\n"]},
             {"cell_type": "markdown", "metadata": {}, "source": "# title\n" * 60}]
    path = tmp_path / "09_example.ipynb"
    path.write_text(json.dumps({"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))
    row = notebook_shape.shape(path)
    assert (row.code_cells, row.median_lines, row.longest, row.long_cells) == (2, 2, 2, 0)
    assert row.prose_share == 0.25 and row.keeping_share == 0.25 and row.reads_like_a_book
    long = {"cell_type": "code", "metadata": {}, "source": "y = 2\n" * 51}
    path.write_text(json.dumps({"cells": cells + [long], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))
    assert not notebook_shape.shape(path).reads_like_a_book  # one cell over 50 lines is too long


def test_every_notebook_keeps_its_records_at_the_end_of_each_section():
    scattered = {r.notebook: r.scattered for r in notebook_shape.shapes() if not r.keeps_out_of_sight}
    assert not scattered, ("cells that record or save a table or figure before their section's last code cell "
                           f"(gather them in a keep cell at the section's end): {scattered}")


def test_a_record_before_the_sections_last_code_cell_is_found(tmp_path):
    def code(cell_id, source):
        return {"cell_type": "code", "id": cell_id, "metadata": {}, "source": source}

    cells = [{"cell_type": "markdown", "metadata": {}, "source": "## 1. Measure\n"},
             code("measure", "x = 1\nrecord('x', x)\n"), code("show", "print(x)\n"),
             {"cell_type": "markdown", "metadata": {}, "source": "### a part of section 1\n"},
             code("plot", "# save_figure(fig, run, 'f') is a comment\nfig = None\n"),
             code("keep", "save_table(t, run, 't')\nrecord('y', 2)\n"),
             {"cell_type": "markdown", "metadata": {}, "source": "## 2. Next\n"}, code("alone", "record('z', 3)\n")]
    path = tmp_path / "09_example.ipynb"
    path.write_text(json.dumps({"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))
    row = notebook_shape.shape(path)
    assert row.scattered == ("measure",) and not row.keeps_out_of_sight
