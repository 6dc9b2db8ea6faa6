"""Every relative link in the README, the docs, WORKSHOP.md and the notebooks' text leads somewhere: the file exists
and, for a link to a section (``file.md#anchor``), the section does (anchors as GitHub makes them from headings)."""

from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCUMENTS = [ROOT / "README.md", ROOT / "WORKSHOP.md", *sorted((ROOT / "docs").glob("*.md")),
             ROOT / "data" / "prompts" / "README.md"]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
LINK = re.compile(r"\]\(([^)\s]+)\)")


def anchors(markdown: str) -> set[str]:
    """GitHub's anchors: each heading lower-cased, punctuation but - and _ dropped, spaces as -."""
    found = set()
    for heading in re.findall(r"^#+\s+(.+)$", markdown, re.M):
        found.add(re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-"))
    return found


def markdown_of(path: Path) -> str:
    if path.suffix == ".ipynb":
        return "\n".join(c.source for c in nbformat.read(path, as_version=4).cells if c.cell_type == "markdown")
    return path.read_text()


@pytest.mark.parametrize("path", DOCUMENTS + NOTEBOOKS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_and_anchor_exists(path):
    for target in LINK.findall(markdown_of(path)):
        if re.match(r"[a-z]+:", target):  # http:, https:, mailto:
            continue
        file, _, anchor = target.partition("#")
        resolved = (path.parent / file).resolve() if file else path
        assert resolved.exists(), f"{path.name} links to {target}, which does not exist"
        if anchor and resolved.suffix in (".md", ".ipynb"):
            assert anchor in anchors(markdown_of(resolved)), f"{path.name} links to {target}: no such section"


def test_the_readme_is_short_and_its_two_commands_come_before_any_result():
    text = (ROOT / "README.md").read_text()
    assert len(text.encode()) < 12_000
    assert text.index("make run") < text.index("make test") < text.index("<!-- reference:")
