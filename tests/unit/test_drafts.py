"""Distilled drafts: shipped weights match their manifest, and provisioning assembles a loadable draft
atomically (and refuses a tampered file); served by vLLM: tests/engine/test_drafts_in_vllm.py."""

from __future__ import annotations

import json
import shutil
import time

import pytest

from recipes.distill_drafts import distill
from specdec_helpers.models import drafts, wheel_models
from specdec_helpers.models.model_cache import MANIFEST_NAME, sha256_of

DEPTHS = {"smollm2-draft-1l": 1, "smollm2-draft-2l": 2, "smollm2-draft-4l": 4}


def test_the_family_of_depths_ships():
    known = drafts.known_drafts()
    assert {k: v["layers"] for k, v in known.items()} == DEPTHS


def test_shipped_files_match_manifest_and_stay_small():
    from safetensors import safe_open

    total = 0
    for key, entry in drafts.known_drafts().items():
        path = drafts.DRAFTS_DIR / entry["file"]
        assert sha256_of(path) == entry["sha256"], f"{path.name} does not match the manifest"
        assert path.stat().st_size == entry["bytes"]
        total += path.stat().st_size
        with safe_open(str(path), "pt") as f:
            keys = set(f.keys())
            dtypes = {f.get_slice(k).get_dtype() for k in keys}
        # only what was trained: N layers and the final norm, no embedding, no LM head
        assert "model.norm.weight" in keys
        assert not any("embed" in k or "lm_head" in k for k in keys)
        assert {k.split(".")[2] for k in keys if k.startswith("model.layers.")} == {
            str(i) for i in range(entry["layers"])}
        assert dtypes <= {"BF16", "F16"}
    assert total < 64 * 2**20, f"shipped drafts take {total / 2**20:.1f} MiB (limit 64)"


def test_manifest_records_recipe_data_and_measurements():
    for key, entry in drafts.known_drafts().items():
        recipe, data = entry["recipe"], entry["data"]
        assert recipe["seed"] == distill.DEFAULT_SEED and recipe["steps"] > 0
        assert recipe["layers"] == entry["layers"]
        assert data["train_answer_tokens"] > 50_000 and set(data["shares"]) == set(distill.MIX)
        measured = entry["measured"]
        for cls in ("structured", "creative"):
            for field in ("first_position_rate", "acceptance_rate", "mean_acceptance_length"):
                assert measured[cls][field] > 0, (key, cls, field)
        assert 0 < measured["c"] < 1.5
        assert measured["lossless"]["prompts"] == 64


@pytest.fixture
def isolated_models(tmp_path, monkeypatch, target_dir):
    """Drafts assembled into a temporary models folder, the real target reused."""
    monkeypatch.setattr(drafts, "models_dir", lambda: tmp_path / "models")
    monkeypatch.setattr(wheel_models, "provision", lambda spec: target_dir)
    return tmp_path / "models"


def test_provisioning_assembles_a_loadable_draft(isolated_models, target_dir):
    from safetensors import safe_open

    key = "smollm2-draft-1l"
    path = drafts.provision_draft(key)
    assert path == isolated_models / key
    config = json.loads((path / "config.json").read_text())
    target_config = json.loads((target_dir / "config.json").read_text())
    assert config["num_hidden_layers"] == 1
    assert config["tie_word_embeddings"] is True
    assert config["vocab_size"] == target_config["vocab_size"] == 49152
    assert config["hidden_size"] == target_config["hidden_size"]
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
        assert (path / name).read_bytes() == (target_dir / name).read_bytes()
    with safe_open(str(path / "model.safetensors"), "pt") as f, \
            safe_open(str(target_dir / "model.safetensors"), "pt") as t:
        assert f.get_tensor("model.embed_tokens.weight").equal(t.get_tensor("model.embed_tokens.weight"))
        assert "model.layers.0.self_attn.q_proj.weight" in f.keys()
        assert not any(k.startswith("model.layers.1.") for k in f.keys())
    marker = json.loads((path / MANIFEST_NAME).read_text())
    assert marker["shipped_sha256"] == drafts.known_drafts()[key]["sha256"]
    assert [p.name for p in isolated_models.iterdir()] == [key]  # no temporary folders left
    started = time.perf_counter()
    assert drafts.provision_draft(key) == path
    assert time.perf_counter() - started < 0.5  # second call: already there


def test_provisioning_refuses_a_tampered_file(isolated_models, tmp_path, monkeypatch):
    shipped = tmp_path / "drafts"
    shutil.copytree(drafts.DRAFTS_DIR, shipped)
    monkeypatch.setattr(drafts, "DRAFTS_DIR", shipped)
    key = "smollm2-draft-1l"
    weights = shipped / drafts.known_drafts()[key]["file"]
    data = bytearray(weights.read_bytes())
    data[-100] ^= 0xFF
    weights.write_bytes(bytes(data))
    with pytest.raises(drafts.DraftError, match="sha256"):
        drafts.provision_draft(key)
    assert not (isolated_models / key).exists()
    # the preflight reports it as a model that is not available, with the reason, instead of a traceback
    from specdec_helpers.models.resolve import resolved_model

    model = resolved_model(key)
    assert not model.available and "sha256" in model.unavailable_because


def test_an_interrupted_build_leaves_nothing_behind(isolated_models, monkeypatch):
    def broken(key, entry, shipped, out):
        (out / "config.json").write_text("{}")
        raise KeyboardInterrupt

    monkeypatch.setattr(drafts, "_assemble", broken)
    with pytest.raises(KeyboardInterrupt):
        drafts.provision_draft("smollm2-draft-2l")
    assert not isolated_models.exists() or not any(isolated_models.iterdir())


def test_unknown_draft_is_a_key_error():
    with pytest.raises(KeyError, match="shipped drafts"):
        drafts.provision_draft("smollm2-draft-99l")


