"""vLLM's ``--speculative-config`` for the kinds of speculation measured (n-gram lookup, a draft model, a proposer
class vLLM imports): one builder each, so the same setup is the same command line in every notebook (the run's
pool shares by it)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

#: the candidate name of n-gram lookup (speculation without a draft model) in profiles and tables
NGRAM = "ngram"
#: proposer classes measured as candidates, by the name profiles and tables use: what vLLM imports (custom_class)
PROPOSERS = {"traffic": "specdec_helpers.proposers.traffic.TrafficProposer"}
#: the candidate name of vLLM's suffix decoding (Arctic Inference's suffix trees over the request and earlier answers)
SUFFIX = "suffix"


def ngram_config(num_speculative_tokens: int = 4, prompt_lookup_max: int = 4) -> dict[str, Any]:
    """Prompt-lookup (n-gram) speculation: drafts copied from earlier text, no second model."""
    return {"method": NGRAM, "num_speculative_tokens": num_speculative_tokens,
            "prompt_lookup_max": prompt_lookup_max, "prompt_lookup_min": 2}


#: a candidate named "eagle3:<hub id or folder>" is an EAGLE-3 head for the target (vLLM's ``method: "eagle3"``)
EAGLE3_PREFIX = "eagle3:"


def eagle3_config(head: str, num_speculative_tokens: int = 4) -> dict[str, Any]:
    """EAGLE-3: a one-layer head trained on the target's own hidden states drafts the tokens (a hub id or folder)."""
    return {"method": "eagle3", "model": head, "num_speculative_tokens": num_speculative_tokens}


def is_draft_model_name(candidate: str) -> bool:
    """Does the candidate name a draft *model* to resolve (``models.resolve_model``)? Not n-gram, not suffix decoding,
    not a proposer class, not an EAGLE-3 head (a head is not a model that runs alone)."""
    # n-gram, suffix decoding and the proposer classes find their drafts in text: no model to resolve
    return candidate not in (NGRAM, SUFFIX, *PROPOSERS) and not candidate.startswith(EAGLE3_PREFIX)


def suffix_config(num_speculative_tokens: int = 4) -> dict[str, Any]:
    """vLLM's suffix decoding (``method: "suffix"``, the arctic-inference package): drafts up to k tokens, the most
    probable continuation (at least ``suffix_decoding_min_token_prob``) in suffix trees over this request and over the
    answers the server finished before: measured on a fresh server (``measure.evaluate.learns_in_server``)."""
    return {"method": SUFFIX, "num_speculative_tokens": num_speculative_tokens}


def custom_config(class_path: str, num_speculative_tokens: int = 4) -> dict[str, Any]:
    """A proposer class vLLM imports by its dotted path (``method: "custom_class"``; its module's folder must be on
    the server's PYTHONPATH: ``VLLMServer.python_path``)."""
    if "." not in class_path or "/" in class_path:
        raise ValueError(f"{class_path!r}: give the class as module.Class, importable on the server's PYTHONPATH")
    return {"method": "custom_class", "model": class_path, "num_speculative_tokens": num_speculative_tokens}


def draft_model_config(draft_dir: str | os.PathLike, num_speculative_tokens: int = 4,
                       draft_sample_method: str | None = None,
                       k_by_batch_size: Mapping[int, int] | None = None) -> dict[str, Any]:
    """Draft-model speculation. ``draft_sample_method`` "probabilistic" samples the draft at the request's
    temperature (vLLM's "greedy" treats it as one-hot): more acceptance when sampling, more memory.
    ``k_by_batch_size`` ({batch size: k}, :func:`batch_size_schedule`) drafts fewer tokens in fuller steps."""
    # "greedy" is vLLM's default: left out, so the same server is the same command line (engine.pool)
    config = {"method": "draft_model", "model": str(draft_dir), "num_speculative_tokens": num_speculative_tokens}
    if draft_sample_method not in (None, "greedy"):
        config["draft_sample_method"] = draft_sample_method
    if k_by_batch_size:
        config["num_speculative_tokens_per_batch_size"] = batch_size_schedule(k_by_batch_size)
    return config


def batch_size_schedule(k_by_batch_size: Mapping[int, int]) -> list[list[int]]:
    """``{1: 4, 2: 4, 3: 2, 4: 0}`` as vLLM takes it: inclusive ranges ``[[1, 2, 4], [3, 3, 2], [4, 4, 0]]``
    (batch sizes past the last range keep its k)."""
    if not k_by_batch_size:
        raise ValueError("the schedule needs a k for batch size 1 at least")
    sizes = sorted(int(b) for b in k_by_batch_size)
    if sizes[0] != 1 or sizes != list(range(1, sizes[-1] + 1)):
        raise ValueError(f"give a k for every batch size from 1 to the largest ({sizes}): vLLM needs ranges "
                         "that start at 1 and leave no gap")
    if any(int(k) < 0 for k in k_by_batch_size.values()):
        raise ValueError(f"k must be 0 (no speculation for that batch size) or more: {dict(k_by_batch_size)}")
    ranges: list[list[int]] = []
    for b in sizes:
        k = int(k_by_batch_size[b])
        if ranges and ranges[-1][2] == k:
            ranges[-1][1] = b
        else:
            ranges.append([b, b, k])
    return ranges
