"""Each distilled draft, served by vLLM, is lossless and is accepted well above what untrained weights
would get (shipped files and provisioning: tests/unit/test_drafts.py)."""

from __future__ import annotations

import pytest

from specdec_helpers import models as models_mod
from specdec_helpers.costmodel.acceptance import SpecCounters
from specdec_helpers.engine.serving import VLLMServer
from specdec_helpers.engine.spec_config import draft_model_config
from specdec_helpers.measure.prompts import load_prompt_sets, select
from specdec_helpers.measure.requests import measure_request, stream_chat

K = 4
#: First-position acceptance on 3 structured prompts x 32 tokens must stay above these floors:
#: a bit under what the shipped weights reach (data/drafts/manifest.json), far above the ~0%
#: that untrained or mis-assembled layers get.
FLOORS = {"smollm2-draft-1l": 0.12, "smollm2-draft-2l": 0.18, "smollm2-draft-4l": 0.22}
PROMPTS = select(load_prompt_sets(["structured"]), limit_per_class=3)


@pytest.mark.engine
@pytest.mark.parametrize("key", sorted(FLOORS))
def test_each_draft_is_lossless_and_accepted_in_vllm(key, target_dir, baseline_server, log_dir):
    draft_dir = models_mod.resolve_model(key)
    server = VLLMServer(target_dir, name=key, speculative_config=draft_model_config(draft_dir, K),
                        log_dir=log_dir, max_model_len=1024, dtype="float32")
    counters = SpecCounters()
    with server:
        for prompt in PROMPTS:
            base = stream_chat(baseline_server.client(), baseline_server.served_model_name,
                               prompt.messages, max_tokens=32, temperature=0.0)
            m = measure_request(server, prompt.messages, max_tokens=32, temperature=0.0)
            assert m.result.text == base.text, f"{key} changed the greedy output of {prompt.id}"
            assert m.result.completion_tokens == base.completion_tokens
            counters = SpecCounters(
                counters.drafts + m.counters.drafts,
                counters.draft_tokens + m.counters.draft_tokens,
                counters.accepted_tokens + m.counters.accepted_tokens,
                tuple(a + b for a, b in zip(counters.accepted_per_position or (0.0,) * K,
                                            m.counters.accepted_per_position)))
    assert counters.draft_tokens == counters.drafts * K
    first = counters.per_position_rate[0]
    assert first >= FLOORS[key], f"{key}: first-position acceptance {first:.2f} < {FLOORS[key]}"

