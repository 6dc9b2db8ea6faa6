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

from specdec_helpers.measure import metrics
from specdec_helpers.engine.serving import VLLMServer

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


#: Interleaved rounds of every pass size in :func:`verify_cost`. A pass's own time varies by 7-30%
#: (interquartile range over the median) from one to the next on a 2-core machine (measured with
#: vLLM's engine timing: SmolLM2-135M and Qwen2.5-Coder-1.5B, bf16, on an Intel Xeon with AMX), so
#: a median needs about ten of them; 11 rounds cost seconds (135M) to about a minute (1.5B) per call.
VERIFY_REPEATS = 11


#: Answer length of the request that times the engine's decode step in every round of
#: :func:`verify_cost` (5 steps: the engine's clock needs no more to time a step to a few percent).
DECODE_STEP_TOKENS = 6


def engine_timed_completion(server: VLLMServer, prompt_ids: list[int], max_tokens: int = 1,
                            settle_s: float = 2.0) -> dict[str, float]:
    """One completion, timed by vLLM's engine and by the client: ``prefill_s``, ``decode_s``, ``wall_s``.

    ``prefill_s`` is vLLM's own prefill time of the request (``vllm:request_prefill_time_seconds``:
    from the step that first scheduled it to the step that produced its first token) and
    ``decode_s`` its decode time (first to last token), both from timestamps taken in the engine
    process, read as the difference of the histograms' exact sums around the request. They leave
    out the HTTP, tokenising and inter-process costs that ``wall_s``, the client's timer, also
    contains. The server must have no other traffic, and must not run with ``--disable-log-stats``
    (then vLLM keeps no histograms). In vLLM 0.32 the API server records a finished request's
    stats before it sends the response; the short wait below only guards against a later
    release recording them on another thread.
    """
    names = [metrics.PREFILL_TIME, metrics.DECODE_TIME]
    before = metrics.read_histograms(server.base_url, names)
    wall = time_completion(server, prompt_ids, max_tokens=max_tokens)
    deadline = time.monotonic() + settle_s
    while True:  # the API server records a finished request's stats as it answers; wait if it has not yet
        after = metrics.read_histograms(server.base_url, names)
        if after[metrics.PREFILL_TIME][1] > before[metrics.PREFILL_TIME][1] or time.monotonic() > deadline:
            break
        time.sleep(0.02)
    finished = after[metrics.PREFILL_TIME][1] - before[metrics.PREFILL_TIME][1]
    if finished != 1:
        raise RuntimeError(f"expected one finished request in {metrics.PREFILL_TIME}, saw {finished:g}: "
                           "is another client using this server?")
    return {"prefill_s": after[metrics.PREFILL_TIME][0] - before[metrics.PREFILL_TIME][0],
            "decode_s": after[metrics.DECODE_TIME][0] - before[metrics.DECODE_TIME][0], "wall_s": wall}


def verify_cost(server: VLLMServer, ks: Sequence[int] = (1, 2, 3, 4, 5, 6, 8), base_tokens: int = 256,
                repeats: int = VERIFY_REPEATS, seed: int = 7) -> "pd.DataFrame":
    """Time forward passes over n new token positions on top of a cached prefix, and decode steps.

    The prefix (a whole number of KV blocks) is sent once so vLLM's prefix cache holds it; every
    later request is prefix + n fresh tokens with ``max_tokens=1``, so the engine computes exactly
    n tokens against the cached context: the shape of a verification pass. ``n = 1`` is always
    measured. Repeats are interleaved (every n once, then again), so a slow moment of the machine
    hits all n alike, and every round also times the engine's decode step, the unit v(k) is
    expressed in, with a request of ``DECODE_STEP_TOKENS`` tokens (its decode time over its
    steps). Columns: ``k`` (n, the positions computed), ``repeat``, ``engine_s`` (vLLM's own
    time of the pass, see :func:`engine_timed_completion`), ``seconds`` (the client's wall time,
    which adds a fixed cost per request and its jitter) and ``decode_step_s`` (that round's step).
    """
    import pandas as pd

    if base_tokens % PREFIX_BLOCK:
        raise ValueError(f"base_tokens must be a multiple of {PREFIX_BLOCK} so the whole prefix is cached")
    if repeats < 3:
        raise ValueError(f"repeats must be at least 3 for a median and an interval, got {repeats}")
    ns = sorted({1, *(int(k) for k in ks)})
    base = random_token_prompt(base_tokens, seed=seed)
    time_completion(server, base)  # fills the prefix cache
    engine_timed_completion(server, base + random_token_prompt(max(ns), seed=seed - 1))  # warm-up of the largest shape
    rows = []
    for repeat in range(repeats):
        # on the cached prefix too, so the step reads the same context as the passes
        timed = engine_timed_completion(server, base + random_token_prompt(1, seed=seed + 100 * repeat + 50),
                                        max_tokens=DECODE_STEP_TOKENS)
        step = timed["decode_s"] / (DECODE_STEP_TOKENS - 1)
        for n in ns:
            timed = engine_timed_completion(server, base + random_token_prompt(n, seed=seed + 100 * repeat + n + 1))
            rows.append({"k": n, "repeat": repeat, "engine_s": timed["prefill_s"], "seconds": timed["wall_s"],
                         "decode_step_s": step})
    return pd.DataFrame(rows)


