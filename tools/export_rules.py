"""``make rules``: the series' decision rules, written once in the notebooks, exported to the package (d2l's
``#@save``).

A line ``#@save`` directly above a top-level ``def`` or ``class`` (above its decorators) or an assignment in a code
cell of ``notebooks/0*.ipynb`` marks that statement as a rule of the series. :func:`render` collects the marked
statements, notebook by notebook and cell by cell, as the notebook has them, into one module; :func:`main` writes it
to ``specdec_helpers/costmodel/rules.py``, which the package, the later notebooks and the tests import. A unit test
(tests/unit/test_rules_export.py) fails while that file differs from :func:`render`: edit the rule in its notebook,
then run ``make rules``.

A rule may read the other rules and the names in :data:`PROVIDED` (the module imports those it uses); it may not
read a notebook's parameter or anything else a notebook defines without marking it, and the export says so."""

from __future__ import annotations

import ast
import builtins
import io
import json
import re
import symtable
import sys
import textwrap
import tokenize
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = ROOT / "notebooks"
TARGET = ROOT / "specdec_helpers" / "costmodel" / "rules.py"
MARKER = "#@save"
MAGIC = re.compile(r"^(\s*)[%!]")  # IPython magics and shell escapes are not Python
LINE_LENGTH = 120

#: the names a rule may read without defining them: name -> (isort section, module, the name in that module; None
#: for ``import module [as name]``). Only the names the rules use are imported. costmodel is a low layer
#: (pyproject.toml, [tool.importlinter]): what is listed here comes from the standard library, numpy, pandas, stats and costmodel.
PROVIDED: dict[str, tuple[int, str, str | None]] = {
    "math": (0, "math", None),
    "dataclass": (0, "dataclasses", "dataclass"),
    "field": (0, "dataclasses", "field"),
    "NamedTuple": (0, "typing", "NamedTuple"),
    "np": (1, "numpy", None),
    "pd": (1, "pandas", None),
    **{name: (2, "specdec_helpers.costmodel.verdict", name)
       for name in ("FASTER", "SMALL_GAIN", "NOT_DISTINGUISHABLE", "SLOWER", "MIN_GAIN", "interval_text",
                    "decision_side")},
    **{name: (2, "specdec_helpers.stats", name) for name in ("MIN_VALUES_FOR_INTERVAL", "bootstrap_ci")},
}


class ExportError(ValueError):
    """A ``#@save`` mark the export cannot honour (the message names the notebook, cell and line)."""


@dataclass(frozen=True)
class Rule:
    """One marked statement: where it is and the code it exports."""

    notebook: str  # the file name, e.g. 04_choosing_a_draft.ipynb
    cell: str  # the cell's id
    names: tuple[str, ...]  # what it defines
    code: str  # its source as the notebook has it, decorators and comments on its lines included

    @property
    def where(self) -> str:
        return f"notebooks/{self.notebook}, cell {self.cell}"


def _python(source: str) -> str:
    """The cell's source with magics and shell escapes blanked (a nested one becomes ``pass``), line numbers kept."""
    lines = source.split("\n")
    for i, line in enumerate(lines):
        if match := MAGIC.match(line):
            lines[i] = f"{match.group(1)}pass" if match.group(1) else ""
    return "\n".join(lines)


def _defined(node: ast.stmt) -> tuple[str, ...] | None:
    """The names a def, class or assignment to plain names defines; None for any other statement."""
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return (node.name,)
    targets = node.targets if isinstance(node, ast.Assign) else [node.target] if (
        isinstance(node, ast.AnnAssign) and node.value is not None) else None
    if targets is None:
        return None
    names = []
    for target in targets:
        elements = target.elts if isinstance(target, (ast.Tuple, ast.List)) else [target]
        if not all(isinstance(e, ast.Name) for e in elements):
            return None
        names += [e.id for e in elements]
    return tuple(names)


