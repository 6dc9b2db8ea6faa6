"""Measured alpha and c of *other* target/draft pairs, with where each number comes from.

Notebook 04 measures its own candidates live. To show why one pair pays and another does not, it
sets them next to pairs it cannot afford to measure in the same run (another target means other
servers and minutes more): cpu-tiny's distilled drafts, measured with vLLM when they were made
(``data/drafts/manifest.json``), and any committed reference run of another profile
(``data/reference/<profile>.json``). Every row says its source, so a live number is never confused
with a stored one.

The comparison that matters is alpha against c: with k drafted tokens, a step costs ``k * c + v``
target steps and yields ``E(alpha, k)`` tokens. ``break_even_alpha_free_verify`` is the alpha below
which the pair cannot pay *even if verifying were free* (v = 1): a floor set by c alone.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pandas as pd

from specdec_helpers.costmodel import theory
from specdec_helpers.report.runs import REPO_ROOT

MANIFEST = REPO_ROOT / "data" / "drafts" / "manifest.json"
REFERENCE_DIR = REPO_ROOT / "data" / "reference"
COLUMNS = ["pair", "candidate", "source", "size_ratio", "acceptance_rate", "mean_acceptance_length",
           "alpha_per_token", "c", "k", "break_even_alpha_free_verify", "measured_speedup"]
_CANDIDATE_KEY = "candidates[candidate="


def _alpha(mal: float | None, k: int) -> float:
    if mal is None or not math.isfinite(float(mal)) or k < 1:
        return math.nan
    return theory.alpha_from_mean_acceptance_length(min(max(float(mal), 1.0), k + 1.0), k)


def _break_even(k: int, c: float | None) -> float:
    if c is None or not math.isfinite(float(c)) or k < 1:
        return math.nan
    return theory.break_even_alpha(k, float(c))


def row(pair: str, candidate: str, source: str, *, k: int, c: float | None, acceptance_rate: float | None,
        mean_acceptance_length: float | None, size_ratio: float | None = None,
        measured_speedup: float | None = None) -> dict[str, Any]:
    """One table row; alpha per token is converted from the mean acceptance length (not the rate)."""
    nan = math.nan
    return {"pair": pair, "candidate": candidate, "source": source,
            "size_ratio": nan if size_ratio is None else float(size_ratio),
            "acceptance_rate": nan if acceptance_rate is None else float(acceptance_rate),
            "mean_acceptance_length": nan if mean_acceptance_length is None else float(mean_acceptance_length),
            "alpha_per_token": _alpha(mean_acceptance_length, k),
            "c": nan if c is None else float(c), "k": int(k),
            "break_even_alpha_free_verify": _break_even(k, c),
            "measured_speedup": nan if measured_speedup is None else float(measured_speedup)}


def manifest_rows(target_parameters: float | None = None, manifest: str | Path = MANIFEST,
                  task_class: str = "structured") -> list[dict[str, Any]]:
    """cpu-tiny's distilled drafts as measured by vLLM when they were made (one row per draft).

    ``target_parameters``: the target's parameter count, for the size ratio (None leaves it NaN).
    """
    path = Path(manifest)
    if not path.is_file():
        return []
    data = json.loads(path.read_text())
    target = data.get("target", "?")
    rows = []
    for name, entry in sorted(data.get("drafts", {}).items()):
        measured = entry.get("measured") or {}
        cls = measured.get(task_class) or {}
        if not measured or not cls:
            continue
        total = entry.get("total_parameters")
        ratio = target_parameters / total if target_parameters and total else None
        source = f"data/drafts/manifest.json (vLLM, {task_class} prompts: {measured.get('conditions', 'conditions not recorded')})"
        rows.append(row(f"{target} + {name}", name, source, k=int(measured.get("k", 0)), c=measured.get("c"),
                        acceptance_rate=cls.get("acceptance_rate"),
                        mean_acceptance_length=cls.get("mean_acceptance_length"), size_ratio=ratio))
    return rows


def reference_rows(exclude_profile: str, reference_dir: str | Path = REFERENCE_DIR,
                   notebook: str = "04_choosing_a_draft") -> list[dict[str, Any]]:
    """Notebook 04's candidates from committed reference runs of *other* profiles."""
    rows = []
    for path in sorted(Path(reference_dir).glob("*.json")):
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        profile = data.get("profile", path.stem)
        if profile == exclude_profile:
            continue
        values = ((data.get("notebooks") or {}).get(notebook) or {}).get("values") or {}
        params = (data.get("provenance") or {}).get("parameters") or {}
        k = int(params.get("num_speculative_tokens", 0) or 0)
        per_candidate: dict[str, dict[str, Any]] = {}
        for key, value in values.items():
            if not key.startswith(_CANDIDATE_KEY) or "]/" not in key:
                continue
            name, field = key[len(_CANDIDATE_KEY):].split("]/", 1)
            per_candidate.setdefault(name, {})[field] = value
        prov = data.get("provenance") or {}
        smoke = ", smoke parameters" if prov.get("smoke") else ""
        source = (f"data/reference/{path.name} (reference run of `{profile}`{smoke}, "
                  f"{prov.get('hardware', '?')}, {str(prov.get('measured_at', '?'))[:10]})")
        target = params.get("target_model", "?")
        for name, fields in sorted(per_candidate.items()):
            rows.append(row(f"{target} + {name}", name, source, k=int(fields.get("k", k) or k),
                            c=fields.get("c"), acceptance_rate=fields.get("acceptance_rate"),
                            mean_acceptance_length=fields.get("mean_acceptance_length"),
                            size_ratio=fields.get("size_ratio"), measured_speedup=fields.get("measured_speedup")))
    return rows


def contrast_table(live: list[dict[str, Any]], *, profile: str,
                   smollm2_parameters: float | None = None) -> pd.DataFrame:
    """This run's rows first, then the stored pairs this run did not measure (by pair name).

    ``smollm2_parameters``: the distilled drafts' target's parameter count, for their size ratio.
    """
    rows = list(live)
    seen = {r["pair"] for r in live}
    for stored in manifest_rows(smollm2_parameters) + reference_rows(profile):
        if stored["pair"] not in seen:
            rows.append(stored)
            seen.add(stored["pair"])
    return pd.DataFrame(rows, columns=COLUMNS)
