"""Notebook 04's recommendation for 05 and 06: used only when its speculative configuration has a draft *model*
(``method: "draft_model"``) for the same target, whatever the candidate is called or where it was defined."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specdec_helpers.report.record import run_records

NOTEBOOK_STEM = "04_choosing_a_draft"


@dataclass(frozen=True)
class DraftChoice:
    """The draft a notebook will use, and one sentence saying why (printed by the notebook)."""

    draft_model: str
    from_recommendation: bool
    reason: str


def find_recommendation(run_dir: str | Path) -> tuple[dict[str, Any] | None, str]:
    """``(recommendation, where it came from)``: what notebook 04 recorded in this run, or ``(None, why not)``."""
    try:
        found = run_records(run_dir, NOTEBOOK_STEM).get("recommendation")
    except ValueError as exc:  # a 04 that died while writing: 05 and 06 still run, on the profile's draft
        return None, f"notebook 04's records cannot be read ({exc})"
    if isinstance(found, dict):  # a candidate, or none with the reason (nothing measured reliably)
        return found, f"recorded by notebook 04 in this run ({Path(run_dir).name})"
    return None, f"no recommendation recorded by notebook 04 in {run_dir}"


def choose_draft(run_dir: str | Path, profile_draft: str, target_model: str) -> DraftChoice:
    """04's recommended draft when this run has one that fits, else the profile's ``profile_draft`` (the rule is
    notebook 05's, where it is read: :func:`draft_rule`)."""
    return draft_rule(*find_recommendation(run_dir), profile_draft, target_model)


def draft_rule(found: dict[str, Any] | None, where: str, profile_draft: str, target_model: str) -> DraftChoice:
    """Notebook 05's rule, for 06 to reuse (a test checks the two agree)."""
    if found is None:
        return DraftChoice(profile_draft, False, f"{where}, so this notebook uses the profile's draft "
                                                 f"`{profile_draft}` (run 04 first to test its pick).")
    candidate = found.get("candidate")
    if not candidate:
        return DraftChoice(profile_draft, False, f"notebook 04 recommended nothing ({where}: "
                                                 f"{found.get('reason', 'no candidate was measured reliably')}), so "
                                                 f"this notebook uses the profile's draft `{profile_draft}`.")
    if found.get("target_model") not in (None, target_model):
        return DraftChoice(profile_draft, False, f"notebook 04's recommendation ({where}) was measured for "
                                                 f"target `{found['target_model']}`, not `{target_model}`, so "
                                                 f"this notebook uses the profile's draft `{profile_draft}`.")
    method = found.get("method")
    if method != "draft_model" or not found.get("draft_model"):
        kind = f"`method: {method}`" if method else "no speculative configuration recorded"
        return DraftChoice(profile_draft, False, f"notebook 04 recommended `{candidate}` ({where}; {kind}), which "
                                                 f"has no draft model; this notebook studies a draft model, so it "
                                                 f"uses the profile's draft `{profile_draft}`.")
    draft = str(found["draft_model"])
    same = (" (the profile's draft too)" if draft == profile_draft
            else f" instead of the profile's `{profile_draft}`")
    return DraftChoice(draft, True, f"notebook 04 recommended `{candidate}` ({where}), so this notebook "
                                    f"uses it{same}.")
