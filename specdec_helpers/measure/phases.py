"""Measure prefill, decode and the verify cost v(n) of a pass over n new positions (checking k drafts: n = k + 1),
with token ids."""

from __future__ import annotations

import re
import statistics
import time
import timeit
from typing import Sequence

import numpy as np
import pandas as pd

from specdec_helpers import stats
from specdec_helpers.engine.install import KV_BLOCK_TOKENS
from specdec_helpers.engine.serving import VLLMServer
from specdec_helpers.measure import metrics

_TOKEN_RANGE = (1000, 30000)  # ordinary vocabulary ids of Llama-style tokenizers (no special tokens)
ITL_PROMPT_TOKENS = 64  # prompt length of itl_by_position's requests
VERIFY_BASE_TOKENS = 256  # the cached prefix verify_cost's passes run on (a whole number of blocks)
#: Rounds of verify_cost: one pass varies by 7-30% (IQR / median) on a 2-core machine, so a median needs ~10.
VERIFY_REPEATS = 11
DECODE_STEP_TOKENS = 6  # answer length that times the decode step in each round: 5 steps time it to a few %


def random_token_prompt(n_tokens: int, seed: int) -> list[int]:
    """Exactly ``n_tokens`` ids; a new seed gives a prompt the prefix cache has not seen."""
    return np.random.default_rng(seed).integers(*_TOKEN_RANGE, size=n_tokens).tolist()


def time_completion(server: VLLMServer, prompt_ids: list[int], max_tokens: int = 1) -> float:
    """Seconds for one non-streamed completion (``max_tokens=1``: prefill plus one sample)."""
    client = server.client()
    started = time.perf_counter()
    client.completions.create(model=server.served_model_name, prompt=prompt_ids, max_tokens=max_tokens,
                              temperature=0.0, extra_body={"ignore_eos": True})
    return time.perf_counter() - started


def ttft_by_prompt_length(server: VLLMServer, lengths: Sequence[int], repeats: int = 3, seed: int = 0) -> pd.DataFrame:
    """Time to first token for fresh prompts of each length, interleaved across repeats."""
    rows = [{"prompt_tokens": length, "repeat": repeat,
             "ttft_s": time_completion(server, random_token_prompt(length, seed=seed + 1000 * repeat + length))}
            for repeat in range(repeats) for length in lengths]
    return pd.DataFrame(rows)


def token_arrivals(client, server: VLLMServer, prompt_ids: list[int], max_tokens: int) -> list[float]:
    """When each token of a streamed greedy completion arrived (``ignore_eos``: exactly ``max_tokens`` of them)."""
    stream = client.completions.create(model=server.served_model_name, prompt=prompt_ids, max_tokens=max_tokens,
                                       temperature=0.0, stream=True, extra_body={"ignore_eos": True})
    return [time.perf_counter() for chunk in stream if chunk.choices and chunk.choices[0].text]


def itl_by_position(server: VLLMServer, output_tokens: int, repeats: int = 3,
                    prompt_tokens: int = ITL_PROMPT_TOKENS, seed: int = 0) -> pd.DataFrame:
    """Gap before each output token of a streamed answer (baseline server: one token per chunk)."""
    client, rows = server.client(), []
    for repeat in range(repeats):
        arrivals = token_arrivals(client, server, random_token_prompt(prompt_tokens, seed=seed + repeat), output_tokens)
        rows += [{"position": i, "repeat": repeat, "itl_s": b - a}
                 for i, (a, b) in enumerate(zip(arrivals, arrivals[1:]), start=1)]
    return pd.DataFrame(rows)


def engine_timed_completion(server: VLLMServer, prompt_ids: list[int], max_tokens: int = 1) -> dict[str, float]:
    """One completion timed by the engine's histograms (``prefill_s``, ``decode_s``; no other traffic) and by the
    client (``wall_s``), :func:`metrics.around_request`."""
    wall, before, after = metrics.around_request(
        server.base_url, lambda: time_completion(server, prompt_ids, max_tokens=max_tokens))
    if (finished := after.prefill[1] - before.prefill[1]) != 1:
        raise RuntimeError(f"expected one finished request in {metrics.PREFILL_TIME}, saw {finished:g}: "
                           "is another client using this server?")
    return {"prefill_s": after.prefill[0] - before.prefill[0], "decode_s": after.decode[0] - before.decode[0],
            "wall_s": wall}


def verify_cost(server: VLLMServer, ns: Sequence[int] = (1, 2, 3, 4, 5, 6, 8),
                base_tokens: int = VERIFY_BASE_TOKENS, repeats: int = VERIFY_REPEATS, seed: int = 7) -> pd.DataFrame:
    """Passes over n new tokens on a cached prefix (a verify pass's shape; n = 1 always) and decode steps, in rounds
    of every n (a slow moment hits all alike). Columns: n, repeat, engine_s, seconds (client's), decode_step_s."""
    block = KV_BLOCK_TOKENS[server.install.platform]
    if base_tokens % block:
        raise ValueError(f"base_tokens must be a multiple of {block} (a KV block here) so the whole prefix is cached")
    if repeats < 3:
        raise ValueError(f"repeats must be at least 3 for a median and an interval, got {repeats}")
    ns = sorted({1, *(int(n) for n in ns)})
    base = random_token_prompt(base_tokens, seed=seed)
    time_completion(server, base)  # fills the prefix cache
    engine_timed_completion(server, base + random_token_prompt(max(ns), seed=seed - 1))  # warms the largest shape
    rows = []
    for repeat in range(repeats):
        # on the cached prefix too, so the step reads the same context as the passes
        timed = engine_timed_completion(server, base + random_token_prompt(1, seed=seed + 100 * repeat + 50),
                                        max_tokens=DECODE_STEP_TOKENS)
        step = timed["decode_s"] / (DECODE_STEP_TOKENS - 1)
        for n in ns:
            timed = engine_timed_completion(server, base + random_token_prompt(n, seed=seed + 100 * repeat + n + 1))
            rows.append({"n": n, "repeat": repeat, "engine_s": timed["prefill_s"], "seconds": timed["wall_s"],
                         "decode_step_s": step})
    return pd.DataFrame(rows)


