"""Concurrent load against one server: does speculation still pay when the hardware is busy?

Speculation spends spare compute: while one sequence decodes, the hardware waits on memory, and
the verify pass fills that idle time with extra tokens. With many sequences in flight, the batch
already fills it; the verify pass then costs real time and the draft's steps are pure overhead.
This module sends N concurrent streams (asyncio + the openai client), bounded in request count
and in time, and reports aggregate throughput and per-request latency.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Sequence

from .metrics import read_spec_counters
from .serving import VLLMServer


async def _one_request(client, model: str, messages, max_tokens: int, temperature: float) -> tuple[float, int]:
    started = time.perf_counter()
    response = await client.chat.completions.create(model=model, messages=list(messages), max_tokens=max_tokens,
                                                    temperature=temperature)
    return time.perf_counter() - started, response.usage.completion_tokens


async def _drive(server: VLLMServer, prompts: Sequence, concurrency: int, total_requests: int,
                 max_tokens: int, temperature: float, timeout_s: float) -> tuple[float, list[tuple[float, int]]]:
    from openai import AsyncOpenAI

    client = AsyncOpenAI(base_url=f"{server.base_url}/v1", api_key="not-needed", timeout=timeout_s, max_retries=0)
    queue: asyncio.Queue = asyncio.Queue()
    for i in range(total_requests):
        queue.put_nowait(prompts[i % len(prompts)])
    done: list[tuple[float, int]] = []

    async def worker() -> None:
        while not queue.empty():
            prompt = queue.get_nowait()
            done.append(await _one_request(client, server.served_model_name, prompt.messages, max_tokens, temperature))

    started = time.perf_counter()
    try:
        await asyncio.wait_for(asyncio.gather(*(worker() for _ in range(concurrency))), timeout=timeout_s)
    finally:
        await client.close()
    return time.perf_counter() - started, done


def run_concurrent(server: VLLMServer, prompts: Sequence, concurrency: int, requests_per_stream: int = 2,
                   max_tokens: int = 64, temperature: float = 0.0, timeout_s: float = 600.0) -> dict:
    """``concurrency`` streams, each sending ``requests_per_stream`` requests back to back.

    Runs the asyncio loop in a worker thread, so it works inside Jupyter (whose own loop is busy).
    Raises ``TimeoutError`` if the whole level takes longer than ``timeout_s``.
    """
    total = concurrency * requests_per_stream
    before = read_spec_counters(server.base_url)
    with ThreadPoolExecutor(max_workers=1) as pool:
        wall_s, done = pool.submit(asyncio.run, _drive(server, prompts, concurrency, total, max_tokens,
                                                       temperature, timeout_s)).result()
    counters = read_spec_counters(server.base_url) - before
    latencies = [lat for lat, _ in done]
    tokens = sum(n for _, n in done)
    return {
        "server": server.name,
        "concurrency": concurrency,
        "requests": len(done),
        "wall_s": wall_s,
        "completion_tokens": tokens,
        "throughput_tokens_per_s": tokens / wall_s,
        "latency_median_s": statistics.median(latencies),
        "latency_p90_s": sorted(latencies)[max(int(0.9 * len(latencies)) - 1, 0)],
        "s_per_token_per_request": statistics.median(lat / max(n, 1) for lat, n in done),
        "acceptance_rate": counters.acceptance_rate,
    }
