"""How each notebook reads, counted from its own file: the size of its code cells and how much of its code builds
prose or keeps records. ``python -m tools.notebook_shape`` prints the table; tests/unit/test_notebook_shape.py
holds the series to its limits (a learner reads short cells that each do one thing and show it)."""

from __future__ import annotations

import json
import re
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"

#: the limits of a notebook that reads like a book: a median code cell a glance takes in, few long cells
#: (a long one defines what the notebook teaches), none a learner has to scroll through
MEDIAN_LINES, LONG_LINES, MAX_LONG_CELLS, MAX_LINES = 12, 30, 3, 50

# a line that builds a sentence: an f-string with three words or more of text, or markdown made in code
_PROSE = re.compile(r"""f(["'])(?=[^"'{]*\b[a-z]+ [a-z]+ [a-z]+\b)|Markdown\(""")
# a line that keeps something for later (records, tables, figures, their captions and provenance)
_KEEPING = re.compile(r"\b(record|save_table|save_figure|caption|provenance|keep_records_in)\(")
# a call that writes what later notebooks and the run's page read: gathered in the last code cell of its section
_KEEPS = re.compile(r"^[^#]*\b(record|save_table|save_figure)\(")
# a section starts at a markdown heading of level 1 or 2
_HEADING = re.compile(r"#{1,2} ")


@dataclass(frozen=True)
class Shape:
    """One notebook's numbers (code cells only, the ``parameters`` cell left out)."""

    notebook: str
    code_cells: int
    median_lines: float
    long_cells: int
    longest: int
    prose_share: float
    keeping_share: float
    scattered: tuple[str, ...] = ()  # cells that keep records but are not their section's last code cell


    @property
    def reads_like_a_book(self) -> bool:
        return (self.median_lines <= MEDIAN_LINES and self.long_cells <= MAX_LONG_CELLS
                and self.longest <= MAX_LINES)

    @property
    def keeps_out_of_sight(self) -> bool:
        """What the notebook keeps is written at the end of each section, not beside what it measures."""
        return not self.scattered


def code_lines(cell: dict) -> list[str]:
    """The non-blank lines of a cell's source."""
    return [line for line in _source(cell).splitlines() if line.strip()]


def _source(cell: dict) -> str:
    return "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]


def scattered_keeping(all_cells: list[dict]) -> tuple[str, ...]:
    """Ids of the code cells that record, save a table or save a figure without being the last code cell of their
    section (a section runs from one level-1 or level-2 heading to the next)."""
    sections: list[list[dict]] = [[]]
    for cell in all_cells:
        if cell["cell_type"] == "markdown" and _HEADING.match(_source(cell)):
            sections.append([])
        elif cell["cell_type"] == "code":
            sections[-1].append(cell)
    return tuple(str(c.get("id", "?")) for section in sections for c in section[:-1]
                 if any(_KEEPS.search(line) for line in code_lines(c)))


def shape(path: Path) -> Shape:
    """Count one notebook."""
    all_cells = json.loads(path.read_text())["cells"]
    cells = [c for c in all_cells
             if c["cell_type"] == "code" and "parameters" not in c.get("metadata", {}).get("tags", [])]
    sizes = [len(code_lines(c)) for c in cells] or [0]
    lines = [line for c in cells for line in code_lines(c)] or [""]
    return Shape(path.stem, len(cells), statistics.median(sizes), sum(n > LONG_LINES for n in sizes), max(sizes),
                 _share(_PROSE, lines), _share(_KEEPING, lines), scattered_keeping(all_cells))


def _share(pattern: re.Pattern, lines: list[str]) -> float:
    return sum(bool(pattern.search(line)) for line in lines) / len(lines)


def shapes(folder: Path = NOTEBOOKS) -> list[Shape]:
    """Every numbered notebook of the series, in order."""
    return [shape(p) for p in sorted(folder.glob("[0-9][0-9]_*.ipynb"))]


def table(rows: list[Shape]) -> str:
    """The rows as a markdown table, with the limits in its header."""
    head = (f"| notebook | code cells | median lines (<= {MEDIAN_LINES}) | cells over {LONG_LINES} (<= "
            f"{MAX_LONG_CELLS}) | longest (<= {MAX_LINES}) | lines building prose | lines keeping records | cells keeping records mid-section | ok |\n"
            "|---|---|---|---|---|---|---|---|---|")
    body = [f"| {r.notebook} | {r.code_cells} | {r.median_lines:g} | {r.long_cells} | {r.longest} | "
            f"{r.prose_share:.0%} | {r.keeping_share:.0%} | {len(r.scattered)} | "
            f"{'yes' if r.reads_like_a_book and r.keeps_out_of_sight else 'no'} |" for r in rows]
    return "\n".join([head, *body])


def main() -> int:
    print(table(shapes()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
