"""Concurrent load against one server: does speculation still pay when the hardware is busy?

Speculation spends spare compute: while one sequence decodes, the hardware waits on memory, and
the verify pass fills that idle time with extra tokens. With many sequences in flight, the batch
already fills it; the verify pass then costs real time and the draft's steps are pure overhead.
This module sends N concurrent streams (asyncio + the openai client), bounded in request count
and in time, and reports aggregate throughput and per-request latency; it times one decode step
of n sequences together (the cost model's ``t(n)``); and it names the crossover, the concurrency
at which speculation stops paying, in words that stay true when there is none.
"""

from __future__ import annotations

import asyncio
import statistics
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterable, Mapping, Sequence

from specdec_helpers.measure.metrics import read_spec_counters
from specdec_helpers.engine.serving import VLLMServer
from specdec_helpers.stats import nearest_rank_percentile

if TYPE_CHECKING:
    import pandas as pd


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
        "latency_p90_s": nearest_rank_percentile(latencies, 90),
        "s_per_token_per_request": statistics.median(lat / max(n, 1) for lat, n in done),
        "acceptance_rate": counters.acceptance_rate,
        "drafts": counters.drafts,
        "draft_tokens": counters.draft_tokens,
        "accepted_tokens": counters.accepted_tokens,
    }


# ----------------------------------------------------------------------------- t(n): one step, n sequences
def _stream_arrivals(server: VLLMServer, prompt_ids: list[int], max_tokens: int,
                     start: threading.Barrier) -> list[float]:
    """Arrival time of every text chunk of one streamed completion (one token per chunk on a
    server without speculation)."""
    client = server.client()  # one client per stream: a shared one would queue on its connection pool
    start.wait()
    stream = client.completions.create(model=server.served_model_name, prompt=prompt_ids, max_tokens=max_tokens,
                                       temperature=0.0, stream=True, extra_body={"ignore_eos": True})
    arrivals = []
    for chunk in stream:
        if chunk.choices and chunk.choices[0].text:
            arrivals.append(time.perf_counter())
    return arrivals


def steady_state_gaps(arrivals: Sequence[Sequence[float]]) -> list[float]:
    """Gaps between consecutive tokens while *every* stream was decoding.

    The window runs from the last stream's first token (before it, some steps also prefill a
    late prompt) to the first stream's last token (after it, fewer sequences share a step). Only
    gaps lying wholly inside it count, so each is one step of exactly n sequences.
    """
    streams = [list(a) for a in arrivals if len(a) >= 2]
    if len(streams) != len(arrivals) or not streams:
        return []
    begin = max(a[0] for a in streams)
    end = min(a[-1] for a in streams)
    return [b - a for s in streams for a, b in zip(s, s[1:]) if a >= begin and b <= end]


def decode_step_times(server: VLLMServer, batch_sizes: Iterable[int], output_tokens: int = 24,
                      prompt_tokens: int = 32, seed: int = 0) -> "pd.DataFrame":
    """Time of one decode step when ``n`` sequences decode together, for each ``n``: the ``t(n)``
    of :func:`specdec_helpers.theory.concurrency_speedup`.

    ``n`` streams start at once (random token prompts, ``ignore_eos`` so all write
    ``output_tokens`` tokens); the step time is the median gap between tokens while all ``n``
    were decoding (:func:`steady_state_gaps`). Use it on a server without speculation. The cost
    model also needs the step that verifies ``k`` drafts for each of ``b`` sequences; it assumes
    that costs what a decode step of ``b * (k + 1)`` sequences costs, so one measurement kind
    gives every point of the curve, measured like with like.
    """
    import pandas as pd

    from specdec_helpers.measure.phases import random_token_prompt

    rows = []
    for n in sorted({int(b) for b in batch_sizes}):
        if n < 1:
            raise ValueError(f"batch sizes must be >= 1, got {n}")
        start = threading.Barrier(n)
        prompts = [random_token_prompt(prompt_tokens, seed=seed + 1000 * n + i) for i in range(n)]
        with ThreadPoolExecutor(max_workers=n) as pool:
            arrivals = list(pool.map(lambda p: _stream_arrivals(server, p, output_tokens, start), prompts))
        gaps = steady_state_gaps(arrivals)
        if len(gaps) < 3:
            raise RuntimeError(
                f"timing {n} sequences together gave only {len(gaps)} token gaps while all were decoding: "
                f"raise output_tokens (now {output_tokens}) so the streams overlap longer")
        rows.append({"sequences": n, "step_s": statistics.median(gaps), "gaps": len(gaps),
                     "output_tokens": output_tokens})
    return pd.DataFrame(rows)


