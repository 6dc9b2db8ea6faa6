"""Hardware profiles: papermill parameter files in ``params/``.

A profile names the model pair and the sizes that fit the hardware (``cpu-coder``, the default,
and ``cpu-tiny`` for a few CPU cores; ``gpu-llama`` and ``gpu-qwen3`` for one GPU). ``smoke.yaml``
shrinks any profile for the tests and ``make smoke``: fewer prompts, shorter answers, one repeat.
Its overrides come in sections (every profile, per kind, per profile name) because one list
cannot fit all: a CPU's prompt lengths are too short to say anything on a GPU, and a draft model
only works with targets that share its tokenizer.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from specdec_helpers.report.runs import REPO_ROOT

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


SMOKE_SECTIONS = ("all", "cpu", "gpu", "profiles")


def profile_kind(name: str) -> str:
    """``"gpu"`` for profiles named ``gpu-*``, else ``"cpu"`` (the Makefile picks the environment the same way)."""
    return "gpu" if name.startswith("gpu") else "cpu"


def smoke_overrides(name: str) -> dict[str, Any]:
    """The smoke parameters for profile ``name``: ``all``, then its kind's, then its own section."""
    path = PARAMS_DIR / f"{SMOKE}.yaml"
    data = _read(path)
    unknown = sorted(set(data) - set(SMOKE_SECTIONS))
    if unknown:
        raise ProfileError(
            f"{path}: unknown section(s) {', '.join(unknown)}; the file holds the sections "
            f"{', '.join(SMOKE_SECTIONS)} (see its header comment).")
    overrides: dict[str, Any] = {}
    sections = [data.get("all"), data.get(profile_kind(name)), (data.get("profiles") or {}).get(name)]
    for section in sections:
        if section is None:
            continue
        if not isinstance(section, dict):
            raise ProfileError(f"{path}: every section must be a mapping of parameter names to values.")
        overrides.update(section)
    return overrides


#: a profile's section of parameters for single notebooks ("05": {prompts_per_class: 8}), on top of the rest
PER_NOTEBOOK = "per_notebook"


def load_profile(name: str, smoke: bool = False) -> dict[str, Any]:
    """Parameters of profile ``name``, with its smoke overrides on top when ``smoke``. The ``per_notebook``
    section stays in the result (:func:`notebook_overrides` reads it); smoke runs drop it (small everywhere)."""
    path = PARAMS_DIR / f"{name}.yaml"
    if not path.is_file():
        raise ProfileError(f"Unknown profile '{name}'. Known profiles: {', '.join(known_profiles())}.")
    params = _read(path)
    section = params.get(PER_NOTEBOOK, {})
    if not isinstance(section, dict) or not all(isinstance(v, dict) for v in section.values()):
        raise ProfileError(f"{path}: {PER_NOTEBOOK} must map notebook prefixes (\"05\") to parameter mappings.")
    if smoke:
        params.pop(PER_NOTEBOOK, None)
        params.update(smoke_overrides(name))
    return params


def notebook_overrides(params: dict[str, Any], notebook: str) -> dict[str, Any]:
    """The ``per_notebook`` parameters for ``notebook`` (a file name such as "05_structured_vs_creative.ipynb")."""
    section = params.get(PER_NOTEBOOK) or {}
    return {k: v for prefix, values in section.items() if notebook.startswith(str(prefix)) for k, v in values.items()}


def parse_overrides(pairs: list[str]) -> dict[str, Any]:
    """``["max_tokens=64", "prompts_file=my.jsonl"]`` -> parameters; paths that exist become absolute
    (notebooks run with notebooks/ as their working folder)."""
    overrides = {}
    for pair in pairs:
        name, sep, raw = pair.partition("=")
        if not sep or not name:
            raise SystemExit(f"--set expects NAME=VALUE, got {pair!r}")
        value = yaml.safe_load(raw) if raw else ""
        if isinstance(value, str) and value and Path(value).exists():
            value = str(Path(value).resolve())
        overrides[name] = value
    return overrides
