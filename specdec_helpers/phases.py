"""Measure the two phases of a request, prefill and decode, and the cost of verifying k tokens.

Why these three measurements decide whether speculation can pay:

* **Prefill** reads the whole prompt in one pass: its time grows with prompt length and is
  compute-bound. Speculation does nothing for it.
* **Decode** writes one token per forward pass; each pass reads all the weights, so on most
  hardware its time per token is nearly flat and bound by memory bandwidth. Speculation attacks
  exactly this: several tokens per pass.
* **Verify cost** v(k): the pass that checks k drafted tokens, relative to a decode step. Where it
  is close to 1 (a GPU at small batch: the weights are read once either way) verification is
  "free"; where it grows with k (a CPU, or a busy GPU) it eats the gain. The cost model
  (:mod:`specdec_helpers.theory`) uses it. What is timed here is a forward over ``n`` new tokens
  (``verify_cost(ks=...)`` takes these ``n``); checking k drafts processes ``n = k + 1`` positions,
  so ``v(k) = theory.VerifyCost(...)(k + 1)``.

All requests go through the real server with token-id prompts (the completions API accepts lists
of ids), so prompt lengths are exact and no chat template gets in the way.
"""

from __future__ import annotations

import statistics
import time
from typing import Sequence

import numpy as np

from .serving import VLLMServer

# Ordinary vocabulary ids of Llama-style tokenizers (skip the special tokens at the low end).
_TOKEN_RANGE = (1000, 30000)
PREFIX_BLOCK = 16  # vLLM's default KV block size: prefix caching hits whole blocks only


def random_token_prompt(n_tokens: int, seed: int) -> list[int]:
    """A prompt of exactly ``n_tokens`` ids; a new seed gives a prompt the prefix cache has not seen."""
    rng = np.random.default_rng(seed)
    return rng.integers(*_TOKEN_RANGE, size=n_tokens).tolist()


def time_completion(server: VLLMServer, prompt_ids: list[int], max_tokens: int = 1) -> float:
    """Seconds for one non-streamed completion (``max_tokens=1``: prefill plus one sample)."""
    client = server.client()
    started = time.perf_counter()
    client.completions.create(model=server.served_model_name, prompt=prompt_ids, max_tokens=max_tokens,
                              temperature=0.0, extra_body={"ignore_eos": True})
    return time.perf_counter() - started


def ttft_by_prompt_length(server: VLLMServer, lengths: Sequence[int], repeats: int = 3,
                          seed: int = 0) -> "pd.DataFrame":
    """Time to first token for fresh prompts of each length, interleaved across repeats."""
    import pandas as pd

    rows = []
    for repeat in range(repeats):
        for length in lengths:
            prompt = random_token_prompt(length, seed=seed + 1000 * repeat + length)
            rows.append({"prompt_tokens": length, "repeat": repeat,
                         "ttft_s": time_completion(server, prompt)})
    return pd.DataFrame(rows)


def itl_by_position(server: VLLMServer, output_tokens: int, repeats: int = 3, prompt_tokens: int = 64,
                    seed: int = 0) -> "pd.DataFrame":
    """Gap before each output token of a streamed answer (baseline server: one token per chunk)."""
    import pandas as pd

    client = server.client()
    rows = []
    for repeat in range(repeats):
        prompt = random_token_prompt(prompt_tokens, seed=seed + repeat)
        stream = client.completions.create(model=server.served_model_name, prompt=prompt,
                                           max_tokens=output_tokens, temperature=0.0, stream=True,
                                           extra_body={"ignore_eos": True})
        previous = None
        position = 0
        for chunk in stream:
            now = time.perf_counter()
            if not chunk.choices or not chunk.choices[0].text:
                continue
            if previous is not None:
                rows.append({"position": position, "repeat": repeat, "itl_s": now - previous})
            previous = now
            position += 1
    return pd.DataFrame(rows)


def verify_cost(server: VLLMServer, ks: Sequence[int] = (1, 2, 3, 4, 5, 6, 8), base_tokens: int = 256,
                repeats: int = 5, seed: int = 7) -> "pd.DataFrame":
    """Time of a forward pass over k new token positions on top of a cached prefix (k = 1 is a decode step).

    The prefix (a whole number of KV blocks) is sent once so vLLM's prefix cache holds it; every
    later request is prefix + k fresh tokens with ``max_tokens=1``, so the engine computes exactly
    k tokens against the cached context: the shape of a verification pass over k draft tokens.
    """
    import pandas as pd

    if base_tokens % PREFIX_BLOCK:
        raise ValueError(f"base_tokens must be a multiple of {PREFIX_BLOCK} so the whole prefix is cached")
    base = random_token_prompt(base_tokens, seed=seed)
    time_completion(server, base)  # fills the prefix cache
    rows = []
    for repeat in range(repeats):
        for k in ks:
            suffix = random_token_prompt(k, seed=seed + 100 * repeat + k + 1)
            rows.append({"k": k, "repeat": repeat, "seconds": time_completion(server, base + suffix)})
    return pd.DataFrame(rows)


def add_verify_ratio(df: "pd.DataFrame", step_s: float) -> "pd.DataFrame":
    """v(k) = 1 + (T(k) - T(1)) / decode step, per row.

    Each timed request carries a fixed cost besides the forward pass (HTTP, scheduling, sampling,
    detokenising). A plain T(k)/T(1) would dilute the pass's growth with that constant; subtracting
    T(1) removes it, and dividing by the decode step (measured in a stream, where that fixed cost
    is absent) expresses the extra work of k tokens in units of one decode step.
    """
    t1 = df.loc[df["k"] == df["k"].min(), "seconds"].median()
    out = df.copy()
    out["ratio"] = 1.0 + (out["seconds"] - t1) / step_s
    return out


def copy_bandwidth_gb_s(megabytes: int = 256, repeats: int = 5) -> float:
    """Achievable memory bandwidth of this CPU, from a plain array copy (reads + writes).

    One thread, like the model's decode on our 2-core machines; a copy moves 2x the array size.
    """
    src = np.ones(megabytes * (1 << 20) // 8)
    dst = np.empty_like(src)
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        np.copyto(dst, src)
        times.append(time.perf_counter() - started)
    return 2 * src.nbytes / statistics.median(times) / 1e9


def decode_share(ttft_s: float, itl_s: float, output_tokens: int) -> float:
    """Share of a request's end-to-end time spent decoding: the part speculation can shrink."""
    decode = max(output_tokens - 1, 0) * itl_s
    return decode / (ttft_s + decode)


def best_case_speedup(share: float, decode_speedup: float) -> float:
    """Amdahl's law: the end-to-end gain if decode runs ``decode_speedup`` times faster."""
    return 1.0 / ((1.0 - share) + share / decode_speedup)


def served_dtype(log_text: str) -> str:
    """The dtype vLLM chose for the weights (``auto`` resolves per platform), from its log."""
    import re

    match = re.search(r"dtype=torch\.(\w+)", log_text)
    if not match:
        raise ValueError("The server log names no dtype (expected 'dtype=torch.<name>' in the engine config line).")
    return match.group(1)
