"""The two kinds of speculation the series measures, as vLLM's ``--speculative-config`` takes them: n-gram
lookup (drafts copied from earlier text) and a draft model. One builder each, so that the same setup is the
same command line in every notebook (a run's pool shares servers by command line)."""

from __future__ import annotations

import os
from typing import Any

#: the candidate name of n-gram lookup (speculation without a draft model) in profiles and tables
NGRAM = "ngram"


def ngram_config(num_speculative_tokens: int = 4, prompt_lookup_max: int = 4) -> dict[str, Any]:
    """Prompt-lookup (n-gram) speculation: drafts copied from earlier text, no second model."""
    return {"method": NGRAM, "num_speculative_tokens": num_speculative_tokens,
            "prompt_lookup_max": prompt_lookup_max, "prompt_lookup_min": 2}


def draft_model_config(draft_dir: str | os.PathLike, num_speculative_tokens: int = 4,
                       draft_sample_method: str | None = None) -> dict[str, Any]:
    """Draft-model speculation: a smaller model with the target's tokenizer proposes tokens.

    ``draft_sample_method`` "probabilistic" samples the draft at the request's temperature (vLLM's
    "greedy" treats it as one-hot): more acceptance when sampling, more memory.
    """
    # "greedy" is vLLM's default: left out, so the same server is the same command line (engine.pool)
    sampling = {"draft_sample_method": draft_sample_method} if draft_sample_method not in (None, "greedy") else {}
    return {"method": "draft_model", "model": str(draft_dir), "num_speculative_tokens": num_speculative_tokens,
            **sampling}
