"""Each notebook's key numbers (data/reference/spec.yaml) next to a committed reference run: a difference outside
the noise says what to check, never fails. Paths: ``/`` between keys, ``*`` any key, ``name[field=*]`` list items."""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import yaml

from specdec_helpers.costmodel.verdict import decision_side
from specdec_helpers.engine.cpu import cpu_serving_format, cpu_speed_flags
from specdec_helpers.report.provenance import visible_gpu
from specdec_helpers.report.record import record, recorded
from specdec_helpers.report.runs import REPO_ROOT

REFERENCE_DIR = REPO_ROOT / "data" / "reference"
#: the CPU classes a reference belongs to (``<profile>-<class>.json``): the format the CPU serves under "auto",
#: which sets absolute speeds, greedy flips, KV sizes and the verify cost; a plain ``<profile>.json`` has none
CPU_CLASSES = ("int8-amx", "int8", "bf16", "float32")
DETECT = "detect"
STATUS_NO_PROFILE = "no reference for this profile"
STATUS_NO_NOTEBOOK = "no reference for this notebook"


class ReferenceError(ValueError):
    """A reference file or run folder that cannot be used; the message says what to do."""


@dataclass(frozen=True)
class KeyNumber:
    """One number to compare: ``tolerance`` absolute unless ``relative``, never below ``floor`` (a relative band
    around a value near 0, such as a lookup's c, calls noise a difference). ``decision``: a speedup, its verdict side
    compared first. ``scope``: "any" CPU, the same CPU "class" (format-dependent), or "machine" (never judged)."""

    path: str
    check: str
    tolerance: float = 0.0
    relative: bool = False
    floor: float = 0.0
    decision: bool = False
    scope: str = "any"


def _load_spec() -> dict[str, list[KeyNumber]]:
    data = yaml.safe_load((REFERENCE_DIR / "spec.yaml").read_text())  # "{LOAD}" in a check: texts["LOAD"]
    return {stem: [KeyNumber(**entry | {"check": entry["check"].format_map(data["texts"])}) for entry in entries]
            for stem, entries in data["notebooks"].items()}


SPEC: dict[str, list[KeyNumber]] = _load_spec()
_SELECT = re.compile(r"^(?P<name>[^\[\]]+)\[(?P<field>[^=\]]+)=(?P<value>[^\]]*)\]$")


def _expand(value: Any, parts: list[str], prefix: tuple[str, ...] = ()) -> Iterator[tuple[str, Any]]:
    """Concrete ``(path, value)`` pairs that a path with wildcards matches inside ``value``."""
    if not parts:
        yield "/".join(prefix), value
    elif isinstance(value, dict) and (selector := _SELECT.match(parts[0])):
        name, attr, wanted = selector.group("name", "field", "value")
        items = value.get(name)
        for item in items if isinstance(items, list) else []:
            if isinstance(item, dict) and attr in item and wanted in ("*", str(item[attr])):
                yield from _expand(item, parts[1:], prefix + (f"{name}[{attr}={item[attr]}]",))
    elif isinstance(value, dict):
        for key in list(value) if parts[0] == "*" else [parts[0]] if parts[0] in value else []:
            yield from _expand(value[key], parts[1:], prefix + (str(key),))


def expand(records: dict[str, Any], path: str) -> dict[str, Any]:  # every concrete path ``path`` matches
    return dict(_expand(records, [part for part in path.split("/") if part]))


def _pattern(path: str) -> re.Pattern:
    parts = [re.escape(p).replace(r"\*", r"[^/\]]+") for p in path.split("/") if p]
    return re.compile("^" + "/".join(parts) + "$")


def _show(value: Any) -> str:
    if value is None or isinstance(value, bool):
        return {None: "n/a", True: "yes", False: "no"}[value]
    return f"{value:.3g}" if isinstance(value, float) else str(value)


