"""The one channel for results between notebooks, tests and the run report: ``record(name, value)``.

A record is a JSON value under a name, displayed in our own MIME type (papermill saves it in the executed notebook,
where the report and tests read it) and, after :func:`keep_records_in`, written to ``<run>/records/<notebook>.json``
at once, so a later notebook reads it (:func:`run_records`) whether this one ran under papermill or in JupyterLab.
Each notebook documents what it records in the cell that records it; later notebooks read: 04's
``recommendation`` (05, 06), 04's ``k_sweep`` and 06's ``schedule`` (07)."""

from __future__ import annotations

import contextlib
import json
import math
from pathlib import Path
from typing import Any

MIME_TYPE = "application/vnd.specdec.record+json"
RECORDS_DIR = "records"
_recorded: dict[str, Any] = {}  # this process's records by name: what_you_should_see compares them
_kept: dict[str, Any] = {}  # where they are written: {"path": Path, "notebook": stem}, set by keep_records_in


def _plain(value: Any) -> Any:
    """numpy/pandas scalars and containers to JSON types; NaN to None."""
    if hasattr(value, "item") and not isinstance(value, (list, dict, str)):
        with contextlib.suppress(ValueError, AttributeError):
            value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return _plain(value.tolist()) if hasattr(value, "tolist") else value


def record(name: str, value: Any) -> None:
    """Keep ``value`` under ``name``: in the run's records file and in our MIME type in the executed notebook, where
    a reader sees nothing (its only other form is an empty HTML part: bookkeeping is not what a learner reads; the
    cell's own table or figure shows the number). Returns nothing, so a cell ending in ``record`` shows nothing."""
    from IPython.display import display

    plain = _plain(value)
    json.dumps(plain)  # fail here, in the notebook, if it cannot be saved
    _recorded[name] = plain
    if _kept:
        _write_json(_kept["path"], {"notebook": _kept["notebook"], "records": _recorded})
    display({MIME_TYPE: {"name": name, "value": plain}, "text/html": ""}, raw=True)


def _write_json(path: Path, data: dict[str, Any]) -> None:  # whole or not at all: a reader never sees half a file
    partial = path.with_suffix(".json.partial")
    partial.write_text(json.dumps(data, indent=1) + "\n")
    partial.replace(path)


def records_file(run_dir: str | Path, notebook_stem: str) -> Path:
    return Path(run_dir) / RECORDS_DIR / f"{notebook_stem}.json"


def keep_records_in(run_dir: str | Path, notebook_stem: str) -> Path:
    """From now on write this kernel's records to the run's records file of ``notebook_stem``; starts it empty (a
    notebook run again records anew, so a later notebook never reads a stale value next to fresh ones)."""
    path = records_file(run_dir, notebook_stem)
    path.parent.mkdir(parents=True, exist_ok=True)
    _recorded.clear()
    _kept.update(path=path, notebook=notebook_stem)
    _write_json(path, {"notebook": notebook_stem, "records": {}})
    return path


def run_records(run_dir: str | Path, notebook_stem: str) -> dict[str, Any]:
    """What ``notebook_stem`` recorded in this run: its records file, else its executed notebook; {} when it has not
    run (a later notebook then says so and uses its own defaults)."""
    path, executed = records_file(run_dir, notebook_stem), Path(run_dir) / "notebooks" / f"{notebook_stem}.ipynb"
    try:
        if path.is_file():
            return dict(json.loads(path.read_text()).get("records") or {})
        return read_records(executed) if executed.is_file() else {}
    except (OSError, ValueError) as exc:
        raise ValueError(f"{path if path.is_file() else executed} cannot be read ({exc}); run "
                         f"{notebook_stem} again to rewrite it") from exc


def recorded() -> dict[str, Any]:  # a copy of what this kernel has recorded so far
    return dict(_recorded)


def read_records(notebook_path: str | Path) -> dict[str, Any]:
    """All values recorded in an executed notebook; later records of a name win."""
    found: dict[str, Any] = {}
    for cell in json.loads(Path(notebook_path).read_text()).get("cells", []):
        for output in cell.get("outputs", []):
            item = output.get("data", {}).get(MIME_TYPE)
            if item is not None:
                item = json.loads(item) if isinstance(item, str) else item
                found[item["name"]] = item["value"]
    return found
