"""``make rules``: the statements the notebooks mark ``#@save`` are the module specdec_helpers/costmodel/rules.py,
exactly, and a mark the export cannot honour is refused with a message that names its cell."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from tools.export_rules import TARGET, ExportError, collect, render

#: the rules of the series and where each is written (notebook prefix, cell id)
RULES = {
    "paired_speedup": ("04", "c04rule"), "speedup_reading": ("04", "c04rule"), "C_FLOOR": ("04", "c04rule"),
    "measured_reliably": ("04", "c04rule"), "draft_coverage": ("04", "c11cov"),
    "DraftChoice": ("05", "c02"), "draft_rule": ("05", "c02"),
    "steady_state_window": ("06", "c04"), "Crossover": ("06", "c07cross"), "find_crossover": ("06", "c07cross"),
    "Verdict": ("07", "c11verdict"), "decide": ("07", "c11decide"), "enable_rule": ("07", "c12"),
    "measured_gain": ("07", "c11gain"), "why_it_pays": ("07", "c11why"), "under_load": ("07", "c11busy"),
    "other_k": ("07", "c11k"), "talk_questions": ("07", "c11q"),
    "step_time": ("06", "c10model"), "model_speedup": ("06", "c10model"), "MAX_K": ("04", "c10c"),
    "expected_tokens_per_pass": ("01", "c18"), "predicted_speedup": ("01", "c20"), "break_even_alpha": ("01", "c20"),
    "best_k": ("01", "c20a"), "best_measured_k": ("04", "c04k-rule"),
}


def write_notebook(folder: Path, name: str, *cells: str) -> Path:
    """A minimal notebook of code cells (ids c0, c1, ...) in ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(json.dumps({
        "cells": [{"cell_type": "code", "execution_count": None, "id": f"c{i}", "metadata": {}, "outputs": [],
                   "source": source.splitlines(keepends=True)} for i, source in enumerate(cells)],
        "metadata": {}, "nbformat": 4, "nbformat_minor": 5}, indent=1))
    return path


def test_the_rules_module_is_the_notebooks_marked_cells():
    assert TARGET.read_text(encoding="utf-8") == render(), \
        "specdec_helpers/costmodel/rules.py differs from the notebooks' #@save cells: run make rules"


def test_every_rule_of_the_series_is_exported_from_its_cell():
    from specdec_helpers.costmodel import rules

    tree = ast.parse(TARGET.read_text(encoding="utf-8"))
    defined = {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))} | {
        t.id for n in tree.body if isinstance(n, ast.Assign) for t in n.targets if isinstance(t, ast.Name)}
    assert set(RULES) <= defined, f"not defined in rules.py: {sorted(set(RULES) - defined)}"
    where = {name: (rule.notebook[:2], rule.cell) for rule in collect() for name in rule.names}
    assert {name: where.get(name) for name in RULES} == RULES
    assert all(hasattr(rules, name) for name in RULES)
    lines = TARGET.read_text(encoding="utf-8").splitlines()
    for node in tree.body:  # a comment above each definition (above its decorators) names its notebook and cell
        names = [node.name] if isinstance(node, (ast.FunctionDef, ast.ClassDef)) else [
            t.id for t in getattr(node, "targets", []) if isinstance(t, ast.Name)]
        for name in set(names) & set(RULES):
            first = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])
            prefix, cell = RULES[name]
            assert lines[first - 2].startswith(f"# notebooks/{prefix}_") and \
                lines[first - 2].endswith(f".ipynb, cell {cell}"), (name, lines[first - 2])
            assert f", cell {cell}: " in TARGET.read_text(encoding="utf-8")  # and the docstring lists it


def test_the_rules_module_imports_no_later_layer_and_is_not_imported_by_verdict():
    """costmodel is a low layer: rules reads verdict's words and stats' interval; verdict must not read rules back."""
    imported = {n.module for n in ast.walk(ast.parse(TARGET.read_text(encoding="utf-8")))
                if isinstance(n, ast.ImportFrom) and n.module}
    assert {m for m in imported if m.startswith("specdec_helpers")} <= {
        "specdec_helpers.stats", "specdec_helpers.costmodel.verdict"}
    verdict = ast.parse((TARGET.parent / "verdict.py").read_text(encoding="utf-8"))
    read = {n.module for n in ast.walk(verdict) if isinstance(n, ast.ImportFrom)} | {
        a.name for n in ast.walk(verdict) if isinstance(n, (ast.Import, ast.ImportFrom)) for a in n.names}
    assert not any("rules" in str(m) for m in read), read


