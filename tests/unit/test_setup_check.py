"""Unit tests for the plumbing of notebooks 00, 02 and 03 (specdec_helpers.setup_check and the
notebook-facing text helpers): no server, no model, hand-made inputs."""

from __future__ import annotations

import math

import pytest

from specdec_helpers import memory
from specdec_helpers.setup_check import (
    NEAR_TIE_LOGIT_GAP,
    GreedyAnswer,
    explain_divergence,
    setup_context_len,
    size_setup_servers,
)

LLAMA_8B, LLAMA_1B = "meta-llama/Llama-3.1-8B-Instruct", "meta-llama/Llama-3.2-1B-Instruct"
QWEN_15B, QWEN_05B = "Qwen/Qwen2.5-Coder-1.5B-Instruct", "Qwen/Qwen2.5-Coder-0.5B-Instruct"


# ----------------------------------------------------------------------------- sizing


@pytest.mark.parametrize("needed, profile_len, expected", [
    (300, 32768, 2048),    # short requests still get the 2,048 floor
    (2048, 32768, 2048),
    (2049, 32768, 3072),   # rounded up to whole 1,024s
    (300, 1024, 1024),     # never above the profile's max_model_len
])
def test_setup_context_len(needed, profile_len, expected):
    assert setup_context_len(needed, profile_len) == expected

SAFETY = 0.75  # notebook 00's SELF_DRAFT_SAFETY (tests/unit/test_notebook_rules.py checks it)


def test_setup_context_len_refuses_nonsense():
    with pytest.raises(ValueError):
        setup_context_len(0, 2048)


def test_cpu_uses_the_self_draft_when_the_kv_space_holds_a_sequence(monkeypatch):
    from specdec_helpers.preflight import checks

    monkeypatch.setattr(checks, "available_ram_bytes", lambda: 64 * memory.GIB)  # a big machine
    # 2 GiB, the 1.5B twice: 2,147,483,648 / (16 x 2 x 28,672) = 2,340 blocks = 37,440 tokens.
    sizing = size_setup_servers(safety=SAFETY, platform="cpu", target=QWEN_15B, target_key="t", profile_draft=QWEN_05B,
                                profile_draft_key="d", needed_tokens=400, max_model_len=4096, cpu_kv_cache_gib=2)
    assert (sizing.draft, sizing.self_draft, sizing.max_model_len, sizing.fits_tokens) == ("t", True, 2048, 37_440)


def test_cpu_takes_the_profile_draft_when_a_second_target_does_not_fit_in_ram(monkeypatch):
    from specdec_helpers.engine import serving
    from specdec_helpers.preflight import checks

    monkeypatch.setattr(serving, "cpu_has_fast_bf16", lambda: False)  # served in float32
    monkeypatch.setattr(checks, "available_ram_bytes", lambda: 18 * memory.GIB)  # a 24 GB machine with programs open
    sizing = size_setup_servers(safety=SAFETY, platform="cpu", target=QWEN_15B, target_key="t", profile_draft=QWEN_05B,
                                profile_draft_key="d", needed_tokens=400, max_model_len=4096, cpu_kv_cache_gib=2)
    assert (sizing.draft, sizing.self_draft) == ("d", False)
    assert "drafting for itself needs about" in sizing.reason and sizing.plans["free_ram_gib"] == 18.0


def test_cpu_refuses_a_kv_space_too_small_and_says_what_to_raise(monkeypatch):
    from specdec_helpers.preflight import checks

    monkeypatch.setattr(checks, "available_ram_bytes", lambda: 64 * memory.GIB)
    with pytest.raises(memory.ContextTooLongError, match="cpu_kv_cache_gib") as err:
        size_setup_servers(safety=SAFETY, platform="cpu", target=QWEN_15B, target_key="t", profile_draft=None,
                           profile_draft_key=None, needed_tokens=400, max_model_len=4096, cpu_kv_cache_gib=0.001)
    assert err.value.max_context_len < 2048


def test_gpu_self_draft_on_a_big_card():
    # RTX PRO 6000 at 0.45: the 8B twice leaves 32,320 tokens, far more than 2,048 / 0.75.
    sizing = size_setup_servers(safety=SAFETY, platform="gpu", target=LLAMA_8B, target_key="t", profile_draft=LLAMA_1B,
                                profile_draft_key="d", needed_tokens=500, max_model_len=32768,
                                gpu="RTX PRO 6000 Blackwell", gpu_memory_utilization=0.45)
    assert sizing.self_draft and sizing.max_model_len == 2048 and sizing.fits_tokens == 32_320


