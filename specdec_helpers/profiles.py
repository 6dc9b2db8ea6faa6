"""Hardware profiles: papermill parameter files in ``params/``.

A profile names the model pair and the sizes that fit the hardware (``cpu-tiny`` for 2 CPU
cores, ``gpu-llama`` and ``gpu-qwen3`` for one GPU). ``smoke.yaml`` shrinks any profile for the
tests: fewer prompts, shorter answers, one repeat.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from .runs import REPO_ROOT

PARAMS_DIR = REPO_ROOT / "params"
SMOKE = "smoke"


class ProfileError(ValueError):
    """An unknown profile or an unreadable parameter file."""


def known_profiles() -> list[str]:
    return sorted(p.stem for p in PARAMS_DIR.glob("*.yaml") if p.stem != SMOKE)


def _read(path: Path) -> dict[str, Any]:
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as exc:
        raise ProfileError(f"{path} is not valid YAML: {exc}") from exc
    if not isinstance(data, dict):
        raise ProfileError(f"{path} must hold a mapping of parameter names to values.")
    return data


def load_profile(name: str, smoke: bool = False) -> dict[str, Any]:
    """Parameters of profile ``name``, with the smoke overrides on top when ``smoke``."""
    path = PARAMS_DIR / f"{name}.yaml"
    if not path.is_file():
        raise ProfileError(f"Unknown profile '{name}'. Known profiles: {', '.join(known_profiles())}.")
    params = _read(path)
    if smoke:
        params.update(_read(PARAMS_DIR / f"{SMOKE}.yaml"))
    return params
