"""The package's layering as a contract: import-linter checks the contracts of pyproject.toml ([tool.importlinter]):
each part of ``specdec_helpers`` imports only the parts below it, the package never imports ``tools``, and sibling
modules form no import cycle. Imports inside functions count. import-linter has no contract for the one rule kept
here by hand: a private name is used only inside its module."""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("specdec_helpers", "tools")
#: contract id -> the name lint-imports prints
CONTRACTS = {c["id"]: c["name"] for c in
             tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]}


def lint_imports(root: Path) -> subprocess.CompletedProcess:
    """``lint-imports`` on the tree under ``root``, with that tree first on the path (not the installed package)."""
    command = [str(Path(sys.executable).parent / "lint-imports"), str(root / "pyproject.toml"), "--no-cache"]
    env = {**os.environ, "PYTHONPATH": str(root), "COLUMNS": "200"}  # one line per contract
    return subprocess.run(command, cwd=root, env=env, capture_output=True, text=True, timeout=120)


def broken(result: subprocess.CompletedProcess) -> set[str]:
    """The names of the contracts ``lint-imports`` reported broken."""
    return {line.removesuffix(" BROKEN") for line in result.stdout.splitlines() if line.endswith(" BROKEN")}


def private_imports(root: Path) -> list[str]:
    """Every ``from module import _name`` in PACKAGES under ``root`` that reaches into another module."""
    found = []
    for path in sorted(p for pkg in PACKAGES for p in (root / pkg).rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] in PACKAGES:
                found += [f"{path.relative_to(root)} (line {node.lineno}) imports {node.module}.{a.name}: a private "
                          f"name, used outside its module" for a in node.names if a.name.startswith("_")]
    return found


def test_every_import_respects_the_contracts():
    result = lint_imports(ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"{len(CONTRACTS)} kept, 0 broken" in result.stdout and not broken(result), result.stdout


def test_no_private_name_is_used_outside_its_module():
    assert private_imports(ROOT) == []


@pytest.mark.parametrize("source, added, expected", [
    ("specdec_helpers/costmodel/theory.py", "from specdec_helpers.engine.serving import VLLMServer\n", "layers"),
    ("specdec_helpers/engine/cpu.py", "def f():\n    from specdec_helpers.report import runs\n", "layers"),
    ("specdec_helpers/newpart.py", "import specdec_helpers.stats\n", "layers"),  # not given a layer
    ("specdec_helpers/stats.py", "import tools\n", "no-tools"),
    ("tools/profiles.py", "from tools.run_series import main\n", "no-cycles"),
    ("specdec_helpers/report/runs.py", "from specdec_helpers.engine.cpu import _flags\n", "private name"),
])
def test_the_check_fails_on_each_kind_of_breach(tmp_path, source, added, expected):
    """A copy of the tree with one breach added: the contract (or the private-name rule) it breaks fails. An upward
    import usually closes a cycle between two parts too, so the cycle contract may fail beside the layers."""
    for pkg in PACKAGES:
        shutil.copytree(ROOT / pkg, tmp_path / pkg, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path)
    edited = tmp_path / source
    edited.write_text((edited.read_text() if edited.exists() else "") + "\n" + added)
    result, privates = lint_imports(tmp_path), private_imports(tmp_path)
    if expected == "private name":
        assert result.returncode == 0 and len(privates) == 1 and expected in privates[0], (result.stdout, privates)
    else:
        assert result.returncode == 1 and not privates, result.stdout + result.stderr
        assert CONTRACTS[expected] in broken(result), result.stdout
        assert broken(result) <= {CONTRACTS[expected], CONTRACTS["no-cycles"]}, result.stdout
