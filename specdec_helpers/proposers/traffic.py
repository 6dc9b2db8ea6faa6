"""A proposer that learns from the traffic it serves (written for this series): besides the request's own history it
looks up the prompts *and answers* of earlier requests, so a workload whose requests share structure (one JSON
schema, the same tables, one code base) drafts more the longer the server runs. The idea of suffix decoding (Arctic
Inference), kept small: an n-gram index over finished requests, the longest match wins.

Honest measurement needs one rule: a request never drafts from an earlier request *with the same prompt*. Otherwise
a repeated prompt (the series measures each prompt several times, and primes every server with it first) would be
answered from memory, a cache hit and not speculation; with the rule, what it measures is what it learned from other
requests. vLLM does not tell a proposer when a request ends or which request a batch row holds: a row whose history
no longer extends what it held has a new request, and the old one joins the index.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
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


def draft_budget(vllm_config: Any) -> tuple[int, int]:
    """``(k, max_model_len)`` of the server: a row may get at most k drafts, and never past the context window."""
    return int(vllm_config.speculative_config.num_speculative_tokens), int(vllm_config.model_config.max_model_len)


def prompt_key(tokens: np.ndarray) -> str:
    return hashlib.blake2b(np.ascontiguousarray(tokens, dtype=np.int64).tobytes(), digest_size=12).hexdigest()


class TrafficIndex:
    """Finished requests' token sequences and, for every n-gram of ``min_n``..``max_n`` tokens in them, where its
    latest occurrence ends; at most ``max_tokens`` tokens are kept (the oldest requests go first)."""

    def __init__(self, max_n: int = 6, min_n: int = 3, max_tokens: int = 200_000) -> None:
        self.max_n, self.min_n, self.max_tokens = max_n, min_n, max_tokens
        self.sequences: OrderedDict[int, tuple[str, np.ndarray]] = OrderedDict()  # id -> (prompt key, tokens)
        self.grams: dict[tuple[int, ...], tuple[int, int]] = {}  # n-gram -> (sequence id, end of its occurrence)
        self._next_id = self.tokens = 0

    def add(self, key: str, tokens: np.ndarray) -> None:
        seq_id, self._next_id = self._next_id, self._next_id + 1
        tokens = np.array(tokens, dtype=np.int64)
        self.sequences[seq_id] = (key, tokens)
        self.tokens += len(tokens)
        values = tokens.tolist()
        for n in range(self.min_n, self.max_n + 1):
            for end in range(n, len(values)):  # an occurrence with at least one token after it
                self.grams[tuple(values[end - n:end])] = (seq_id, end)
        while self.tokens > self.max_tokens and len(self.sequences) > 1:
            self._forget_oldest()

    def _forget_oldest(self) -> None:
        old_id, (_, old) = self.sequences.popitem(last=False)
        self.tokens -= len(old)
        self.grams = {g: where for g, where in self.grams.items() if where[0] != old_id}

    def draft(self, history: np.ndarray, n: int, k: int, exclude_key: str | None = None) -> list[int]:
        """Up to ``k`` tokens that followed ``history``'s last ``n`` tokens in an earlier request whose prompt is not
        ``exclude_key``'s; [] when none did."""
        where = self.grams.get(tuple(history[-n:].tolist())) if self.min_n <= n <= min(self.max_n, len(history)) \
            else None
        if where is None or self.sequences[where[0]][0] == exclude_key:
            return []
        return [int(t) for t in self.sequences[where[0]][1][where[1]:where[1] + k]]


class TrafficProposer:
    """The request's own history first (as n-gram lookup), else the longest match in earlier requests (other
    prompts only); the index lives as long as the server."""

    def __init__(self, vllm_config: Any) -> None:
        self.k, self.max_model_len = draft_budget(vllm_config)
        self.index = TrafficIndex()
        self.rows: dict[int, tuple[str, np.ndarray]] = {}  # batch row -> (prompt key, history last seen)

    def load_model(self, *args: Any, **kwargs: Any) -> None:  # no model of its own
        pass

    def _follow(self, row: int, history: np.ndarray) -> str:
        """The prompt key of the request in ``row``; a request that replaced another there sends that one to the
        index (it has ended, or moved to another row: then it joins again when it ends, a harmless repeat)."""
        seen = self.rows.get(row)
        if seen is not None and len(history) >= len(seen[1]) and np.array_equal(history[:len(seen[1])], seen[1]):
            key = seen[0]
        else:
            if seen is not None:
                self.index.add(*seen)
            key = prompt_key(history[:-1])  # first sight: the prompt and the token prefill gave
        self.rows[row] = (key, history.copy())
        return key

    def propose(self, sampled_token_ids: Sequence[Sequence[int]], num_tokens_no_spec: np.ndarray,
                token_ids_cpu: np.ndarray, slot_mappings: Any = None, **_: Any) -> list[list[int]]:
        for row in [r for r in self.rows if r >= len(sampled_token_ids)]:  # rows the batch no longer has
            self.index.add(*self.rows.pop(row))
        drafts = []
        for row, sampled in enumerate(sampled_token_ids):
            n = int(num_tokens_no_spec[row])
            room = min(self.k, self.max_model_len - 1 - n)
            if not sampled or room <= 0:
                drafts.append([])
                continue
            history = token_ids_cpu[row, :n]
            drafts.append(self.draft(history, room, self._follow(row, history)))
        return drafts

    def draft(self, history: np.ndarray, k: int, key: str) -> list[int]:
        """The longest match wins, n = max_n down to 2: the request's own history first, then earlier requests."""
        for n in range(self.index.max_n, 1, -1):
            start = earlier_occurrence(history, n)
            if start is not None:
                return [int(t) for t in history[start:start + k]]
            found = self.index.draft(history, n, k, exclude_key=key)
            if found:
                return found
        return []
