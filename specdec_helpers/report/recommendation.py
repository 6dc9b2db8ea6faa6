"""Notebook 04's draft recommendation for 05 and 06: used only when it is a draft *model* for the same target."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specdec_helpers.engine.spec_config import NGRAM
from specdec_helpers.report.record import read_records

NOTEBOOK_STEM = "04_choosing_a_draft"
FILE_NAME = "04_recommendation.json"


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
    saved = run_dir / "results" / FILE_NAME
    for path, read, where in (
            (executed, lambda p: read_records(p).get("recommendation"), f"the executed notebook {executed.name}"),
            (saved, lambda p: json.loads(p.read_text()), str(saved.relative_to(run_dir)))):
        try:
            found = read(path) if path.is_file() else None
        except (OSError, ValueError, KeyError):
            found = None
        if isinstance(found, dict) and found.get("candidate"):
            return found, f"{where} in this run folder"
    return None, f"no recommendation from notebook 04 in {run_dir}"


def choose_draft(run_dir: str | Path, profile_draft: str, target_model: str) -> DraftChoice:
    """04's recommended draft when this run has one that fits, else the profile's ``profile_draft`` (the rule is
    notebook 05's, where it is read: :func:`draft_rule`)."""
    return draft_rule(*find_recommendation(run_dir), profile_draft, target_model)


def draft_rule(found: dict[str, Any] | None, where: str, profile_draft: str, target_model: str) -> DraftChoice:
    """Notebook 05's rule, for 06 to reuse (a test checks the two agree)."""
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
    same = (" (the profile's draft too)" if candidate == profile_draft
            else f" instead of the profile's `{profile_draft}`")
    return DraftChoice(candidate, True, f"notebook 04 recommended `{candidate}` ({where}), so this notebook "
                                        f"uses it{same}.")