def compare(spec: KeyNumber, yours: Any, reference: Any, found: bool,
            same_class: bool = True) -> tuple[bool | None, str]:
    """``(outside, reading)``: ``outside`` is None when there is nothing to compare (or it must not be compared:
    an absolute speed, or a format-dependent number of another CPU class)."""
    if not found:
        return None, "not recorded in this run (different parameters, or the cell did not run)"
    if spec.scope == "machine":
        return None, "for information: an absolute speed or time of another machine (compare the speedups)"
    if spec.scope == "class" and not same_class:
        return None, "for information: it depends on the served format, and the reference is of another CPU class"
    if yours is None and reference is None:
        return False, "within the noise (neither run has a value)"
    if yours is None or reference is None:
        return True, f"outside: one run has no value; check {spec.check}"
    if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (yours, reference)):
        if not (math.isfinite(yours) and math.isfinite(reference)):
            return None, "not comparable (not a finite number)"
        side = ""
        # the side of 1 + min_gain first (a side, not a verdict: that needs an interval); a number close to the
        # reference can still be on the other side of 1
        if spec.decision:
            mine, theirs = decision_side(yours), decision_side(reference)
            if mine != theirs:
                return True, f"other side of 1 + min_gain (yours: {mine}, the reference: {theirs}): check {spec.check}"
            side = f"same side of 1 + min_gain ({mine}); "
            if not same_class:
                return False, f"{side}the size of a speedup is not compared across CPU classes"
        allowed = max(abs(reference) * spec.tolerance if spec.relative else spec.tolerance, spec.floor)
        if abs(yours - reference) <= allowed + 1e-12:
            return False, f"{side}within the noise"
        direction = "higher" if yours > reference else "lower"
        tolerance = f"±{spec.tolerance:.0%}" if spec.relative else f"±{spec.tolerance:g}"
        tolerance += f", at least ±{spec.floor:g}" if spec.floor else ""
        return True, f"{side}outside ({direction} than reference {tolerance}): check {spec.check}"
    if yours == reference:
        return False, "same as the reference"
    return True, f"differs: check {spec.check}"


def cpu_class(served_format: str, flags: str | list[str]) -> str:
    """A CPU run's class: the format it served, with int8 split by AMX (Intel's tile units multiply int8 several times
    faster than AVX-512 VNNI alone, so an AMX run's times are not what a VNNI-only AMD EPYC should expect)."""
    words = flags.split() if isinstance(flags, str) else list(flags)
    return "int8-amx" if served_format == "int8" and any(w.startswith("amx") for w in words) else served_format


def machine_class() -> str | None:
    """The CPU class of a run on this machine (:func:`cpu_class` of what ``served_format = "auto"`` serves here and
    the CPU's flags); None on a GPU."""
    return None if visible_gpu() else cpu_class(cpu_serving_format("auto"), cpu_speed_flags())


def reference_file(profile: str, reference_dir: str | Path | None = None,
                   cpu_class: str | None = None) -> tuple[Path | None, bool]:
    """``(file, same_class)``: ``<profile>-<cpu_class>.json``, else the plain ``<profile>.json`` (a GPU profile's),
    else another class's (``same_class`` False); ``(None, False)`` when there is none."""
    folder = Path(reference_dir or REFERENCE_DIR)
    candidates = ([(folder / f"{profile}-{cpu_class}.json", True)] if cpu_class else []) + \
        [(folder / f"{profile}.json", True)] + \
        [(folder / f"{profile}-{other}.json", False) for other in CPU_CLASSES if other != cpu_class]
    return next(((path, same) for path, same in candidates if path.is_file()), (None, False))


def load_reference(path: Path) -> dict[str, Any]:
    """A reference file (:func:`reference_file` finds a profile's); a malformed one raises."""
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise ReferenceError(f"{path} is not valid JSON ({exc}); rebuild it with `make reference RUN=...`.") from exc
    if not isinstance(data, dict) or not isinstance(data.get("notebooks"), dict):
        raise ReferenceError(f"{path} has no 'notebooks' mapping; rebuild it with `make reference RUN=...`.")
    return data


def comparison_rows(notebook_stem: str, yours: dict[str, Any], reference_values: dict[str, Any],
                    same_class: bool = True) -> list[dict]:
    rows = []
    for spec in SPEC[notebook_stem]:
        pattern, found = _pattern(spec.path), expand(yours, spec.path)
        for path, ref_value in reference_values.items():
            if pattern.match(path):
                outside, reading = compare(spec, found.get(path), ref_value, path in found, same_class)
                rows.append({"number": path, "yours": found.get(path), "reference": ref_value,
                             "outside": outside, "reading": reading})
    return rows


