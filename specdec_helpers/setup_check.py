"""Plumbing for notebook 00 (setup check): size its servers from the memory plan, and explain a greedy
answer that is not token-identical to the baseline's. The check starts the target as its *own* draft,
doubling its weights and KV bytes per token (an 8B self-draft on an 80 GB card at 0.45 leaves a few thousand
KV tokens), so it asks for no more context than its requests need and falls back to the profile's draft.
Greedy speculative output is the target's own only *in exact arithmetic*: in bf16 a verify pass rounds
differently from one-token decoding, and a near tie of the target's two best tokens can flip."""

from __future__ import annotations

import bisect
import itertools
import math
from dataclasses import dataclass, field
from typing import Any, Sequence

from specdec_helpers import memory
from specdec_helpers.costmodel.analysis import first_difference
from specdec_helpers.engine.serving import cpu_serving_dtype
from specdec_helpers.models.resolve import ResolvedModel
from specdec_helpers.preflight import checks as preflight_checks

#: A split between two greedy answers is a near tie when the baseline's logits of the two candidates differ by
#: at most this (e^1: one at most 2.7 times as likely as the other). Rounding differences between a batched
#: verify pass and one-token decoding move logits by far less, so a larger gap needs another explanation.
NEAR_TIE_LOGIT_GAP = 1.0


def setup_context_len(needed_tokens: int, max_model_len: int) -> int:
    """The ``max_model_len`` the setup check's servers ask for: its longest request (prompt + answer)
    rounded up to 1,024, at least 2,048, never above the profile's ``max_model_len``."""
    if needed_tokens < 1 or max_model_len < 1:
        raise ValueError("needed_tokens and max_model_len must be positive token counts")
    return min(max_model_len, max(2048, math.ceil(needed_tokens / 1024) * 1024))


@dataclass(frozen=True)
class ServerSizing:
    """What the setup check's speculative server runs with, and why: ``draft`` the model the draft server
    loads (the target or the profile's draft), ``fits_tokens`` the largest context the plan allows."""

    draft: str
    self_draft: bool
    max_model_len: int
    fits_tokens: int
    reason: str
    plans: dict[str, Any] = field(default_factory=dict)


def _shape(model: Any) -> memory.ModelShape:
    return model.shape if isinstance(model, ResolvedModel) else memory.model_shape(model)


def _cpu_ram(shapes: Sequence[memory.ModelShape], cpu_kv_cache_gib: float) -> float:
    """Bytes one CPU server of these models needs, by the preflight's formula and in its served dtype."""
    weights = sum(memory.weight_bytes(s, cpu_serving_dtype("auto")) for s in shapes)
    return preflight_checks.cpu_servers_ram_bytes(weights, 1, cpu_kv_cache_gib)


