"""Measured alpha and c of *other* target/draft pairs (drafts' manifest, reference runs), for notebook 04."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pandas as pd

from specdec_helpers.costmodel import theory
from specdec_helpers.models.drafts import DRAFTS_DIR
from specdec_helpers.models.model_cache import read_json
from specdec_helpers.report.reference import REFERENCE_DIR

MANIFEST = DRAFTS_DIR / "manifest.json"
COLUMNS = ["pair", "candidate", "source", "size_ratio", "acceptance_rate", "mean_acceptance_length",
           "alpha_per_token", "c", "k", "break_even_alpha_free_verify", "measured_speedup"]
_CANDIDATE_KEY = "candidates[candidate="
_STORED_FIELDS = ("c", "acceptance_rate", "mean_acceptance_length", "size_ratio", "measured_speedup")


def _num(x: float | None) -> float:
    return math.nan if x is None else float(x)


def row(pair: str, candidate: str, source: str, *, k: int, c: float | None, acceptance_rate: float | None,
        mean_acceptance_length: float | None, size_ratio: float | None = None,
        measured_speedup: float | None = None) -> dict[str, Any]:
    """One table row; alpha per token is converted from the mean acceptance length (not the rate)."""
    free_floor = theory.break_even_alpha(k, _num(c)) if math.isfinite(_num(c)) and k >= 1 else math.nan
    return {"pair": pair, "candidate": candidate, "source": source, "size_ratio": _num(size_ratio),
            "acceptance_rate": _num(acceptance_rate), "mean_acceptance_length": _num(mean_acceptance_length),
            "alpha_per_token": theory.alpha_from_mean_acceptance_length(mean_acceptance_length, k, clip=True),
            "c": _num(c), "k": int(k), "break_even_alpha_free_verify": free_floor,
            "measured_speedup": _num(measured_speedup)}


def manifest_rows(target_parameters: float | None = None, manifest: str | Path = MANIFEST) -> list[dict[str, Any]]:
    """cpu-tiny's distilled drafts as vLLM measured them (structured prompts) when they were made."""
    data, rows = read_json(Path(manifest)), []
    for name, entry in sorted(data.get("drafts", {}).items()):
        measured = entry.get("measured") or {}
        if not (cls := measured.get("structured")):
            continue
        total = entry.get("total_parameters")
        source = ("data/drafts/manifest.json (vLLM, structured prompts: "
                  f"{measured.get('conditions', 'conditions not recorded')})")
        rows.append(row(f"{data.get('target', '?')} + {name}", name, source, k=int(measured.get("k", 0)),
                        c=measured.get("c"), acceptance_rate=cls.get("acceptance_rate"),
                        mean_acceptance_length=cls.get("mean_acceptance_length"),
                        size_ratio=target_parameters / total if target_parameters and total else None))
    return rows


def reference_rows(exclude_profile: str, reference_dir: str | Path = REFERENCE_DIR) -> list[dict[str, Any]]:
    """Notebook 04's candidates from committed reference runs of *other* profiles."""
    rows = []
    for path in sorted(Path(reference_dir).glob("*.json")):
        data = read_json(path)
        profile = data.get("profile", path.stem)
        if profile == exclude_profile:
            continue
        values = ((data.get("notebooks") or {}).get("04_choosing_a_draft") or {}).get("values") or {}
        prov = data.get("provenance") or {}
        params = prov.get("parameters") or {}
        k, target = int(params.get("num_speculative_tokens", 0) or 0), params.get("target_model", "?")
        per_candidate: dict[str, dict[str, Any]] = {}
        for key, value in values.items():
            if key.startswith(_CANDIDATE_KEY) and "]/" in key:
                name, field = key[len(_CANDIDATE_KEY):].split("]/", 1)
                per_candidate.setdefault(name, {})[field] = value
        smoke = ", smoke parameters" if prov.get("smoke") else ""
        source = (f"data/reference/{path.name} (reference run of `{profile}`{smoke}, "
                  f"{prov.get('hardware', '?')}, {str(prov.get('measured_at', '?'))[:10]})")
        for name, fields in sorted(per_candidate.items()):
            rows.append(row(f"{target} + {name}", name, source, k=int(fields.get("k", k) or k),
                            **{f: fields.get(f) for f in _STORED_FIELDS}))
    return rows


def contrast_table(live: list[dict[str, Any]], *, profile: str,
                   smollm2_parameters: float | None = None) -> pd.DataFrame:
    """This run's rows first, then the stored pairs it did not measure; ``smollm2_parameters``: for size ratios."""
    rows, seen = list(live), {r["pair"] for r in live}
    for stored in manifest_rows(smollm2_parameters) + reference_rows(profile):
        if stored["pair"] not in seen:
            rows.append(stored)
            seen.add(stored["pair"])
    return pd.DataFrame(rows, columns=COLUMNS)
