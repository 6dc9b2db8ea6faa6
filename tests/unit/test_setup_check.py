"""Unit tests for the plumbing of notebooks 00, 02 and 03 (specdec_helpers.setup_check and the
notebook-facing text helpers): no server, no model, hand-made inputs."""

from __future__ import annotations

import math

import pytest

from specdec_helpers.setup_check import NEAR_TIE_LOGIT_GAP, GreedyAnswer, explain_divergence

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