def _v_of_rounds(passes: np.ndarray, ones: np.ndarray, steps: np.ndarray, axis: int = -1) -> np.ndarray:
    """1 + (median pass - median 1-position pass) / median decode step, over the rounds on ``axis``."""
    return 1.0 + (np.median(passes, axis=axis) - np.median(ones, axis=axis)) / np.median(steps, axis=axis)


def add_verify_ratio(df: pd.DataFrame) -> pd.DataFrame:
    """``ratio`` = 1 + (engine time of this pass - median 1-position pass) / median decode step (subtracting the
    1-position pass cancels a new request's scheduling and prefix lookup)."""
    one = df.loc[df["n"] == 1, "engine_s"].median()
    step = df["decode_step_s"].median()
    if not (one > 0 and step > 0):
        raise ValueError("the verify table needs timed 1-position passes and decode steps")
    return df.assign(ratio=1.0 + (df["engine_s"] - one) / step)


def summarize_verify_cost(df: pd.DataFrame, confidence: float = 0.95, n_resamples: int = 2000,
                          seed: int = 0) -> pd.DataFrame:
    """Per n: v over all rounds, single passes' quartiles and a BCa interval over whole rounds (so the decode step's
    uncertainty is in it). v <= 0 is a broken run."""
    wide = df.pivot(index="repeat", columns="n", values="engine_s").sort_index(axis=1)
    steps = df.groupby("repeat")["decode_step_s"].first().reindex(wide.index).to_numpy(dtype=float)
    passes = wide.to_numpy(dtype=float)
    if wide.columns[0] != 1 or np.isnan(passes).any() or np.isnan(steps).any() or len(wide) < 3:
        raise ValueError("summarize_verify_cost needs at least 3 complete rounds with a 1-position pass and a "
                         "decode step each (phases.verify_cost)")
    point = _v_of_rounds(passes.T, passes[:, 0], steps)
    # BCa over whole rounds, paired: a round's passes and decode step stay together (the step's noise is in it)
    bounds = [(1.0, 1.0) if j == 0 else stats.bca_interval((passes[:, j], passes[:, 0], steps), _v_of_rounds,
                                                           n_resamples, confidence, seed)
              for j in range(passes.shape[1])]
    low, high = np.array(bounds, dtype=float).T
    if (point <= 0).any() or (low <= 0).any():
        raise ValueError(f"measured a pass cheaper than nothing (v = {np.round(point, 3).tolist()}, 95% interval "
                         f"from {np.round(low, 3).tolist()}): the machine was too busy while v(n) was timed. "
                         "Close other programs and rerun the cell.")
    ratios = add_verify_ratio(df).groupby("n")["ratio"]
    return pd.DataFrame({"v": point, "q25": ratios.quantile(0.25).to_numpy(), "q75": ratios.quantile(0.75).to_numpy(),
                         "ci_low": np.minimum(low, point), "ci_high": np.maximum(high, point),
                         "rounds": len(wide)}, index=pd.Index([int(n) for n in wide.columns], name="n"))


def copy_bandwidth_gb_s(megabytes: int = 256, repeats: int = 5, threads: int | None = None) -> float:
    """This CPU's memory bandwidth from an array copy over ``threads`` threads (default: one per usable core, as a
    decode step uses every core); numpy releases the GIL while it copies."""
    from concurrent.futures import ThreadPoolExecutor

    from specdec_helpers.engine.cpu import usable_core_ids

    threads = threads or len(usable_core_ids())
    src = np.ones(megabytes * (1 << 20) // 8)
    dst = np.empty_like(src)
    bounds = np.linspace(0, src.size, threads + 1).astype(int)
    slices = [slice(a, b) for a, b in zip(bounds[:-1], bounds[1:])]
    with ThreadPoolExecutor(threads) as pool:
        def copy() -> None:
            list(pool.map(lambda part: np.copyto(dst[part], src[part]), slices))

        copy()  # the threads start and the pages are touched before timing
        times = timeit.repeat(copy, repeat=repeats, number=1)  # perf_counter, per copy
    return 2 * src.nbytes / statistics.median(times) / 1e9  # a copy reads and writes the array


def served_dtype(log_text: str) -> str:
    """The dtype vLLM chose for the weights (``auto`` resolves per platform), from its log."""
    match = re.search(r"dtype=torch\.(\w+)", log_text)
    if not match:
        raise ValueError("The server log names no dtype (expected 'dtype=torch.<name>' in the engine config line).")
    return match.group(1)