def _describe(reference: dict[str, Any], same_class: bool = True, yours: str | None = None) -> str:
    prov = reference.get("provenance", {})
    params = prov.get("parameters", {})
    pair = params.get("target_model", "?") + (f" + {params['draft_model']}" if params.get("draft_model") else "")
    size = "smoke (test-sized) parameters" if prov.get("smoke") else "the profile's parameters"
    when = str(prov.get("measured_at", "?"))[:10]
    cls = prov.get("cpu_class")
    text = (f"reference run of `{reference.get('profile', '?')}` ({pair}, {size}) on {prov.get('hardware', '?')}"
            + (f", CPU class {cls}" if cls else "") + f", {prov.get('vllm_package', 'vllm')} "
            f"{prov.get('vllm_version', '?')}, {when}")
    if prov.get("stale"):
        text += f"; **stale**: {prov['stale']}"
    if not same_class:
        text += (f"; **another CPU class than this run's ({yours or 'unknown'})**: speedups are compared by their "
                 "side of 1 + min_gain only, format-dependent numbers not at all")
    return text


def _verdict(rows: list[dict]) -> str:
    outside, compared = sum(bool(r["outside"]) for r in rows), sum(r["outside"] is not None for r in rows)
    if not compared:
        return "none of the key numbers was recorded in this run, so there is nothing to compare"
    if not outside:
        return f"all {compared} key numbers are within the noise of the reference"
    return (f"{outside} of {compared} key numbers {'is' if outside == 1 else 'are'} outside the noise of the "
            "reference (not an error: read what to check in the last column)")


def what_you_should_see(notebook_stem: str, profile: str, *, yours: dict[str, Any] | None = None,
                        reference_dir: str | Path | None = None, show: bool = True,
                        cpu_class: str | None = DETECT) -> dict[str, Any]:
    """Compare this kernel's recorded numbers with ``profile``'s reference run for this machine's CPU class; show
    and record a summary."""
    if notebook_stem not in SPEC:
        raise KeyError(f"No key numbers defined for notebook {notebook_stem!r}; known: {', '.join(SPEC)}. "
                       "Add an entry to data/reference/spec.yaml.")
    yours = recorded() if yours is None else yours
    cpu_class = machine_class() if cpu_class == DETECT else cpu_class
    path, same_class = reference_file(profile, reference_dir, cpu_class)
    reference = load_reference(path) if path else None
    rows: list[dict] = []
    if reference is None:
        status = STATUS_NO_PROFILE
        wanted = Path(reference_dir or REFERENCE_DIR) / f"{profile}{f'-{cpu_class}' if cpu_class else ''}.json"
        shown = wanted.resolve().relative_to(REPO_ROOT) if wanted.resolve().is_relative_to(REPO_ROOT) else wanted
        text = (f"**What you should see:** there is no reference run for profile `{profile}` yet (`{shown}`). "
                "Your numbers above are the measurement; `make reference RUN=runs/<dir>` turns a run into one.")
    elif notebook_stem not in reference["notebooks"]:
        status = STATUS_NO_NOTEBOOK
        text = (f"**What you should see:** the {_describe(reference, same_class, cpu_class)} did not include "
                f"`{notebook_stem}`; your numbers above are the measurement.")
    else:
        status = "compared"
        rows = comparison_rows(notebook_stem, yours, reference["notebooks"][notebook_stem].get("values", {}),
                               same_class)
        table = ["| number | yours | reference | reading |", "|---|---|---|---|"]
        table += [f"| `{r['number']}` | {_show(r['yours'])} | {_show(r['reference'])} | "
                  f"{'⚠️ ' if r['outside'] else ''}{r['reading']} |" for r in rows]
        text = (f"**What you should see** ({_describe(reference, same_class, cpu_class)}): {_verdict(rows)}.\n\n"
                + "\n".join(table))
    summary = {"status": status, "rows": len(rows), "outside": sum(1 for r in rows if r["outside"]),
               "reference": path.name if path else None, "same_class": same_class}
    if show:
        from IPython.display import display

        display({"text/markdown": text, "text/plain": text}, raw=True)
        record("what_you_should_see", summary)
    return summary
