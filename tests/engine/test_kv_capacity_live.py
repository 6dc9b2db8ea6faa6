"""vLLM's reported KV capacity against the calculator, on a live CPU server (one engine start, about a
minute; the log parser's own tests are in tests/unit/test_kv_capacity.py)."""

from __future__ import annotations

import pytest

from specdec_helpers import memory
from specdec_helpers.engine.install import KV_BLOCK_TOKENS
from specdec_helpers.memory.kv_capacity import read_kv_capacity, relative_error


@pytest.mark.engine
def test_live_cpu_server_matches_the_calculator(target_dir, self_draft_server):
    """The self-draft server (1 GiB KV space, the VLLMServer default): target and draft share the pool,
    as the calculator assumes. The dtype is the one the engine resolved and logged."""
    if self_draft_server.install.platform != "cpu":
        pytest.skip("the live check in this test sizes a CPU KV cache")
    assert self_draft_server.cpu_kv_cache_gib == 1
    report = read_kv_capacity(self_draft_server.log_path)
    # vLLM cuts a CPU cache in blocks of 128 tokens (engine.install.KV_BLOCK_TOKENS): whole blocks, exactly
    predicted = memory.kv_tokens_for_space([target_dir, target_dir], 1 * memory.GIB, kv_dtype=report.kv_dtype,
                                           block_size=KV_BLOCK_TOKENS["cpu"])
    assert report.device == "CPU"
    assert report.kv_space_bytes == 1 * memory.GIB
    assert relative_error(predicted, report.tokens) < 0.005, (predicted, report)

