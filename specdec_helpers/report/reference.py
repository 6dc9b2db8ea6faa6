"""What you should see: each notebook's key numbers next to a committed reference run.

A learner's numbers are noisy (another program on the machine, a different CPU, a cold cache), so a
difference is not an error. What helps is knowing *whether* a number is within the noise of a known
good run and, when it is not, what to check. This module holds:

* ``SPEC``: per notebook, the recorded keys worth comparing, how far from the reference a number
  may be before we call it outside the noise, and what to check when it is;
* ``build``: ``python -m specdec_helpers.reference build runs/<dir> [--profile P]`` turns an
  executed run folder into ``data/reference/<profile>.json`` (values + provenance: hardware, date,
  vLLM build, parameters, run time per notebook) and copies the headline figure (05's 2 x 2 chart);
  ``make reference RUN=runs/<dir>`` calls it;
* ``what_you_should_see(notebook_stem, profile)``: the cell near the end of every notebook. It
  compares what this kernel recorded (``record.recorded()``) with the reference, shows a small
  table with a one-line reading per number, and records ``what_you_should_see`` so the tests can
  assert that the cell ran. Numbers outside the noise never fail the notebook; a programming error
  (an unknown notebook, a malformed reference file) does.

Paths into recorded values use ``/`` between keys; ``*`` matches any key (one row per key found in
the reference), and ``name[field=*]`` picks the dicts of a list by one of their fields, e.g.
``candidates[candidate=*]/acceptance_rate``.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from specdec_helpers.report.record import record, recorded
from specdec_helpers.report.runs import REPO_ROOT

REFERENCE_DIR = REPO_ROOT / "data" / "reference"
FORMAT_VERSION = 1
# The README's headline figure: notebook 05's 2 x 2 (task class x temperature) speedup chart.
HEADLINE_FIGURE = "05_acceptance_and_speedup.png"

STATUS_COMPARED = "compared"
STATUS_NO_PROFILE = "no reference for this profile"
STATUS_NO_NOTEBOOK = "no reference for this notebook"


class ReferenceError(ValueError):
    """A reference file or run folder that cannot be used; the message says what to do."""


@dataclass(frozen=True)
class KeyNumber:
    """One number to compare: where it is, how much noise is normal, what to check otherwise.

    ``tolerance`` is absolute unless ``relative`` (then a share of the reference value). Booleans
    and strings must be equal (tolerance ignored).
    """

    path: str
    tolerance: float = 0.0
    relative: bool = False
    check: str = "the profile parameters are the reference's (see its provenance)"

    def allowed(self, reference: float) -> float:
        return abs(reference) * self.tolerance if self.relative else self.tolerance

    def describe_tolerance(self) -> str:
        return f"±{self.tolerance:.0%}" if self.relative else f"±{self.tolerance:g}"


_LOAD = "other programs using the CPU (`top`), the core count (`nproc`) and the CPU model"
_VERSION = "the vLLM build (00 prints it) and that the CPU sampling fix is active"

# Key numbers per notebook. Tolerances: what two runs of the same profile on the same 2-core machine
# differ by (timings ~30%, acceptance a few points; smoke runs with 2 prompts per class more).
SPEC: dict[str, list[KeyNumber]] = {
    "00_setup_check": [
        KeyNumber("greedy_outputs_identical", check=_VERSION + "; a rare floating-point tie may flip a token"),
        KeyNumber("acceptance_rate_draft", 0.05, check="the draft is the target itself here: anything below "
                  "1.0 at temperature 0 points at " + _VERSION),
        KeyNumber("acceptance_rate_draft_t08", 0.15, check=_VERSION),
        KeyNumber("mean_acceptance_length_draft", 0.5, check=_VERSION),
        KeyNumber("decode_tokens_per_s/*", 0.35, relative=True, check=_LOAD),
        KeyNumber("startup_s/*", 0.6, relative=True, check=_LOAD + "; the first start after a reboot reads "
                  "the model from disk"),
    ],
    "01_how_it_works": [
        KeyNumber("first_position_scratch", 0.15, check="the draft and max_tokens are the profile's; few "
                  "prompts make acceptance noisy"),
        KeyNumber("first_position_vllm", 0.15, check=_VERSION),
        KeyNumber("acceptance_rate", 0.15, check=_VERSION),
        KeyNumber("mean_acceptance_length", 0.5, check=_VERSION),
        KeyNumber("alpha", 0.15, check="the draft and k are the profile's"),
        KeyNumber("tv_correct", 0.05, check="tv_draws: fewer draws leave more sampling noise"),
        KeyNumber("verify_cost_v_by_kernel/*", 0.5, relative=True, check=_LOAD + "; one timed pass each, so "
                  "it is noisy (3.0-3.9 and 1.3-1.9 in two runs on one machine); CPUs and BLAS libraries differ "
                  "in how they multiply a few rows (on an Intel CPU the default kernel may already be fast)"),
        KeyNumber("e_sim_vs_closed_max_rel_err", 0.02, check="the simulation's number of draws"),
    ],
    "02_prefill_vs_decode": [
        KeyNumber("decode_tokens_per_s", 0.35, relative=True, check=_LOAD),
        KeyNumber("prefill_tokens_per_s", 0.35, relative=True, check=_LOAD),
        KeyNumber("itl_median_s", 0.35, relative=True, check=_LOAD),
        KeyNumber("achieved_bandwidth_gb_s", 0.35, relative=True, check=_LOAD + "; memory bandwidth differs "
                  "between machines"),
        KeyNumber("verify_cost/*", 0.3, check=_LOAD + "; v(k) is a ratio, so it moves less than raw times"),
        KeyNumber("decode_share/*", 0.1, check="max_tokens and request_shapes are the profile's"),
    ],
    "03_memory_budget": [
        KeyNumber("kv_tokens_reported/*", 0.05, relative=True, check="cpu_kv_cache_gib and max_model_len are "
                  "the profile's (vLLM sizes the KV cache from them)"),
        KeyNumber("kv_prediction_error", 0.05, check="the model configs in data/models/configs are unchanged"),
        KeyNumber("draft_concurrency_cost", 0, check="data/models/gpus.json and the configs are unchanged "
                  "(this number is computed, not measured)"),
    ],
    "04_choosing_a_draft": [
        KeyNumber("candidates[candidate=*]/acceptance_rate", 0.15, check="draft_candidates, k and max_tokens "
                  "are the profile's; few prompts make acceptance noisy"),
        KeyNumber("candidates[candidate=*]/c", 0.35, relative=True, check=_LOAD),
        KeyNumber("candidates[candidate=*]/measured_speedup", 0.3, relative=True, check=_LOAD),
        KeyNumber("recommendation/candidate", check="the candidates' speedups above: a close call can flip "
                  "between runs"),
    ],
    "05_structured_vs_creative": [
        KeyNumber("acceptance/*", 0.12, check="temperatures and draft_sample_method are the profile's; at "
                  "temperature > 0 see " + _VERSION),
        KeyNumber("speedup/*", 0.3, relative=True, check=_LOAD),
    ],
    "06_context_and_concurrency": [
        KeyNumber("context_speedups/*/end_to_end_speedup", 0.3, relative=True, check=_LOAD),
        KeyNumber("throughput_speedup_by_concurrency/*", 0.3, relative=True, check=_LOAD),
        KeyNumber("cost_inputs/alpha", 0.15, check="k and the draft are the profile's"),
        KeyNumber("cost_inputs/c", 0.35, relative=True, check=_LOAD),
        KeyNumber("crossover_concurrency", check="the throughput speedups above: a crossover near a level "
                  "can move by one level between runs"),
    ],
    "07_is_it_worth_it": [
        KeyNumber("verify_cost/*", 0.3, check=_LOAD),
        KeyNumber("verdict/enable", check="the expected gain below: a gain near 1.0x can flip the verdict"),
        KeyNumber("verdict/expected_gain", 0.3, relative=True, check=_LOAD),
    ],
}


# ----------------------------------------------------------------------------- paths into values
_SELECT = re.compile(r"^(?P<name>[^\[\]]+)\[(?P<field>[^=\]]+)=(?P<value>[^\]]*)\]$")


def _split(path: str) -> list[str]:
    return [part for part in path.split("/") if part]


def _expand(value: Any, parts: list[str], prefix: tuple[str, ...] = ()) -> Iterator[tuple[str, Any]]:
    """Concrete ``(path, value)`` pairs that a path with wildcards matches inside ``value``."""
    if not parts:
        yield "/".join(prefix), value
        return
    head, rest = parts[0], parts[1:]
    selector = _SELECT.match(head)
    if selector:
        if not isinstance(value, dict) or not isinstance(value.get(selector["name"]), list):
            return
        for item in value[selector["name"]]:
            if not isinstance(item, dict) or selector["field"] not in item:
                continue
            key = str(item[selector["field"]])
            if selector["value"] in ("*", key):
                yield from _expand(item, rest, prefix + (f"{selector['name']}[{selector['field']}={key}]",))
        return
    if not isinstance(value, dict):
        return
    keys = list(value) if head == "*" else [head] if head in value else []
    for key in keys:
        yield from _expand(value[key], rest, prefix + (str(key),))


def expand(records: dict[str, Any], path: str) -> dict[str, Any]:
    """All concrete paths (and their values) that ``path`` matches in ``records``."""
    return dict(_expand(records, _split(path)))


def lookup(records: dict[str, Any], concrete_path: str) -> tuple[bool, Any]:
    """``(found, value)`` for a path without wildcards."""
    if "*" in concrete_path:
        raise ValueError(f"lookup() needs a concrete path, got the pattern {concrete_path!r}")
    found = expand(records, concrete_path)
    if concrete_path in found:
        return True, found[concrete_path]
    return False, None


def _pattern(path: str) -> re.Pattern:
    return re.compile("^" + "/".join(re.escape(p).replace(r"\*", r"[^/\]]+") for p in _split(path)) + "$")


# ----------------------------------------------------------------------------- comparing
def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _show(value: Any) -> str:
    if value is None:
        return "n/a"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if _is_number(value):
        return f"{value:.3g}" if isinstance(value, float) else str(value)
    return str(value)


def compare(spec: KeyNumber, path: str, yours: Any, reference: Any, found: bool) -> tuple[bool | None, str]:
    """``(outside, reading)``: ``outside`` is None when there is nothing to compare."""
    if not found:
        return None, "not recorded in this run (different parameters, or the cell did not run)"
    if yours is None or reference is None:
        if yours is None and reference is None:
            return False, "within the noise (neither run has a value)"
        return True, f"outside: one run has no value; check {spec.check}"
    if _is_number(yours) and _is_number(reference):
        if not (math.isfinite(yours) and math.isfinite(reference)):
            return None, "not comparable (not a finite number)"
        allowed = spec.allowed(reference)
        if abs(yours - reference) <= allowed + 1e-12:
            return False, "within the noise"
        direction = "higher" if yours > reference else "lower"
        return True, f"outside ({direction} than reference {spec.describe_tolerance()}): check {spec.check}"
    if yours == reference:
        return False, "same as the reference"
    return True, f"differs: check {spec.check}"


def _short(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(REPO_ROOT))
    except ValueError:
        return str(path)


def reference_path(profile: str, reference_dir: str | Path | None = None) -> Path:
    return Path(reference_dir or REFERENCE_DIR) / f"{profile}.json"


def load_reference(profile: str, reference_dir: str | Path | None = None) -> dict[str, Any] | None:
    """The reference of ``profile``, or None when there is none. A malformed file raises."""
    path = reference_path(profile, reference_dir)
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise ReferenceError(f"{path} is not valid JSON ({exc}); rebuild it with `make reference RUN=...`.") from exc
    if not isinstance(data, dict) or not isinstance(data.get("notebooks"), dict):
        raise ReferenceError(f"{path} has no 'notebooks' mapping; rebuild it with `make reference RUN=...`.")
    return data


def comparison_rows(notebook_stem: str, yours: dict[str, Any], reference_values: dict[str, Any]) -> list[dict]:
    """One row per key number found in the reference: yours, the reference, and the reading."""
    if notebook_stem not in SPEC:
        raise KeyError(f"No key numbers defined for notebook {notebook_stem!r}; known: {', '.join(SPEC)}. "
                       "Add an entry to specdec_helpers.report.reference.SPEC.")
    rows = []
    for spec in SPEC[notebook_stem]:
        pattern = _pattern(spec.path)
        for path, ref_value in reference_values.items():
            if not pattern.match(path):
                continue
            found, value = lookup(yours, path)
            outside, reading = compare(spec, path, value, ref_value, found)
            rows.append({"number": path, "yours": value, "reference": ref_value, "outside": outside,
                         "reading": reading})
    return rows


def _describe(reference: dict[str, Any]) -> str:
    prov = reference.get("provenance", {})
    params = prov.get("parameters", {})
    pair = params.get("target_model", "?") + (f" + {params['draft_model']}" if params.get("draft_model") else "")
    size = "smoke (test-sized) parameters" if prov.get("smoke") else "the profile's parameters"
    when = str(prov.get("measured_at", "?"))[:10]
    return (f"reference run of `{reference.get('profile', '?')}` ({pair}, {size}) on {prov.get('hardware', '?')}, "
            f"{prov.get('vllm_package', 'vllm')} {prov.get('vllm_version', '?')}, {when}")


def _markdown(rows: list[dict]) -> str:
    lines = ["| number | yours | reference | reading |", "|---|---|---|---|"]
    for row in rows:
        mark = "⚠️ " if row["outside"] else ""
        lines.append(f"| `{row['number']}` | {_show(row['yours'])} | {_show(row['reference'])} | "
                     f"{mark}{row['reading']} |")
    return "\n".join(lines)


def what_you_should_see(notebook_stem: str, profile: str, *, yours: dict[str, Any] | None = None,
                        reference_dir: str | Path | None = None, show: bool = True) -> dict[str, Any]:
    """Compare this kernel's recorded numbers with the reference run of ``profile``; display a table.

    Returns (and records as ``what_you_should_see``) ``{"status", "rows", "outside"}``. Never raises
    because numbers differ; raises KeyError for a notebook without key numbers in ``SPEC`` and
    ReferenceError for a malformed reference file.
    """
    if notebook_stem not in SPEC:
        raise KeyError(f"No key numbers defined for notebook {notebook_stem!r}; known: {', '.join(SPEC)}.")
    yours = recorded() if yours is None else yours
    reference = load_reference(profile, reference_dir)
    rows: list[dict] = []
    if reference is None:
        status = STATUS_NO_PROFILE
        text = (f"**What you should see:** there is no reference run for profile `{profile}` yet "
                f"(`{_short(reference_path(profile, reference_dir))}`). "
                "Your numbers above are the measurement; `make reference RUN=runs/<dir>` turns a run into one.")
    elif notebook_stem not in reference["notebooks"]:
        status = STATUS_NO_NOTEBOOK
        text = (f"**What you should see:** the {_describe(reference)} did not include `{notebook_stem}`; "
                "your numbers above are the measurement.")
    else:
        status = STATUS_COMPARED
        rows = comparison_rows(notebook_stem, yours, reference["notebooks"][notebook_stem].get("values", {}))
        outside = [r for r in rows if r["outside"]]
        compared = [r for r in rows if r["outside"] is not None]
        if not compared:
            verdict = "none of the key numbers was recorded in this run, so there is nothing to compare"
        elif not outside:
            verdict = f"all {len(compared)} key numbers are within the noise of the reference"
        else:
            verb = "is" if len(outside) == 1 else "are"
            verdict = (f"{len(outside)} of {len(compared)} key numbers {verb} outside the noise of the reference "
                       "(not an error: read what to check in the last column)")
        text = f"**What you should see** ({_describe(reference)}): {verdict}.\n\n{_markdown(rows)}"
    summary = {"status": status, "rows": len(rows), "outside": sum(1 for r in rows if r["outside"])}
    if show:
        from IPython.display import display

        display({"text/markdown": text, "text/plain": text}, raw=True)
        record("what_you_should_see", summary)
    return summary