def _v_of_rounds(passes: np.ndarray, steps: np.ndarray) -> np.ndarray:
    """v for every pass size from rounds: 1 + (median pass - median 1-position pass) / median step.

    ``passes`` is (..., rounds, sizes) with the 1-position pass first, ``steps`` (..., rounds).
    """
    medians = np.median(passes, axis=-2)
    return 1.0 + (medians - medians[..., :1]) / np.median(steps, axis=-1)[..., None]


def add_verify_ratio(df: "pd.DataFrame") -> "pd.DataFrame":
    """``ratio`` = 1 + (engine time of this pass - median 1-position pass) / median decode step.

    The pass over n positions here is a new request's first step, and a new request's first
    step carries costs a running request's step does not (the engine schedules the request and
    looks up its prefix): subtracting the median 1-position pass cancels them, and dividing by the
    engine's median decode step expresses the extra work of n positions in decode steps. Medians,
    so the noise of one pass (7-30% on a busy 2-core machine) is not added to every row.
    """
    out = df.copy()
    one = out.loc[out["k"] == 1, "engine_s"].median()
    step = out["decode_step_s"].median()
    if not (one > 0 and step > 0):
        raise ValueError("the verify table needs timed 1-position passes and decode steps")
    out["ratio"] = 1.0 + (out["engine_s"] - one) / step
    return out


def summarize_verify_cost(df: "pd.DataFrame", confidence: float = 0.95, n_resamples: int = 2000,
                          seed: int = 0) -> "pd.DataFrame":
    """Per pass size n: v, the quartiles of single passes, a 95% interval of v, and the rounds.

    ``v`` is ``1 + (median pass over n - median 1-position pass) / median decode step`` over all
    rounds. Its interval is a bootstrap over *rounds*: each resample draws whole rounds (every
    pass size and that round's decode step together) and recomputes all three medians, so the
    uncertainty of the unit (the 1-position pass and the step) is in every interval, and v(1) is
    exactly 1 in every resample. Why an interval at all: the cost model divides by v(k), so a
    reader must see how far it could move on a rerun before trusting a prediction built on it.
    A v at or below 0 (a pass over n positions faster than the 1-position one by more than a
    decode step) is not a cost but a broken measurement, and stops here with what to do.
    """
    import pandas as pd

    wide = df.pivot(index="repeat", columns="k", values="engine_s").sort_index(axis=1)
    steps = df.groupby("repeat")["decode_step_s"].first().reindex(wide.index).to_numpy(dtype=float)
    passes = wide.to_numpy(dtype=float)
    if wide.columns[0] != 1 or np.isnan(passes).any() or np.isnan(steps).any() or len(wide) < 3:
        raise ValueError("summarize_verify_cost needs at least 3 complete rounds with a 1-position pass and a "
                         "decode step each (phases.verify_cost)")
    point = _v_of_rounds(passes, steps)
    rng = np.random.default_rng(seed)
    picks = rng.integers(0, len(wide), size=(n_resamples, len(wide)))
    boot = _v_of_rounds(passes[picks], steps[picks])
    tail = (1.0 - confidence) / 2.0
    low, high = np.quantile(boot, [tail, 1.0 - tail], axis=0)
    if (point <= 0).any() or (low <= 0).any():
        raise ValueError(f"measured a pass cheaper than nothing (v = {np.round(point, 3).tolist()}, 95% interval "
                         f"from {np.round(low, 3).tolist()}): the machine was too busy while v(k) was timed. "
                         "Close other programs and rerun the cell.")
    ratios = add_verify_ratio(df).groupby("k")["ratio"]
    return pd.DataFrame({"v": point, "q25": ratios.quantile(0.25).to_numpy(), "q75": ratios.quantile(0.75).to_numpy(),
                         "ci_low": np.minimum(low, point), "ci_high": np.maximum(high, point),
                         "n": len(wide)}, index=pd.Index([int(n) for n in wide.columns], name="k"))


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
