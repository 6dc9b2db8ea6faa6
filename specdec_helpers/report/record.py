"""Record named values from a notebook so tests and the run report can read them back: an output in our own MIME
type, which papermill saves in the executed notebook (no scrapbook, no side file that could drift from it)."""

from __future__ import annotations

import contextlib
import json
import math
from pathlib import Path
from typing import Any

MIME_TYPE = "application/vnd.specdec.record+json"
_recorded: dict[str, Any] = {}  # this process's records by name: what_you_should_see compares them


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


def record(name: str, value: Any) -> Any:
    """Display ``value`` under ``name`` in our MIME type (and as text for humans)."""
    from IPython.display import display

    plain = _plain(value)
    json.dumps(plain)  # fail here, in the notebook, if it cannot be saved
    _recorded[name] = plain
    display({MIME_TYPE: {"name": name, "value": plain}, "text/plain": f"recorded {name} = {plain!r}"}, raw=True)
    return value


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
