"""Two run folders side by side: does the series say the same thing twice on one machine?

    python -m tools.compare_runs runs/<first> runs/<second> [--out FILE.md]

``make compare RUNS="runs/a runs/b"`` calls this. For notebook 04 it sets each run's best measured k per class next
to the other's and to the k's its own sweep cannot tell apart from the best (their decode speedups' ranges over the
prompts overlap the best's); for 05, every cell's speedup with its 95% interval and the series' reading of it, and
whether each run's point lies inside the other's interval. The hardware line of each run (CPU and its flags) heads
the page: only runs on one machine, back to back, are compared here.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd

from specdec_helpers.costmodel.rules import best_measured_k
from specdec_helpers.report.record import read_records


def _read(run: Path, name: str) -> pd.DataFrame:
    path = run / "results" / f"{name}.csv"
    return pd.read_csv(path) if path.exists() else pd.DataFrame()


def hardware(run: Path) -> str:
    for name in ("04_candidates", "04_k_sweep", "05_requests", "07_by_class"):
        table = _read(run, name)
        if "hardware" in table and len(table):
            return str(table["hardware"].iloc[0])
    return "unknown hardware"


def best_k(run: Path) -> dict[str, tuple[int, list[int]]]:
    """Per class: 04's best measured k and the k's it cannot tell apart (``rules.best_measured_k``, 04's rule)."""
    sweep = _read(run, "04_k_sweep")
    return best_measured_k(sweep) if len(sweep) else {}


def cells_05(run: Path) -> pd.DataFrame:
    cells = _read(run, "05_cells")
    readings = read_records(run / "notebooks" / "05_structured_vs_creative.ipynb").get("cell_readings", {}) \
        if (run / "notebooks" / "05_structured_vs_creative.ipynb").exists() else {}
    if cells.empty:
        return cells
    cells = cells.assign(cell=[f"{c}@{t:g}" for c, t in zip(cells["class"], cells["temperature"])])
    return cells.assign(reading=cells["cell"].map(readings)).set_index("cell")


def _interval(r: pd.Series) -> str:
    if pd.notna(r["speedup_ci_low"]):
        return f"{r['speedup']:.2f}x [{r['speedup_ci_low']:.2f}, {r['speedup_ci_high']:.2f}]"
    return f"{r['speedup']:.2f}x (range {r['speedup_min']:.2f}-{r['speedup_max']:.2f})"


def _inside(x: float, r: pd.Series) -> bool:
    low, high = ((r["speedup_ci_low"], r["speedup_ci_high"]) if pd.notna(r["speedup_ci_low"])
                 else (r["speedup_min"], r["speedup_max"]))
    return bool(low <= x <= high)


def compare(first: Path, second: Path) -> tuple[str, bool]:
    """The page (Markdown) and whether the two runs agree by the three tests above."""
    lines = [f"# {first.name} and {second.name} side by side", "",
             f"- first: `{first.name}` on {hardware(first)}", f"- second: `{second.name}` on {hardware(second)}", ""]
    agree = True
    k1, k2 = best_k(first), best_k(second)
    if k1 and k2:
        lines += ["## 04: best measured k per class", "",
                  "| class | first: best k (not told apart) | second: best k (not told apart) | same answer |",
                  "|---|---|---|---|"]
        for cls in sorted(set(k1) & set(k2)):
            (b1, t1), (b2, t2) = k1[cls], k2[cls]
            same = b1 == b2 or b1 in t2 or b2 in t1
            agree &= same
            ties1, ties2 = (", ".join(map(str, t)) or "none" for t in (t1, t2))
            lines.append(f"| {cls} | {b1} ({ties1}) | {b2} ({ties2}) | {'yes' if same else '**no**'} |")
        lines.append("")
    c1, c2 = cells_05(first), cells_05(second)
    if len(c1) and len(c2):
        lines += ["## 05: end-to-end speedup per cell (95% interval), and the series' reading", "",
                  "| cell | first | second | each inside the other's interval | same reading |", "|---|---|---|---|---|"]
        for cell in [c for c in c1.index if c in c2.index]:
            a, b = c1.loc[cell], c2.loc[cell]
            inside = _inside(a["speedup"], b) and _inside(b["speedup"], a)
            same = a["reading"] == b["reading"]
            agree &= inside and same
            lines.append(f"| {cell} | {_interval(a)}, {a['reading']} | {_interval(b)}, {b['reading']} | "
                         f"{'yes' if inside else '**no**'} | {'yes' if same else '**no**'} |")
        lines.append("")
    lines.append("The two runs " + ("agree on every point above." if agree else "**disagree** where marked."))
    return "\n".join(lines) + "\n", agree


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("first", type=Path)
    parser.add_argument("second", type=Path)
    parser.add_argument("--out", type=Path, help="write the page here as well as to the console")
    args = parser.parse_args(argv)
    for run in (args.first, args.second):
        if not (run / "results").is_dir():
            parser.error(f"{run} is not a run folder (no results/ in it): pass two folders under runs/")
    page, agree = compare(args.first, args.second)
    print(page)
    if args.out:
        args.out.write_text(page)
    return 0 if agree else 1


if __name__ == "__main__":
    sys.exit(main())