def size_setup_servers(*, platform: str, target: Any, target_key: str, profile_draft: Any | None,
                       profile_draft_key: str | None, needed_tokens: int, max_model_len: int, gpu: Any = None,
                       gpu_memory_utilization: float = 0.45, cpu_kv_cache_gib: float = 1, kv_dtype: str = "bf16",
                       safety: float) -> ServerSizing:
    """Choose the draft and the context of the setup check's draft-model server. ``target``, ``profile_draft``:
    a :class:`ResolvedModel` or what :func:`memory.model_shape` takes; ``*_key``: the profile's names.

    On a CPU the self-draft is used when ``cpu_kv_cache_gib`` holds one sequence and a second target fits in free
    RAM (a float32 1.5B twice needs ~22 GiB), else the profile's draft. On a GPU it is used when the context is at
    most ``safety`` x the largest the plan allows (notebook 00 says why), else the profile's draft if that fits.
    """
    context = setup_context_len(needed_tokens, max_model_len)
    target = _shape(target)  # read once, then passed to every plan; the draft's only when it is needed
    if platform == "cpu":
        space = cpu_kv_cache_gib * memory.GIB
        fits = memory.kv_tokens_for_space([target, target], space, kv_dtype=kv_dtype)
        ram_needed, ram_free = _cpu_ram([target, target], cpu_kv_cache_gib), preflight_checks.available_ram_bytes()
        if ram_needed > ram_free and profile_draft is not None and profile_draft_key is not None:
            # a second copy of the target does not fit in memory: the profile's (smaller) draft does the job
            draft = _shape(profile_draft)
            fits = memory.kv_tokens_for_space([target, draft], space, kv_dtype=kv_dtype)
            return ServerSizing(profile_draft_key, False, context, fits,
                                f"the target drafting for itself needs about {ram_needed / memory.GIB:.1f} GiB of "
                                f"RAM and {ram_free / memory.GIB:.1f} GiB are free; the profile's draft needs "
                                f"{_cpu_ram([target, draft], cpu_kv_cache_gib) / memory.GIB:.1f} GiB",
                                {"self_draft_ram_gib": round(ram_needed / memory.GIB, 1),
                                 "free_ram_gib": round(ram_free / memory.GIB, 1)})
        if fits >= context:
            return ServerSizing(target_key, True, context, fits,
                                f"{cpu_kv_cache_gib:g} GiB of CPU KV cache holds {fits:,} tokens of target + "
                                f"self-draft, enough for one {context:,}-token sequence",
                                {"self_draft_fits_tokens": fits})
        raise memory.ContextTooLongError(
            f"cpu_kv_cache_gib={cpu_kv_cache_gib:g} holds {fits:,} tokens of the target drafting for "
            f"itself, less than one sequence of {context:,} tokens (the setup check's longest request "
            f"needs {needed_tokens:,}); raise cpu_kv_cache_gib", max_context_len=fits)

    spec = memory.gpu_spec(gpu)
    plan = dict(gpu=spec, gpu_memory_utilization=gpu_memory_utilization, kv_dtype=kv_dtype)
    on = f"{spec.name} at gpu_memory_utilization={gpu_memory_utilization:g}"
    plans: dict[str, Any] = {"gpu": spec.name}
    try:
        self_fits = memory.max_context_len(target, target, **plan)
    except memory.BudgetError as exc:
        self_fits, plans["self_draft_error"] = 0, str(exc)
    plans["self_draft_fits_tokens"] = self_fits
    if context <= safety * self_fits:
        return ServerSizing(target_key, True, context, self_fits,
                            f"the plan for {spec.name} at {gpu_memory_utilization:g} leaves {self_fits:,} KV "
                            f"tokens for target + self-draft; the check needs {context:,}", plans)
    if profile_draft is None or profile_draft_key is None:
        raise memory.BudgetError(
            f"the target drafting for itself does not fit {on} (room for {self_fits:,} KV tokens, the check "
            f"needs {context:,} with a {safety:.0%} margin) and the profile names no draft_model; raise "
            f"gpu_memory_utilization or set draft_model")
    try:
        draft_fits = memory.max_context_len(target, _shape(profile_draft), **plan)
    except memory.BudgetError as exc:
        raise memory.BudgetError(f"neither the target drafting for itself nor the profile's draft "
                                 f"{profile_draft_key} fits {on}: {exc}") from exc
    plans["profile_draft_fits_tokens"] = draft_fits
    if context > draft_fits:
        raise memory.ContextTooLongError(
            f"even with the profile's draft {profile_draft_key}, {on} leaves room for {draft_fits:,} KV "
            f"tokens, less than the {context:,} the setup check needs; raise gpu_memory_utilization",
            max_context_len=draft_fits)
    return ServerSizing(profile_draft_key, False, context, draft_fits,
                        f"the target drafting for itself would leave {self_fits:,} KV tokens on {spec.name} at "
                        f"{gpu_memory_utilization:g}, too few for {context:,} with a margin; the profile's draft "
                        f"leaves {draft_fits:,}", plans)


@dataclass
class GreedyAnswer:
    """A temperature-0 answer: per generated token its text, log-probability and the 5 best candidates'."""

    text: str
    tokens: list[str]
    logprobs: list[float]
    top: list[dict[str, float]]


def greedy_answer(server, messages: Sequence[dict], max_tokens: int) -> GreedyAnswer:
    """One non-streamed temperature-0 chat completion with the 5 best log-probabilities per token (vLLM's raw
    log-probabilities, so a difference of two is a difference of logits)."""
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
    """Where another server's greedy answer leaves the baseline's, read from the baseline's log-probabilities.
    ``logit_gap`` = log p(baseline token) - log p(other token), the difference of their logits; a lower
    bound (``gap_is_lower_bound``) when the other token is not among the baseline's top candidates."""

    char_offset: int
    position: int | None
    baseline_token: str | None
    other_token: str | None
    baseline_prob: float | None
    other_prob: float | None
    logit_gap: float | None
    gap_is_lower_bound: bool = False

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def explain_divergence(baseline: GreedyAnswer, other_text: str) -> Divergence | None:
    """None when ``other_text`` equals the baseline's text; otherwise the first differing token. The other
    answer is text only (speculative servers need not return log-probabilities), so its token at the split is
    the longest of the baseline's top candidates there that the other text continues with; when none matches
    (a rarer token, or the other answer ended), ``other_token`` is its next characters and the gap a lower bound."""
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
            return Divergence(offset, pos, chosen, other, math.exp(chosen_lp), math.exp(other_lp),
                              chosen_lp - other_lp)
    chosen, chosen_lp = baseline.tokens[position], baseline.logprobs[position]
    floor = min(baseline.top[position].values()) if baseline.top[position] else None
    return Divergence(offset, position, chosen, other_text[start:][:8] or "(end of answer)", math.exp(chosen_lp),
                      None, None if floor is None else chosen_lp - floor, gap_is_lower_bound=floor is not None)
