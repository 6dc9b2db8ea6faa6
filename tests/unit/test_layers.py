"""The package's layering as a tested fact: every import in ``specdec_helpers/`` and ``tools/`` (module-level and
inside functions) is parsed; none may reach a later layer (``specdec_helpers.LAYERS``), form a cycle, import a
private name from another module, or reach ``tools`` or ``tests`` from the package."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from specdec_helpers import LAYERS

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("specdec_helpers", "tools")


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(root: Path) -> dict[str, list[tuple[str, str, int]]]:
    """For each module of PACKAGES under ``root``: (imported module, imported name or "", line) of every import of
    PACKAGES. ``from a import b`` counts as importing the module ``a.b`` when that is a module."""
    files = {module_name(p, root): p for pkg in PACKAGES for p in (root / pkg).rglob("*.py")}
    found: dict[str, list[tuple[str, str, int]]] = {}
    for name, path in files.items():
        edges = found.setdefault(name, [])
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.Import):
                edges += [(a.name, "", node.lineno) for a in node.names if a.name.split(".")[0] in PACKAGES]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module \
                    and node.module.split(".")[0] in PACKAGES:
                for alias in node.names:
                    sub = f"{node.module}.{alias.name}"
                    edges.append((sub, "", node.lineno) if sub in files else (node.module, alias.name, node.lineno))
    return found


def layer(module: str) -> int | None:
    parts = module.split(".")
    if parts[0] != "specdec_helpers" or len(parts) < 2 or parts[1] not in LAYERS:
        return None
    return LAYERS.index(parts[1])


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index, low, stack, on_stack, found, counter = {}, {}, [], set(), [], [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def violations(root: Path = ROOT) -> list[str]:
    """Every breach of the layering under ``root``, one line each (empty: the layering holds)."""
    found, out = imports(root), []
    for importer, edges in sorted(found.items()):
        for target, name, line in edges:
            where = f"{importer} (line {line}) imports {target}{'.' + name if name else ''}"
            if importer.startswith("specdec_helpers") and not target.startswith("specdec_helpers"):
                out.append(f"{where}: the package never imports tools or tests")
            low, high = layer(importer), layer(target)
            if low is not None and high is not None and high > low:
                out.append(f"{where}: {LAYERS[high]} is a later layer than {LAYERS[low]}")
            if name.startswith("_") and target != importer:
                out.append(f"{where}: a private name, used outside its module")
    graph = {m: {t for t, _, _ in edges if t in found and t != m} for m, edges in found.items()}
    out += [f"import cycle: {' <-> '.join(c)}" for c in cycles(graph)]
    return out


def test_every_import_respects_the_layers():
    assert violations() == []


def test_every_part_of_the_package_has_a_layer():
    parts = {p.name if p.is_dir() else p.stem for p in (ROOT / "specdec_helpers").iterdir()
             if (p.is_dir() and (p / "__init__.py").exists()) or (p.suffix == ".py" and p.stem != "__init__")}
    assert parts == set(LAYERS)


@pytest.mark.parametrize("source, added, expected", [
    ("specdec_helpers/costmodel/theory.py", "from specdec_helpers.engine.serving import VLLMServer\n", "later layer"),
    ("specdec_helpers/engine/cpu.py", "def f():\n    from specdec_helpers.report import runs\n", "later layer"),
    ("specdec_helpers/report/runs.py", "from specdec_helpers.engine.cpu import _flags\n", "private name"),
    ("tools/profiles.py", "from tools.run_series import main\n", "import cycle"),
    ("specdec_helpers/stats.py", "import tools.profiles\n", "never imports tools"),
])
def test_the_check_fails_on_each_kind_of_breach(tmp_path, source, added, expected):
    """A copy of the tree, clean, then with one breach added: the check names that breach and nothing else."""
    for pkg in PACKAGES:
        for path in (ROOT / pkg).rglob("*.py"):
            target = tmp_path / path.relative_to(ROOT)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(path.read_text())
    assert violations(tmp_path) == []
    edited = tmp_path / source
    edited.write_text(edited.read_text() + "\n" + added)
    found = violations(tmp_path)
    assert found and all(expected in line for line in found), found
