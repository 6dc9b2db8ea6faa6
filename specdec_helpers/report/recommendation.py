"""Notebook 04's records for the notebooks after it: its recommendation for 05 and 06 (used only when its
speculative configuration has a draft *model*, ``method: "draft_model"``, for the same target, whatever the candidate
is called or where it was defined) and its A/A control for the physics guard of 05, 06 and 07. The rule
(``draft_rule``, with its ``DraftChoice``) is notebook 05's, exported to :mod:`specdec_helpers.costmodel.rules`."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from specdec_helpers.report.record import records_file, run_records

NOTEBOOK_STEM = "04_choosing_a_draft"
#: ``runs/interactive`` belongs to no session: a notebook opened by hand writes there whenever it runs, so a
#: recommendation older than this came from another session (another day's machine load, another profile) and is
#: not used. ``make run`` and ``make lab`` give each session a folder of its own, where any age is this session's.
INTERACTIVE = "interactive"
STALE_AFTER_S = 6 * 3600


def from_notebook_04(run_dir: str | Path, name: str) -> tuple[Any, str]:
    """``(value, where it came from)``: what notebook 04 recorded under ``name`` in this run, or ``(None, why not)``
    (nothing recorded, an unreadable file, or another session's ``runs/interactive``)."""
    try:
        found = run_records(run_dir, NOTEBOOK_STEM).get(name)
    except ValueError as exc:  # a 04 that died while writing: 05 and 06 still run, on the profile's draft
        return None, f"notebook 04's records cannot be read ({exc})"
    if found is None:
        return None, f"no {name} recorded by notebook 04 in {run_dir}"
    path = records_file(run_dir, NOTEBOOK_STEM)
    if not path.is_file():  # read from an executed notebook's outputs: its folder is its session's
        return found, f"recorded by notebook 04 in {Path(run_dir).name}"
    written = path.stat().st_mtime
    age_s = time.time() - written
    when = f"{time.strftime('%Y-%m-%d %H:%M', time.localtime(written))}, {age_s / 3600:.1f} h ago"
    if Path(run_dir).name == INTERACTIVE and age_s > STALE_AFTER_S:
        return None, (f"notebook 04's {name} in {run_dir} was recorded {when}, by another session: "
                      "rerun 04, or use `make lab`, whose session has a run folder of its own")
    return found, f"recorded by notebook 04 in {Path(run_dir).name} at {when}"


def find_recommendation(run_dir: str | Path) -> tuple[dict[str, Any] | None, str]:
    """``(recommendation, where it came from)``: a dict (a candidate, or none with the reason: nothing measured
    reliably), or ``(None, why not)``."""
    found, where = from_notebook_04(run_dir, "recommendation")
    return (found, where) if isinstance(found, dict) else (None, where)

