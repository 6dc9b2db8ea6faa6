"""Notebook 04's draft recommendation, handed to the notebooks after it (05, 06).

Notebook 04 measures the candidates and recommends one; later notebooks should test *that* draft
when there is a recommendation from the same run, and say so, rather than silently hard-code one.
Two places hold it, checked in this order:

* ``<run_dir>/notebooks/04_choosing_a_draft.ipynb``: the executed copy that ``make run`` writes
  (its recorded ``recommendation``, read with ``record.read_records``);
* ``<run_dir>/results/04_recommendation.json``: what 04 writes itself, so a learner who runs 04 and
  then 05 by hand in JupyterLab (both in ``runs/interactive``) gets the same hand-off.

A recommendation is used only when it is a draft *model* (05 and 06 study draft-model speculation;
n-gram lookup has no draft to load) and was measured for the same target.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specdec_helpers.report.record import read_records

NOTEBOOK_STEM = "04_choosing_a_draft"
FILE_NAME = "04_recommendation.json"
NGRAM = "ngram"


@dataclass(frozen=True)
class DraftChoice:
    """The draft a notebook will use, and one sentence saying why (printed by the notebook)."""

    draft_model: str
    from_recommendation: bool
    reason: str


def save_recommendation(run_dir: str | Path, recommendation: dict[str, Any]) -> Path:
    """Write 04's recommendation (with its ``target_model``) as JSON in the run's results folder."""
    if "candidate" not in recommendation or "target_model" not in recommendation:
        raise ValueError("a recommendation needs at least 'candidate' and 'target_model'")
    path = Path(run_dir) / "results" / FILE_NAME
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(recommendation, indent=1) + "\n")
    return path


def find_recommendation(run_dir: str | Path) -> tuple[dict[str, Any] | None, str]:
    """``(recommendation, where it came from)``, or ``(None, what was looked at)``."""
    run_dir = Path(run_dir)
    executed = run_dir / "notebooks" / f"{NOTEBOOK_STEM}.ipynb"
    if executed.is_file():
        try:
            found = read_records(executed).get("recommendation")
        except (OSError, ValueError, KeyError):
            found = None
        if isinstance(found, dict) and found.get("candidate"):
            return found, f"the executed notebook {executed.name} in this run folder"
    saved = run_dir / "results" / FILE_NAME
    if saved.is_file():
        try:
            found = json.loads(saved.read_text())
        except (OSError, ValueError):
            found = None
        if isinstance(found, dict) and found.get("candidate"):
            return found, f"{saved.relative_to(run_dir)} in this run folder"
    return None, f"no recommendation from notebook 04 in {run_dir}"


def choose_draft(run_dir: str | Path, profile_draft: str, target_model: str) -> DraftChoice:
    """04's recommended draft when this run has one that fits, else the profile's ``profile_draft``."""
    found, where = find_recommendation(run_dir)
    if found is None:
        return DraftChoice(profile_draft, False, f"{where}, so this notebook uses the profile's draft "
                                                 f"`{profile_draft}` (run 04 first to test its pick).")
    candidate = str(found["candidate"])
    if found.get("target_model") not in (None, target_model):
        return DraftChoice(profile_draft, False, f"notebook 04's recommendation ({where}) was measured for "
                                                 f"target `{found['target_model']}`, not `{target_model}`, so "
                                                 f"this notebook uses the profile's draft `{profile_draft}`.")
    if candidate == NGRAM:
        return DraftChoice(profile_draft, False, f"notebook 04 recommended n-gram lookup ({where}); this "
                                                 "notebook studies a draft model, so it uses the profile's draft "
                                                 f"`{profile_draft}`.")
    same = " (the profile's draft too)" if candidate == profile_draft else f" instead of the profile's `{profile_draft}`"
    return DraftChoice(candidate, True, f"notebook 04 recommended `{candidate}` ({where}), so this notebook "
                                        f"uses it{same}.")
