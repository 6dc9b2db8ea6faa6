"""Record named values from a notebook so tests and the run report can read them back.

A recorded value is displayed as an output with our own MIME type. Papermill saves outputs in
the executed notebook, so ``read_records(path)`` gets them back without scrapbook (which is
unmaintained) and without a side file that could drift from the notebook it came from.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

MIME_TYPE = "application/vnd.specdec.record+json"

# Every value this process recorded, by name (later records win): what a notebook's
# "What you should see" cell compares with the reference run (specdec_helpers.report.reference).
_recorded: dict[str, Any] = {}


def _plain(value: Any) -> Any:
    """numpy/pandas scalars and containers to JSON types; NaN to None."""
    if hasattr(value, "item") and not isinstance(value, (list, dict, str)):
        try:
            value = value.item()
        except (ValueError, AttributeError):
            pass
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if hasattr(value, "tolist"):
        return _plain(value.tolist())
    return value


def record(name: str, value: Any) -> Any:
    """Display ``value`` under ``name`` in our MIME type (and as text for humans)."""
    from IPython.display import display

    plain = _plain(value)
    json.dumps(plain)  # fail here, in the notebook, if it cannot be saved
    _recorded[name] = plain
    display({MIME_TYPE: {"name": name, "value": plain}, "text/plain": f"recorded {name} = {plain!r}"},
            raw=True)
    return value


def recorded() -> dict[str, Any]:
    """What this kernel has recorded so far (JSON-plain values), as a copy."""
    return dict(_recorded)


def clear_recorded() -> None:
    """Forget this process's records (tests; a notebook re-run from the top records anew)."""
    _recorded.clear()


def read_records(notebook_path: str | Path) -> dict[str, Any]:
    """All values recorded in an executed notebook; later records of a name win."""
    nb = json.loads(Path(notebook_path).read_text())
    found: dict[str, Any] = {}
    for cell in nb.get("cells", []):
        for output in cell.get("outputs", []):
            data = output.get("data", {})
            if MIME_TYPE in data:
                item = data[MIME_TYPE]
                if isinstance(item, str):
                    item = json.loads(item)
                found[item["name"]] = item["value"]
    return found