def _kind(node: ast.stmt) -> str:
    return {ast.Expr: "an expression", ast.If: "an if statement", ast.For: "a for loop", ast.With: "a with block",
            ast.Import: "an import", ast.ImportFrom: "an import", ast.AugAssign: "an augmented assignment",
            ast.Try: "a try block", ast.While: "a while loop"}.get(type(node), f"a {type(node).__name__} statement")


def rules_of_cell(source: str, notebook: str, cell: str) -> list[Rule]:
    """The statements of one code cell marked ``#@save``, in order."""
    where = f"notebooks/{notebook}, cell {cell}"
    source = _python(source)
    lines = source.split("\n")
    if not any(line.strip().replace(" ", "") == MARKER for line in lines):
        return []
    try:
        tree = ast.parse(source)
    except SyntaxError as error:
        raise ExportError(f"{where}: a cell with {MARKER} must be Python (line {error.lineno}: {error.msg})") from None
    marks = [token.start[0] for token in tokenize.generate_tokens(io.StringIO(source).readline)  # not in a string
             if token.type == tokenize.COMMENT and token.string.replace(" ", "") == MARKER
             and lines[token.start[0] - 1].strip() == token.string.strip()]  # a line of its own
    first_line: dict[int, ast.stmt] = {}
    for node in tree.body:  # the first statement of a line (a second one after ";" is refused below)
        first_line.setdefault(min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])]), node)
    found = []
    for mark in marks:
        node = first_line.get(mark + 1)
        if node is None or lines[mark - 1] != lines[mark - 1].lstrip():
            raise ExportError(f"{where}, line {mark}: {MARKER} must be directly above a top-level def, class or "
                              "assignment (above its decorators), with no blank or comment line between")
        names = _defined(node)
        if names is None:
            raise ExportError(f"{where}, line {mark}: {MARKER} marks {_kind(node)}; only a top-level def, class or "
                              "assignment to names can be a rule of the series")
        rest = lines[node.end_lineno - 1].encode()[node.end_col_offset:].decode().strip()  # offsets count bytes
        if rest and not rest.startswith("#"):
            raise ExportError(f"{where}, line {node.end_lineno}: the statement marked {MARKER} shares its line with "
                              f"another ({rest!r}); put it on a line of its own")
        code = "\n".join(lines[mark:node.end_lineno]).rstrip()
        found.append(Rule(notebook, cell, names, code))
    return found


def collect(notebooks: Path = NOTEBOOKS) -> list[Rule]:
    """Every marked statement of ``notebooks/0*.ipynb``, in notebook and cell order; a name marked twice is refused."""
    rules, seen = [], {}
    for path in sorted(Path(notebooks).glob("0*.ipynb")):
        for index, cell in enumerate(json.loads(path.read_text(encoding="utf-8"))["cells"]):
            if cell.get("cell_type") != "code":
                continue
            source = cell["source"] if isinstance(cell["source"], str) else "".join(cell["source"])
            for rule in rules_of_cell(source, path.name, str(cell.get("id") or f"#{index}")):
                for name in rule.names:
                    if name in seen:
                        raise ExportError(f"{rule.where}: {name} is marked {MARKER} here and in {seen[name]}; "
                                          "a rule is written once")
                    seen[name] = rule.where
                rules.append(rule)
    return rules


def _globals_read(code: str) -> set[str]:
    """The global names a piece of module code reads (functions' and classes' bodies, defaults and decorators)."""
    def walk(table: symtable.SymbolTable, top: bool) -> set[str]:
        out = {s.get_name() for s in table.get_symbols() if s.is_referenced() and (
            not (s.is_assigned() or s.is_imported() or s.is_namespace()) if top else s.is_global())}
        for child in table.get_children():
            out |= walk(child, False)
        return out
    return walk(symtable.symtable(code, "rules", "exec"), True)


