"""Notebook 00: a greedy answer with its log-probabilities, and where another answer leaves it (greedy speculation
matches the target only in exact arithmetic: a near tie of its two best tokens can flip)."""

from __future__ import annotations

import bisect
import itertools
import math
from dataclasses import dataclass
from typing import Sequence

from specdec_helpers.costmodel.analysis import first_difference

#: A split between two greedy answers is a near tie when the baseline's logits of the two candidates differ by at
#: most this (one at most e times as likely): rounding moves logits by far less, so a larger gap needs another cause.
NEAR_TIE_LOGIT_GAP = 1.0


@dataclass
class GreedyAnswer:
    """A temperature-0 answer: per generated token its text, log-probability and the 5 best candidates'."""

    text: str
    tokens: list[str]
    logprobs: list[float]
    top: list[dict[str, float]]


def greedy_answer(server, messages: Sequence[dict], max_tokens: int) -> GreedyAnswer:
    """One temperature-0 chat completion with the 5 best (raw) log-probabilities per token."""
    response = server.client().chat.completions.create(
        model=server.served_model_name, messages=list(messages), max_tokens=max_tokens, temperature=0.0,
        logprobs=True, top_logprobs=5)
    choice = response.choices[0]
    content = (choice.logprobs.content if choice.logprobs else None) or []
    return GreedyAnswer(text=choice.message.content or "", tokens=[c.token for c in content],
                        logprobs=[float(c.logprob) for c in content],
                        top=[{t.token: float(t.logprob) for t in (c.top_logprobs or [])} for c in content])


@dataclass(frozen=True)
class Divergence:
    """Where another greedy answer leaves the baseline's; ``logit_gap`` = log p(baseline token) - log p(other
    token), a lower bound when the other token is not among the baseline's top candidates."""

    char_offset: int
    position: int | None
    baseline_token: str | None
    other_token: str | None
    baseline_prob: float | None
    other_prob: float | None
    logit_gap: float | None
    gap_is_lower_bound: bool = False


def explain_divergence(baseline: GreedyAnswer, other_text: str) -> Divergence | None:
    """None when ``other_text`` is the baseline's text, else its first differing token: the longest of the baseline's
    top candidates there that the other text continues with (it has no log-probabilities); when none matches,
    ``other_token`` is its next characters and the gap a lower bound."""
    offset = first_difference(baseline.text, other_text)
    if offset is None:
        return None
    if not baseline.tokens or "".join(baseline.tokens) != baseline.text:  # byte-fallback pieces may not add up
        return Divergence(offset, None, None, other_text[offset:offset + 8] or None, None, None, None)
    ends = list(itertools.accumulate(len(token) for token in baseline.tokens))
    position = bisect.bisect_right(ends, offset)  # the token holding the first differing character
    if position == len(ends):  # the baseline ended where the other answer goes on
        return Divergence(offset, len(baseline.tokens), None, other_text[offset:offset + 8], None, None, None)
    start = ends[position] - len(baseline.tokens[position])
    # The split is at the token holding the first differing character, or at the one before it
    # when the other answer took a longer token there (" then" where the baseline had " the").
    for pos in [position, position - 1] if position > 0 else [position]:
        chosen, chosen_lp = baseline.tokens[pos], baseline.logprobs[pos]
        rest = other_text[ends[pos] - len(chosen):]
        candidates = [t for t in baseline.top[pos] if t and t != chosen and rest.startswith(t)
                      and (pos == position or len(t) > len(chosen))]
        if candidates:
            other = max(candidates, key=len)
            other_lp = baseline.top[pos][other]
            return Divergence(offset, pos, chosen, other, math.exp(chosen_lp), math.exp(other_lp), chosen_lp - other_lp)
    chosen, chosen_lp = baseline.tokens[position], baseline.logprobs[position]
    floor = min(baseline.top[position].values()) if baseline.top[position] else None
    return Divergence(offset, position, chosen, other_text[start:][:8] or "(end of answer)", math.exp(chosen_lp),
                      None, None if floor is None else chosen_lp - floor, gap_is_lower_bound=floor is not None)
