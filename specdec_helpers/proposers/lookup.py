"""Drafting by lookup, and the contract vLLM 0.32 holds a custom proposer to.

vLLM imports the class named in ``--speculative-config '{"method": "custom_class", "model": "module.Class", ...}'``
(its folder on the server's PYTHONPATH), builds it once as ``Class(vllm_config)``, calls ``load_model(target)`` (the
CPU model runner always does) and, after every engine step, ``propose(sampled_token_ids, num_tokens_no_spec,
token_ids_cpu, slot_mappings=...)``: per batch row the tokens accepted this step (empty: no draft for that row), the
row's history length, and the histories themselves (row i: ``token_ids_cpu[i, :num_tokens_no_spec[i]]``). It returns
one list of at most k token ids per row. Notebook 04 writes its own version of :class:`LookupProposer` in a cell and
serves that; this one is the reference the tests serve.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np


def earlier_occurrence(history: np.ndarray, n: int) -> int | None:
    """Where the tokens after the most recent earlier occurrence of ``history``'s last ``n`` tokens start, or None."""
    length = len(history)
    if not 0 < n < length:
        return None
    windows = np.lib.stride_tricks.sliding_window_view(history[:length - 1], n)  # occurrences before the end
    hits = np.flatnonzero((windows == history[length - n:]).all(axis=1))
    return int(hits[-1]) + n if hits.size else None


def longest_match_draft(history: np.ndarray, k: int, max_n: int = 4, min_n: int = 2) -> list[int]:
    """Up to ``k`` tokens that followed the most recent earlier occurrence of the longest suffix of ``history`` (``n``
    tokens, ``max_n`` down to ``min_n``); [] when no suffix occurred before. What vLLM's n-gram method does."""
    for n in range(max_n, min_n - 1, -1):
        start = earlier_occurrence(history, n)
        if start is not None:
            return [int(t) for t in history[start:start + k]]
    return []


def draft_budget(vllm_config: Any) -> tuple[int, int]:
    """``(k, max_model_len)`` of the server: a row may get at most k drafts, and never past the context window."""
    return int(vllm_config.speculative_config.num_speculative_tokens), int(vllm_config.model_config.max_model_len)


class LookupProposer:
    """Drafts from the request's own history, like vLLM's n-gram lookup, as a custom class."""

    max_n, min_n = 4, 2

    def __init__(self, vllm_config: Any) -> None:
        self.k, self.max_model_len = draft_budget(vllm_config)

    def load_model(self, *args: Any, **kwargs: Any) -> None:  # no model of its own
        pass

    def propose(self, sampled_token_ids: Sequence[Sequence[int]], num_tokens_no_spec: np.ndarray,
                token_ids_cpu: np.ndarray, slot_mappings: Any = None, **_: Any) -> list[list[int]]:
        drafts = []
        for row, sampled in enumerate(sampled_token_ids):
            n = int(num_tokens_no_spec[row])
            room = min(self.k, self.max_model_len - 1 - n)
            drafts.append(longest_match_draft(token_ids_cpu[row, :n], room, self.max_n, self.min_n)
                          if sampled and room > 0 else [])
        return drafts