def _header(used: set[str]) -> str:
    """isort's layout (sections; plain imports, then from-imports; constants, classes, functions) for ``used``."""
    sections = []
    for section in sorted({PROVIDED[n][0] for n in used}):
        mine = [n for n in used if PROVIDED[n][0] == section]
        plain = sorted(f"import {PROVIDED[n][1]}" + (f" as {n}" if n != PROVIDED[n][1] else "")
                       for n in mine if PROVIDED[n][2] is None)
        froms = []
        for module in sorted({PROVIDED[n][1] for n in mine if PROVIDED[n][2] is not None}):
            names = sorted((PROVIDED[n][2] for n in mine if PROVIDED[n][1] == module and PROVIDED[n][2]),
                           key=lambda n: (0 if n.isupper() else 1 if n[0].isupper() else 2, n))
            line = f"from {module} import {', '.join(names)}"
            if len(line) > LINE_LENGTH:
                line = f"from {module} import (\n" + "".join(f"    {n},\n" for n in names) + ")"
            froms.append(line)
        sections.append("\n".join(plain + froms))
    return "\n\n".join(sections)


def _docstring(rules: list[Rule]) -> str:
    by_cell: dict[str, list[str]] = {}
    for rule in rules:
        by_cell.setdefault(rule.where, []).extend(rule.names)
    listing = "\n".join(textwrap.fill(f"- {where}: {', '.join(names)}", LINE_LENGTH - 4, subsequent_indent="  ")
                        for where, names in by_cell.items())
    return (f'"""The series\' decision rules, generated from the notebooks\' {MARKER} cells by ``make rules``\n'
            "(tools/export_rules.py): each is defined once, in the notebook cell where it is first used and\n"
            "explained, and the package, the later notebooks and the tests import it from here.\n\n"
            "Do not edit this file: edit the rule in its notebook cell and run ``make rules`` again (a unit test\n"
            "fails while this file and the notebooks differ). Where each definition comes from (the comment above\n"
            "each definition names it too):\n\n"
            f"{listing}\n"
            '"""')


def render(notebooks: Path = NOTEBOOKS) -> str:
    """The text of specdec_helpers/costmodel/rules.py from the ``#@save`` statements of ``notebooks/0*.ipynb``."""
    rules = collect(notebooks)
    defined = {name for rule in rules for name in rule.names}
    used: set[str] = set()
    for rule in rules:
        try:
            read = _globals_read(rule.code)
        except SyntaxError as error:  # e.g. a marked name declared global or nonlocal in a way symtable refuses
            raise ExportError(f"{rule.where}: {', '.join(rule.names)} cannot be exported ({error.msg})") from None
        unknown = sorted(read - defined - set(PROVIDED) - set(dir(builtins)))
        if unknown:
            raise ExportError(
                f"{rule.where}: {', '.join(rule.names)} reads {', '.join(unknown)}, which is neither a rule marked "
                f"{MARKER} nor a name the rules module imports (tools/export_rules.py PROVIDED): a notebook parameter "
                "or another cell's name cannot be part of a rule; pass it as an argument, or mark it")
        used |= read & set(PROVIDED)
    head = _docstring(rules) + (f"\n\n{_header(used)}" if used else "")
    body = "\n\n\n".join(f"# {rule.where}\n{rule.code}" for rule in rules)
    text = f"{head}\n\n\n{body}\n" if body else f"{head}\n"
    compile(text, str(TARGET), "exec")
    return text


def main() -> int:
    try:
        text = render()
    except ExportError as error:
        print(f"make rules: {error}", file=sys.stderr)
        return 1
    changed = not TARGET.exists() or TARGET.read_text(encoding="utf-8") != text
    if changed:
        TARGET.write_text(text, encoding="utf-8")
    marked = sum(line.startswith("# notebooks/") for line in text.splitlines())
    print(f"{TARGET.relative_to(ROOT)}: {marked} statement(s) from the notebooks' {MARKER} cells, "
          + ("written" if changed else "unchanged"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