def batch_sizes_for(levels: Iterable[int], k: int, largest: int | None = None) -> list[int]:
    """The sequence counts the cost model needs at these concurrency levels: ``b`` (plain decode)
    and ``b * (k + 1)`` (the verify pass), optionally capped at ``largest`` (beyond it the model
    extrapolates the line through the last two points)."""
    sizes = sorted({n for b in levels for n in (int(b), int(b) * (k + 1))})
    if largest is not None:
        sizes = sorted({min(n, largest) for n in sizes})
    return sizes


# ----------------------------------------------------------------------------- the crossover, in words
@dataclass(frozen=True)
class Crossover:
    """Where speculation stops paying, read from speedups measured at a few concurrency levels.

    ``status`` is one of: ``"stops"`` (paid at the lowest level, lost from ``level`` on),
    ``"never"`` (lost at every level), ``"always"`` (paid at every level), ``"mixed"`` (lost at the
    lowest level but paid at a higher one: noise or too few requests). ``level`` is set only for
    ``"stops"``. "Paid" means a speedup of at least ``threshold`` (1.0: as fast as without).
    """

    status: str
    level: int | None
    last_paying: int | None
    levels: tuple[int, ...]
    threshold: float = 1.0

    def sentence(self, what: str = "Speculation") -> str:
        """A title-sized sentence that is true for this outcome (never names a crossover that isn't)."""
        lo, hi = self.levels[0], self.levels[-1]
        span = f"{lo}-{hi} concurrent streams" if lo != hi else f"{lo} concurrent stream{'s' * (lo != 1)}"
        if self.status == "stops":
            if self.level == self.last_paying + 1:
                return f"{what} stops paying at {self.level} concurrent streams (it paid at {self.last_paying})"
            return (f"{what} stops paying between {self.last_paying} and {self.level} concurrent streams "
                    f"(it paid at {self.last_paying}, not at {self.level})")
        if self.status == "never":
            return f"{what} never paid at any level measured ({span})"
        if self.status == "always":
            return f"{what} still paid at every level measured ({span}): no crossover up to {hi}"
        return (f"{what} lost at {lo} stream{'s' * (lo != 1)} but paid at {self.last_paying}: "
                "no clean crossover (more requests per level would tell)")


def find_crossover(speedups: Mapping[int, float], threshold: float = 1.0) -> Crossover:
    """Classify measured (or predicted) speedups by concurrency level; see :class:`Crossover`."""
    if not speedups:
        raise ValueError("need the speedup at one concurrency level at least")
    levels = tuple(sorted(int(b) for b in speedups))
    value = {int(b): float(v) for b, v in speedups.items()}
    paying = [b for b in levels if value[b] >= threshold]
    if not paying:
        return Crossover("never", None, None, levels, threshold)
    if len(paying) == len(levels):
        return Crossover("always", None, levels[-1], levels, threshold)
    if value[levels[0]] < threshold:
        return Crossover("mixed", None, paying[-1], levels, threshold)
    level = next(b for b in levels if value[b] < threshold)
    last = max(b for b in paying if b < level)
    return Crossover("stops", level, last, levels, threshold)
