"""The proposers vLLM imports (specdec_helpers.proposers, tests/lookup_proposer.py), driven as vLLM drives them (a
batch of token histories per step), without an engine: what they draft, and what the traffic proposer remembers."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from specdec_helpers.proposers.traffic import TrafficIndex, TrafficProposer
from tests.lookup_proposer import LookupProposer, longest_match_draft

CONFIG = SimpleNamespace(speculative_config=SimpleNamespace(num_speculative_tokens=3),
                         model_config=SimpleNamespace(max_model_len=40))


def _step(proposer, histories):
    """One engine step: every row sampled a token this step."""
    tokens = np.zeros((4, 40), dtype=np.int32)
    for row, h in enumerate(histories):
        tokens[row, :len(h)] = h
    return proposer.propose([[h[-1]] for h in histories], np.array([len(h) for h in histories] + [0] * 2), tokens)


def _serve(proposer, history, prompt_len):
    """A request decoding token by token in row 0; the drafts it got at each step."""
    return [_step(proposer, [history[:n]])[0] for n in range(prompt_len + 1, len(history) + 1)]


def test_lookup_drafts_the_continuation_of_the_longest_earlier_match():
    assert longest_match_draft(np.array([5, 1, 2, 3, 9, 8, 7, 1, 2, 3]), 3) == [9, 8, 7]
    assert longest_match_draft(np.array([1, 2, 4, 4, 1, 2]), 2) == [4, 4]
    assert longest_match_draft(np.array([1, 2, 3, 4]), 3) == []  # nothing repeats
    # a longer match wins over a more recent shorter one
    assert longest_match_draft(np.array([1, 2, 3, 7, 0, 2, 3, 8, 1, 2, 3]), 2) == [7, 0]


def test_lookup_proposer_keeps_to_k_the_context_and_rows_without_a_sample():
    proposer = LookupProposer(CONFIG)
    history = [1, 2, 3, 4, 5, 6, 1, 2, 3]
    assert _step(proposer, [history]) == [[4, 5, 6]]
    tokens = np.zeros((2, 40), dtype=np.int32)
    tokens[0, :9] = history
    assert proposer.propose([[], [3]], np.array([9, 0]), tokens) == [[], []]  # a row still reading its prompt
    near_end = np.zeros((1, 40), dtype=np.int32)
    near_end[0, :38] = [1, 2, 3] * 12 + [1, 2]
    assert len(proposer.propose([[2]], np.array([38]), near_end)[0]) == 1  # room for one token before the end


def test_traffic_proposer_learns_from_earlier_requests_but_never_from_the_same_prompt():
    proposer = TrafficProposer(CONFIG)
    first = [100, 101, 102, 7, 8, 9, 10, 11, 12]  # prompt 100 101 102, answer 7..12
    assert all(d == [] for d in _serve(proposer, first, 3))  # nothing earlier, nothing repeats
    other = [200, 201, 202, 7, 8, 9, 10, 11, 12]  # another prompt, an answer of the same structure
    drafts = _serve(proposer, other, 3)
    assert [10, 11, 12] in drafts  # drafted from the first request's answer once "7 8 9" matched
    again = [100, 101, 102, 7, 8, 9, 10]  # the first prompt again: its own earlier answer is not used ...
    proposer_fresh = TrafficProposer(CONFIG)
    _serve(proposer_fresh, first, 3)
    _step(proposer_fresh, [[300]])  # the first request leaves row 0: it joins the memory
    assert all(d == [] for d in _serve(proposer_fresh, again, 3))  # ... so nothing to draft from
    assert len(proposer_fresh.index.sequences) >= 1


def test_a_request_that_leaves_the_batch_joins_the_memory_and_the_oldest_go_first():
    proposer = TrafficProposer(CONFIG)
    _step(proposer, [[1, 2, 3, 4], [5, 6, 7, 8]])
    _step(proposer, [[1, 2, 3, 4, 9]])  # row 1's request ended: the batch shrank
    assert [tokens.tolist() for _, tokens in proposer.index.sequences.values()] == [[5, 6, 7, 8]]
    index = TrafficIndex(max_n=3, min_n=3, max_tokens=8)
    index.add("a", np.array([1, 2, 3, 4, 5]))
    index.add("b", np.array([6, 7, 8, 9, 10]))  # 10 tokens > 8: "a" is forgotten, and its n-grams with it
    assert [k for k, _ in index.sequences.values()] == ["b"]
    assert index.draft(np.array([0, 1, 2, 3]), 3, 2) == [] and index.draft(np.array([6, 7, 8]), 3, 2) == [9, 10]