def test_gpu_falls_back_to_the_profile_draft_when_the_self_draft_is_tight():
    # H100 at 0.45: the Qwen3-8B twice leaves 2,400 tokens; 2,048 > 0.75 x 2,400, so the real draft.
    sizing = size_setup_servers(safety=SAFETY, platform="gpu", target="Qwen/Qwen3-8B", target_key="t",
                                profile_draft="Qwen/Qwen3-0.6B", profile_draft_key="d", needed_tokens=500,
                                max_model_len=32768, gpu="H100", gpu_memory_utilization=0.45)
    assert (sizing.draft, sizing.self_draft) == ("d", False)
    assert sizing.plans["self_draft_fits_tokens"] == 2_400
    assert sizing.fits_tokens > 2048


def test_gpu_falls_back_when_two_copies_do_not_fit_at_all():
    # L40S at 0.45 = 21.6 GB < 32 GB of two 8B copies; the 1B draft fits.
    sizing = size_setup_servers(safety=SAFETY, platform="gpu", target=LLAMA_8B, target_key="t", profile_draft=LLAMA_1B,
                                profile_draft_key="d", needed_tokens=500, max_model_len=32768,
                                gpu="L40S", gpu_memory_utilization=0.45)
    assert not sizing.self_draft and "self_draft_error" in sizing.plans


def test_gpu_without_room_even_for_the_real_draft_names_the_setting():
    with pytest.raises(memory.BudgetError, match="gpu_memory_utilization"):
        size_setup_servers(safety=SAFETY, platform="gpu", target=LLAMA_8B, target_key="t", profile_draft=LLAMA_1B,
                           profile_draft_key="d", needed_tokens=500, max_model_len=32768,
                           gpu="L4", gpu_memory_utilization=0.45)
    with pytest.raises(memory.BudgetError, match="draft_model"):
        size_setup_servers(safety=SAFETY, platform="gpu", target=LLAMA_8B, target_key="t", profile_draft=None,
                           profile_draft_key=None, needed_tokens=500, max_model_len=32768,
                           gpu="L40S", gpu_memory_utilization=0.45)


# ----------------------------------------------------------------------------- greedy splits


def answer(tokens, chosen_lp, tops):
    return GreedyAnswer(text="".join(tokens), tokens=list(tokens), logprobs=list(chosen_lp), top=list(tops))


BASE = answer(
    ['{"', "name", '":', ' "', "Ada", '"}'],
    [-0.01, -0.02, -0.01, -0.05, -0.60, -0.01],
    [{'{"': -0.01}, {"name": -0.02, "title": -4.0}, {'":': -0.01}, {' "': -0.05},
     {"Ada": -0.60, "Alan": -0.80, "Bob": -3.0}, {'"}': -0.01}],
)


def test_identical_text_is_no_divergence():
    assert explain_divergence(BASE, BASE.text) is None


def test_a_near_tie_is_found_with_both_candidates_and_their_gap():
    split = explain_divergence(BASE, '{"name": "Alan"}')
    assert (split.position, split.baseline_token, split.other_token) == (4, "Ada", "Alan")
    assert split.logit_gap == pytest.approx(0.20)  # -0.60 - (-0.80)
    assert split.baseline_prob == pytest.approx(math.exp(-0.60))
    assert split.logit_gap < NEAR_TIE_LOGIT_GAP and not split.gap_is_lower_bound


def test_a_longer_token_one_position_earlier_is_recognised():
    # Baseline wrote " the" + "ory"; the other answer took " then": the split is at " the".
    base = answer([" the", "ory"], [-0.3, -0.1], [{" the": -0.3, " then": -0.5}, {"ory": -0.1}])
    split = explain_divergence(base, " then")
    assert (split.position, split.baseline_token, split.other_token) == (0, " the", " then")
    assert split.logit_gap == pytest.approx(0.2)


def test_a_token_outside_the_top_candidates_gives_a_lower_bound():
    split = explain_divergence(BASE, '{"name": "Zed"}')
    assert split.position == 4 and split.other_token.startswith("Zed")
    assert split.gap_is_lower_bound and split.logit_gap == pytest.approx(-0.60 - -3.0)


def test_tokens_that_do_not_add_up_to_the_text_give_the_offset_only():
    broken = GreedyAnswer(text="héllo", tokens=["h", "bytes:\\xc3", "llo"], logprobs=[0, 0, 0], top=[{}, {}, {}])
    split = explain_divergence(broken, "hallo")
    assert split.char_offset == 1 and split.position is None and split.logit_gap is None


def test_the_other_answer_going_on_after_the_baseline_ended():
    split = explain_divergence(BASE, BASE.text + " more")
    assert split.position == len(BASE.tokens) and split.baseline_token is None
