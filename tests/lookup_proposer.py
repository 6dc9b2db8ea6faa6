"""The reference of notebook 04's own-history proposer, which the notebook writes itself in a cell and serves: the tests
serve this one (``tests.lookup_proposer.LookupProposer``, the repository root on the server's PYTHONPATH) and drive it
step by step, to hold the contract in :mod:`specdec_helpers.proposers` and to compare the traffic proposer with."""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from specdec_helpers.proposers.traffic import draft_budget, earlier_occurrence


def longest_match_draft(history: np.ndarray, k: int, max_n: int = 4, min_n: int = 2) -> list[int]:
    """Up to ``k`` tokens that followed the most recent earlier occurrence of the longest suffix of ``history`` (``n``
    tokens, ``max_n`` down to ``min_n``); [] when no suffix occurred before. What vLLM's n-gram method does."""
    for n in range(max_n, min_n - 1, -1):
        start = earlier_occurrence(history, n)
        if start is not None:
            return [int(t) for t in history[start:start + k]]
    return []


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
