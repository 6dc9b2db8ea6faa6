"""Model names -> local directories vLLM loads (a folder, an offline key, a distilled draft, else a hub id), and
:func:`resolved_model`, a name followed once into what the checks take."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable

import requests
from huggingface_hub import snapshot_download, try_to_load_from_cache  # a dependency of transformers

from specdec_helpers.models import drafts
from specdec_helpers.models.model_cache import ModelError
from specdec_helpers.models.tokenizer import load_tokenizer
from specdec_helpers.models.wheel_models import OFFLINE_MODELS, provision


class UnknownModelError(ModelError, ValueError):
    """A name that is neither a local directory, an offline model, nor a hub id."""


def is_hub_id(name: str) -> bool:
    return "/" in name and not name.startswith((".", "/", "~")) and not Path(name).expanduser().exists()


def resolve_model(name: str) -> Path:
    """Return a local directory for ``name``: a folder, an offline model key, or a hub id."""
    path = Path(name).expanduser()
    if path.exists():
        if not (path / "config.json").is_file():
            raise ModelError(f"{path} exists but holds no config.json: it is not a model directory.")
        return path
    if name in OFFLINE_MODELS:
        return provision(OFFLINE_MODELS[name])
    if name in drafts.known_drafts():
        return drafts.provision_draft(name)
    if not is_hub_id(name):
        known = sorted(OFFLINE_MODELS) + sorted(drafts.known_drafts())
        raise UnknownModelError(f"Unknown model '{name}'. Use a local model directory, a Hugging Face hub id "
                                f"(owner/name), or one of the offline models: {', '.join(known)}.")
    try:
        return Path(snapshot_download(name, allow_patterns=["*.json", "*.safetensors", "*.model", "*.txt", "*.jinja"]))
    except Exception as exc:
        raise ModelError(
            f"Could not get '{name}' from the Hugging Face hub: {exc}\nWhat to do: check the network and, for "
            "gated models such as Llama, accept the licence on the hub and run `hf auth login` (or set "
            f"HF_TOKEN). Offline, pre-download it with `hf download {name}` and set HF_HUB_OFFLINE=1.") from exc


def describe_model(name: str) -> str:  # for tables and figure titles
    return OFFLINE_MODELS[name].display_name.split(" (")[0] if name in OFFLINE_MODELS else name


@dataclass(frozen=True)
class ResolvedModel:
    """One model name, followed once: its files, config, tokenizer and memory shape. ``available``: a server could
    load it; ``problem``: why the tokenizer or config is missing; ``source``: local, hub, hub cache or catalog."""

    name: str
    is_hub: bool = False
    path: Path | None = None  # the local model directory (None for a hub model)
    config: dict[str, Any] | None = None
    tokenizer: Any = None
    shape: Any = None
    source: str = ""
    available: bool = True
    problem: str = ""
    unavailable_because: str = ""

    @property
    def vocab_size(self) -> int | None:
        return (self.config or {}).get("vocab_size")


@lru_cache(maxsize=1)
def hub_reachable() -> tuple[bool, str]:
    """One quick probe of the hub, so a machine without it does not wait a minute per file (five retries each)."""
    if os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in {"1", "true", "yes", "on"}:
        return False, "HF_HUB_OFFLINE is set"
    endpoint = os.environ.get("HF_ENDPOINT", "https://huggingface.co")
    try:
        requests.head(endpoint, timeout=5.0)
    except requests.RequestException as exc:
        return False, f"the hub ({endpoint}) did not answer: {type(exc).__name__}"
    return True, ""


def _hub(name: str, catalog: Callable[[str], dict | None]) -> ResolvedModel:
    online, reason = hub_reachable()
    tokenizer, problem = None, ""
    try:
        tokenizer = load_tokenizer(name, local_only=not online)
    except Exception as exc:  # network, gated repo, missing files: all mean "not here"
        reason = reason or f"{type(exc).__name__}: {str(exc).splitlines()[0][:160]}"
        problem = f"tokenizer not available ({reason})"
    try:
        found = try_to_load_from_cache(name, "config.json")
    except Exception:
        found = None
    cached = isinstance(found, str)
    config = json.loads(Path(found).read_text()) if cached else catalog(name)
    source = ("hub" if online else "hub cache") if tokenizer is not None else (
        "hub cache" if cached else "catalog" if config is not None else "")
    # The server needs the weights: from the local cache, or from a hub that answers and lets us in
    # (a fetched tokenizer proves both for gated repos too).
    available = cached or (online and tokenizer is not None)
    why = "" if available else f"not in the local Hugging Face cache and not downloadable ({reason})"
    return ResolvedModel(name, True, None, config, tokenizer, None, source, available, problem, why)


def _local(name: str) -> ResolvedModel:
    try:
        path = resolve_model(name)
    except ModelError as exc:
        first = str(exc).splitlines()[0]
        return ResolvedModel(name, available=False, problem=first, unavailable_because=first)
    config, tokenizer, problem = None, None, ""
    try:
        config = json.loads((path / "config.json").read_text())
    except (OSError, json.JSONDecodeError) as exc:
        problem = f"unreadable config.json: {exc}"
    try:
        tokenizer = load_tokenizer(str(path.resolve()))
    except Exception as exc:
        problem = f"tokenizer could not be loaded from {path}: {type(exc).__name__}: {exc}"
    return ResolvedModel(name, False, path, config, tokenizer, None, "local", True, problem)


def resolved_model(name: str, *, catalog: Callable[[str], dict | None] = lambda name: None,
                   shape_of: Callable[[dict], Any] = lambda config: None) -> ResolvedModel:
    """Follow ``name`` once: hub ids probed (never downloaded), others provisioned; memory is a later layer, so
    ``preflight.resolve`` passes its catalog and shape of a config."""
    model = _hub(name, catalog) if is_hub_id(name) else _local(name)
    return replace(model, shape=None if model.config is None else shape_of({"_source": name, **model.config}))
