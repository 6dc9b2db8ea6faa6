"""The default profile's pair on a real engine: Qwen2.5-Coder-1.5B-Instruct drafted by the 0.5B.

This is the series' central claim made testable without a GPU: with a real same-family draft,
structured output is accepted far more often than creative output. Acceptance (not wall-clock
speed, which belongs to the notebooks and benchmarks) is asserted, at temperature 0, on a few
prompts of each class from our prompt sets.
"""

from __future__ import annotations

import pytest

from specdec_helpers.costmodel.acceptance import SpecCounters
from specdec_helpers.engine.serving import VLLMServer
from specdec_helpers.engine.spec_config import draft_model_config
from specdec_helpers.measure.prompts import load_prompt_sets, select
from specdec_helpers.measure.requests import measure_request
from specdec_helpers.models.resolve import resolve_model
from tools.profiles import load_profile

PROFILE = load_profile("cpu-coder")
PROMPTS_PER_CLASS = 3
MAX_TOKENS = 32  # under make test the server has one core (two pinned workers)


@pytest.fixture(scope="module")
def coder_speculative_server(log_dir):
    target = resolve_model(PROFILE["target_model"])
    draft = resolve_model(PROFILE["draft_model"])
    spec = draft_model_config(draft, PROFILE["num_speculative_tokens"])
    with VLLMServer(target, name="coder-speculative", speculative_config=spec, log_dir=log_dir,
                    max_model_len=2048, cpu_kv_cache_gib=1) as server:
        yield server


def _pooled(server, prompts) -> SpecCounters:
    total = SpecCounters()
    for prompt in prompts:
        m = measure_request(server, prompt.messages, max_tokens=MAX_TOKENS, temperature=0.0)
        assert m.result.completion_tokens > 8, f"{prompt.id}: answer too short to measure"
        c = m.counters
        total = SpecCounters(total.drafts + c.drafts, total.draft_tokens + c.draft_tokens,
                             total.accepted_tokens + c.accepted_tokens)
    return total


@pytest.mark.engine
@pytest.mark.needs_the_machine  # about 12 GB: runs alone, before the shared servers start (tests/conftest.py)
def test_structured_output_is_accepted_far_more_than_creative(coder_speculative_server):
    prompts = load_prompt_sets(["structured", "creative"])
    structured = _pooled(coder_speculative_server, select(prompts, "structured",
                                                          limit_per_class=PROMPTS_PER_CLASS))
    creative = _pooled(coder_speculative_server, select(prompts, "creative",
                                                        limit_per_class=PROMPTS_PER_CLASS))
    assert structured.draft_tokens > 0 and creative.draft_tokens > 0
    assert structured.acceptance_rate >= 0.7, structured
    assert structured.acceptance_rate > creative.acceptance_rate, (structured, creative)
