"""Concurrent load: does speculation still pay when the batch already fills the compute it spends? N concurrent
streams, the decode step of n sequences together (the cost model's ``t(n)``), and the crossover, in words."""

from __future__ import annotations

import asyncio
import statistics
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Iterable, Sequence

import pandas as pd

from specdec_helpers.engine.serving import VLLMServer
from specdec_helpers.measure.metrics import read_spec_counters
from specdec_helpers.measure.phases import random_token_prompt, token_arrivals
from specdec_helpers.measure.requests import alone_on_cpu
from specdec_helpers.stats import nearest_rank_percentile

LOAD_PROMPTS_PER_CLASS = 8  # structured prompts the load test cycles through (notebook 06)


def run_concurrent(server: VLLMServer, prompts: Sequence, concurrency: int, requests_per_stream: int = 2,
                   max_tokens: int = 64, temperature: float = 0.0, timeout_s: float = 600.0) -> dict:
    """``concurrency`` streams of requests on an asyncio loop in a worker thread (Jupyter's own loop is busy)."""
    from openai import AsyncOpenAI

    async def drive() -> tuple[float, list[tuple[float, int]]]:
        client = AsyncOpenAI(base_url=f"{server.base_url}/v1", api_key="not-needed", timeout=timeout_s, max_retries=0)
        queue: asyncio.Queue = asyncio.Queue()
        for i in range(concurrency * requests_per_stream):
            queue.put_nowait(prompts[i % len(prompts)])
        done: list[tuple[float, int]] = []  # (latency, completion tokens) per request

        async def worker() -> None:
            while not queue.empty():
                prompt = queue.get_nowait()
                started = time.perf_counter()
                response = await client.chat.completions.create(
                    model=server.served_model_name, messages=list(prompt.messages), max_tokens=max_tokens,
                    temperature=temperature)
                done.append((time.perf_counter() - started, response.usage.completion_tokens))

        started = time.perf_counter()
        try:
            await asyncio.wait_for(asyncio.gather(*(worker() for _ in range(concurrency))), timeout=timeout_s)
        finally:
            await client.close()
        return time.perf_counter() - started, done

    before = read_spec_counters(server.base_url)
    with alone_on_cpu(server), ThreadPoolExecutor(max_workers=1) as pool:
        wall_s, done = pool.submit(asyncio.run, drive()).result()
    counters = read_spec_counters(server.base_url) - before
    latencies, tokens = [lat for lat, _ in done], sum(n for _, n in done)
    return {"server": server.name, "concurrency": concurrency, "requests": len(done), "wall_s": wall_s,
            "completion_tokens": tokens, "throughput_tokens_per_s": tokens / wall_s,
            "latency_median_s": statistics.median(latencies), "latency_p90_s": nearest_rank_percentile(latencies, 90),
            "s_per_token_per_request": statistics.median(lat / max(n, 1) for lat, n in done),
            "acceptance_rate": counters.acceptance_rate, "drafts": counters.drafts,
            "draft_tokens": counters.draft_tokens, "accepted_tokens": counters.accepted_tokens}


#: window(arrivals) -> (begin, end): when every stream decodes (the rule notebook 06 defines and explains)
Window = Callable[[Sequence[Sequence[float]]], tuple[float, float]]


def steady_state_gaps(arrivals: Sequence[Sequence[float]], window: Window) -> list[float]:
    """Token gaps lying wholly inside ``window(arrivals)``: each one step of exactly n sequences."""
    streams = [list(a) for a in arrivals if len(a) >= 2]
    if len(streams) != len(arrivals) or not streams:
        return []
    begin, end = window(streams)
    return [b - a for s in streams for a, b in zip(s, s[1:]) if a >= begin and b <= end]


def decode_step_times(server: VLLMServer, batch_sizes: Iterable[int], *, window: Window, output_tokens: int = 24,
                      prompt_tokens: int = 32, seed: int = 0) -> pd.DataFrame:
    """``t(n)`` of notebook 06's ``model_speedup``: median gap of n streams decoding together inside
    ``window``, without speculation."""
    def arrivals_of(prompt_ids: list[int], start: threading.Barrier) -> list[float]:
        client = server.client()  # one client per stream: a shared one would queue on its connection pool
        start.wait()
        return token_arrivals(client, server, prompt_ids, output_tokens)

    rows = []
    for n in sorted({int(b) for b in batch_sizes}):
        if n < 1:
            raise ValueError(f"batch sizes must be >= 1, got {n}")
        start = threading.Barrier(n)
        prompts = [random_token_prompt(prompt_tokens, seed=seed + 1000 * n + i) for i in range(n)]
        with alone_on_cpu(server), ThreadPoolExecutor(max_workers=n) as pool:
            arrivals = list(pool.map(lambda p: arrivals_of(p, start), prompts))
        gaps = steady_state_gaps(arrivals, window)
        if len(gaps) < 3:
            raise RuntimeError(
                f"timing {n} sequences together gave only {len(gaps)} token gaps while all were decoding: "
                f"raise output_tokens (now {output_tokens}) so the streams overlap longer")
        rows.append({"sequences": n, "step_s": statistics.median(gaps), "gaps": len(gaps),
                     "output_tokens": output_tokens})
    return pd.DataFrame(rows)


def batch_sizes_for(levels: Iterable[int], k: int, largest: int | None = None) -> list[int]:
    """``b`` (decode) and ``b * (k + 1)`` (its verify pass), capped at ``largest`` (the model extrapolates beyond)."""
    sizes = sorted({n for b in levels for n in (int(b), int(b) * (k + 1))})
    return sizes if largest is None else sorted({min(n, largest) for n in sizes})