def test_render_exports_marked_statements_as_the_notebook_has_them(tmp_path):
    write_notebook(tmp_path, "01_first.ipynb",  # 01 exports like any other: no list of notebooks in the code
                   "%matplotlib inline\n!echo hello\nimport math\n\n\n#@save\n@dataclass(frozen=True)\nclass Point:\n"
                   "    x: float\n\n    def norm(self):\n        return math.hypot(self.x, 0.0)\n",
                   "print('not a rule')\n", "%%bash\necho this cell has no mark and is not Python\n")
    write_notebook(tmp_path, "02_second.ipynb",
                   "#@save\nLIMIT = 3  # a constant, its comment kept\n\n\n"
                   "#@save\ndef twice(p):\n    return 2 * p.norm()\n\n\nnot_exported = twice(Point(1.0))\n")
    write_notebook(tmp_path, "03_third.ipynb",  # a mark inside a string, or after code on its line, is no mark
                   'def helper():\n    """Mark a rule with a line\n#@save\n    above it."""\n\n\nY = 2  #@save\n')
    write_notebook(tmp_path, "demo.ipynb", "#@save\nprint('demo is not a notebook of the series')\n")
    text = render(tmp_path)
    assert "# notebooks/01_first.ipynb, cell c0\n@dataclass(frozen=True)\nclass Point:\n" in text
    assert "# notebooks/02_second.ipynb, cell c0\nLIMIT = 3  # a constant, its comment kept\n" in text
    assert "def twice(p):\n    return 2 * p.norm()\n" in text and "not_exported" not in text
    assert "helper" not in text and "Y = 2" not in text
    assert "import math\nfrom dataclasses import dataclass\n" in text  # only what the rules use
    assert "numpy" not in text and "%" not in text.split('"""')[-1] and "echo" not in text
    assert "- notebooks/01_first.ipynb, cell c0: Point" in text and "make rules" in text.split('"""')[1]
    namespace: dict = {}
    exec(compile(text, "rules", "exec"), namespace)
    assert namespace["twice"](namespace["Point"](1.5)) == 3.0 and namespace["LIMIT"] == 3


@pytest.mark.parametrize("source, message", [
    ("#@save\nprint('hello')\n", "marks an expression"),
    ("#@save\nfor i in range(3):\n    pass\n", "marks a for loop"),
    ("#@save\nimport math\n", "marks an import"),
    ("x = {}\n#@save\nx['a'] = 1\n", "assignment to names"),
    ("#@save\n\ndef f():\n    return 1\n", "directly above"),
    ("#@save\n# a comment between\ndef f():\n    return 1\n", "directly above"),
    ("def f():\n    #@save\n    g = 1\n    return g\n", "directly above"),
    ("#@save\nLIMIT = 3; other = 4\n", "shares its line"),
    ("min_gain = 0.05\n\n\n#@save\ndef pays(v):\n    return v > 1 + min_gain\n", "reads min_gain"),
])
def test_a_mark_the_export_cannot_honour_is_refused(tmp_path, source, message):
    write_notebook(tmp_path, "04_rules.ipynb", "import math\n", source)
    with pytest.raises(ExportError, match=message) as error:
        render(tmp_path)
    assert "notebooks/04_rules.ipynb, cell c1" in str(error.value)


def test_a_rule_is_written_once(tmp_path):
    write_notebook(tmp_path, "04_a.ipynb", "#@save\ndef rule():\n    return 1\n")
    write_notebook(tmp_path, "05_b.ipynb", "#@save\ndef rule():\n    return 2\n")
    with pytest.raises(ExportError, match="written once"):
        render(tmp_path)


def test_make_rules_is_a_target_and_in_make_help():
    makefile = (TARGET.parents[2] / "Makefile").read_text(encoding="utf-8")
    assert "\nrules:\n\t$(WITH_ENV) python -m tools.export_rules\n" in makefile
    assert '@echo "make rules ' in makefile
