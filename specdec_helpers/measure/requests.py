"""Time streamed chat completions and attach vLLM's acceptance and its own timing to each request (the ``/metrics``
deltas around it and its own ``metrics.speculative_decoding``). A chunk can carry several tokens, so the per-token
number is (completion tokens - 1) / (end-to-end - TTFT), with the server's count from ``usage``.
"""

from __future__ import annotations

import contextlib
import itertools
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Iterator, Sequence
from urllib.parse import urlsplit

import numpy as np
import pandas as pd

from specdec_helpers.costmodel.acceptance import SpecCounters
from specdec_helpers.engine.serving import VLLMServer
from specdec_helpers.measure.metrics import around_request
from specdec_helpers.report.display import progress_bar


#: After its last engine step a vLLM worker keeps polling its shared-memory queue for a second before it sleeps (the
#: reader's busy loop in vLLM's shm_broadcast): one core at 100 %. On a small CPU that is a core the next server's
#: prefill needs. Measured on 2 cores (cpu-coder): a request sent to one server right after another's answer took
#: about 1 s to its first token in 8 of 32 alternations, against 0.2 s; with 1.5 s between them, in none. So a
#: measurement on a CPU waits until every other server's worker has gone idle (:func:`alone_on_cpu`: requests, the
#: concurrency runs and the step timings of notebook 06).
WORKER_BUSY_LOOP_S = 1.0
_last_answer: dict[str, float] = {}  # host:port -> time.monotonic() when its last answer ended


@contextlib.contextmanager
def alone_on_cpu(server: VLLMServer) -> Iterator[float]:
    """Around a measurement on ``server``: on a CPU, first sleep until :data:`WORKER_BUSY_LOOP_S` has passed since any
    other server's last answer (its worker then no longer holds a core) and yield the seconds slept; at the end, note
    when this server's own work ended."""
    here = urlsplit(server.base_url).netloc
    others = max((t for url, t in _last_answer.items() if url != here), default=-1e9)
    wait = max(others + WORKER_BUSY_LOOP_S - time.monotonic(), 0.0) if server.on_cpu else 0.0
    if wait:
        time.sleep(wait)
    try:
        yield wait
    finally:
        _last_answer[here] = time.monotonic()


def decode_rate(tokens: int, seconds: float) -> float:
    """Decode speed: the tokens after the first (the first comes from prefill) per second of decoding; NaN for one
    token or no time. Every tokens/s of the series, client's, engine's or the live demo's, is this."""
    return (tokens - 1) / seconds if tokens >= 2 and seconds > 0 else float("nan")


@dataclass
class StreamResult:
    """One streamed completion, timed on the client."""

    text: str
    ttft_s: float
    e2e_s: float
    prompt_tokens: int
    completion_tokens: int
    finish_reason: str | None
    spec_metrics: dict | None = None  # the response's metrics.speculative_decoding (speculative servers)
    #: one (seconds since the previous token chunk, tokens it carried) per engine step after the first token: vLLM
    #: streams each step's new tokens as one chunk, so a 1-token chunk is a step that accepted no draft
    steps: list[tuple[float, int]] = field(default_factory=list)

    @property
    def decode_s(self) -> float:
        return self.e2e_s - self.ttft_s

    @property
    def decode_tokens_per_s(self) -> float:
        return decode_rate(self.completion_tokens, self.decode_s)

    @property
    def mean_itl_s(self) -> float:  # decode time spread over the tokens after the first
        return self.decode_s / (self.completion_tokens - 1) if self.completion_tokens >= 2 else float("nan")


def stream_chat(client, model: str, messages: Sequence[dict], *, max_tokens: int, temperature: float = 0.0,
                seed: int | None = None, extra_body: dict | None = None,
                on_chunk: Callable[[str, int | None, float], None] | None = None) -> StreamResult:
    """One streamed chat completion, timed on the client; vLLM's running token count on every chunk times each engine
    step (``StreamResult.steps``). ``on_chunk(text, completion_tokens or None, time)`` sees each chunk as it arrives
    (the live demo)."""
    started = time.perf_counter()
    stream = client.chat.completions.create(
        model=model, messages=list(messages), max_tokens=max_tokens, temperature=temperature, top_p=1.0, seed=seed,
        stream=True, extra_body=extra_body or {},
        stream_options={"include_usage": True, "continuous_usage_stats": True})
    pieces: list[str] = []
    first = usage = finish_reason = spec_metrics = None
    steps: list[tuple[float, int]] = []
    last_tokens, last_at = 0, None
    for chunk in stream:
        now = time.perf_counter()
        if chunk.usage is not None:
            usage = chunk.usage
            if usage.completion_tokens > last_tokens:  # a step's tokens (every chunk carries the running count)
                if last_at is not None:
                    steps.append((now - last_at, usage.completion_tokens - last_tokens))
                last_tokens, last_at = usage.completion_tokens, now
            # vLLM's own field on the final usage chunk: the client keeps it among the unknown fields
            spec_metrics = ((chunk.model_extra or {}).get("metrics") or {}).get("speculative_decoding")
        piece = "".join(c.delta.content for c in chunk.choices if c.delta and c.delta.content)
        if piece:
            pieces.append(piece)
            first = first or now
        for choice in chunk.choices:
            finish_reason = choice.finish_reason or finish_reason
        if on_chunk is not None and (piece or chunk.usage is not None):
            on_chunk(piece, None if chunk.usage is None else chunk.usage.completion_tokens, now)
    ended = time.perf_counter()
    _last_answer[urlsplit(str(client.base_url)).netloc] = time.monotonic()
    if usage is None:
        raise RuntimeError("The server sent no usage block; vLLM's OpenAI server should (stream_options).")
    return StreamResult(text="".join(pieces), ttft_s=(first or ended) - started, e2e_s=ended - started,
                        prompt_tokens=usage.prompt_tokens, completion_tokens=usage.completion_tokens,
                        finish_reason=finish_reason, spec_metrics=spec_metrics, steps=steps)


@dataclass
class Measurement:
    """A timed request plus the speculative counters it moved (zeros on a baseline server) and the engine's own
    timing of it: prefill (scheduled to first token) and decode (first to last token), without the client's hops."""

    result: StreamResult
    counters: SpecCounters = field(default_factory=SpecCounters)
    sent_at: float = float("nan")  # Unix time the request was sent: the records show which requests ran next to which
    engine_prefill_s: float = float("nan")
    engine_decode_s: float = float("nan")


def measure_request(server: VLLMServer, messages: Sequence[dict], cold: bool = True, **sampling: Any) -> Measurement:
    """Run one request alone on ``server`` and attribute the counter and histogram deltas to it
    (:func:`metrics.around_request`). ``cold``: the prefix cache is emptied first, so the request prefills in full as a
    new user's prompt would, however often the server has seen it (:meth:`VLLMServer.reset_prefix_cache`). It waits
    first, on a CPU, until no other server's worker is still busy after its last answer (:data:`WORKER_BUSY_LOOP_S`)."""
    with alone_on_cpu(server):
        if cold:
            server.reset_prefix_cache()
        (sent_at, result), before, after = around_request(server.base_url, lambda: (
            time.time(), stream_chat(server.client(), server.served_model_name, messages, **sampling)))
    finished = after.decode[1] - before.decode[1]
    engine = ((after.prefill[0] - before.prefill[0], after.decode[0] - before.decode[0]) if finished == 1
              else (float("nan"), float("nan")))  # another client's request in the window: no engine time
    return Measurement(result, after.counters - before.counters, sent_at, *engine)


def step_columns(steps: Sequence[tuple[float, int]]) -> dict[str, Any]:
    """A request's engine steps by what they yielded: the median time of a step that gave one token (no draft, or
    a draft rejected at its first token) and of one that gave more (an accepted draft), with their counts. On a
    lookup's server most one-token steps carry no draft, so their time against the baseline's steps is what the
    server's configuration costs apart from speculation."""
    one = [gap for gap, n in steps if n == 1]
    more = [gap for gap, n in steps if n > 1]
    return {"one_token_steps": len(one), "one_token_step_s": float(np.median(one)) if one else float("nan"),
            "multi_token_steps": len(more), "multi_token_step_s": float(np.median(more)) if more else float("nan")}


def per_request_columns(spec_metrics: dict | None) -> dict[str, Any]:
    """The request's own acceptance as row columns (``pr_``: per request); empty for a baseline request."""
    if not (m := spec_metrics):
        return {}
    histogram = list(m.get("acceptance_histogram") or [])
    drafted, accepted = m["num_draft_tokens"], m["num_accepted_draft_tokens"]
    return {"pr_steps": m["num_spec_steps"], "pr_draft_tokens": drafted, "pr_accepted_tokens": accepted,
            "pr_acceptance_rate": accepted / drafted if drafted else float("nan"),
            "pr_mean_acceptance_length": m["mean_acceptance_length"], "pr_zero_accept_steps": (histogram or [0])[0],
            "pr_histogram": histogram, "pr_per_step_accepted": list(m.get("per_step_accepted") or [])}


def warm_up(server: VLLMServer, n: int = 2, max_tokens: int = 16) -> None:
    """A few throw-away requests: the first requests after start-up are slower on every engine."""
    for _ in range(n):
        stream_chat(server.client(), server.served_model_name,
                    [{"role": "user", "content": "Say hello in five words."}], max_tokens=max_tokens)


def prime(server: VLLMServer, prompts: Sequence, max_tokens: int = 1) -> None:
    """Each measured prompt once, cut to ``max_tokens``, before any is timed: the first requests of a prompt on a
    server can be much slower (on cpu-tiny one took 0.9 s to its first token against 0.07 s after), and that cost
    would land on whichever server of a pair saw the prompt first. The timed requests still prefill in full: each
    empties the prefix cache first (:func:`measure_request`). One token by default: a proposer that learns from
    earlier answers (vLLM's suffix decoding) finds nothing to continue in a one-token answer, so priming teaches it
    nothing about the answers it is then measured on."""
    for prompt in prompts:
        stream_chat(server.client(), server.served_model_name, prompt.messages, max_tokens=max_tokens)


def interleaved_order(servers: Sequence, block: int) -> list:
    """ABBA: block 0 runs the servers in order, block 1 reversed, and so on, so a drift that is linear in time over
    two blocks costs every server the same on average (AB AB would always give B the later, drifted, slot)."""
    return list(servers) if block % 2 == 0 else list(reversed(servers))


def measure_prompts(servers: Iterable[VLLMServer], prompts: Sequence, *, temperature: float = 0.0,
                    repeats: int = 1, seed: int = 0, max_tokens: int | None = None,
                    provenance: dict | None = None, progress: bool = True) -> pd.DataFrame:
    """Every ``Prompt`` on every server, one request at a time: one block per (prompt, repeat) holds that prompt's
    request on each server, in :func:`interleaved_order`. One row per request; ``block`` and ``slot`` (its place in
    the block) and ``sent_at`` let anyone rebuild from the CSV which requests ran next to which."""
    servers, rows = list(servers), []
    with progress_bar(len(prompts) * repeats * len(servers), "requests", enabled=progress) as bar:
        for block, (prompt, repeat) in enumerate(itertools.product(prompts, range(repeats))):
            for slot, server in enumerate(interleaved_order(servers, block)):
                cap = max_tokens or prompt.max_tokens  # the answer cap is part of the setup a row records
                m = measure_request(server, prompt.messages, max_tokens=cap, temperature=temperature,
                                    seed=seed + repeat)
                r, spec = m.result, server.speculative_config or {}
                # provenance first: the row's own configuration (k, method, format) must win over the notebook's
                row = {**(provenance or {}), "server": server.name, "method": spec.get("method", "none"),
                       "num_speculative_tokens": spec.get("num_speculative_tokens", 0),
                       "served_format": server.served_format, "model_runner": server.model_runner,
                       "prompt_id": prompt.id, "class": prompt.cls, "subcategory": prompt.subcategory,
                       "repeat": repeat, "block": block, "slot": slot, "sent_at": m.sent_at, "temperature": temperature,
                       "max_tokens": cap, "ttft_s": r.ttft_s, "e2e_s": r.e2e_s, "decode_s": r.decode_s,
                       "mean_itl_s": r.mean_itl_s, "decode_tokens_per_s": r.decode_tokens_per_s,
                       "engine_prefill_s": m.engine_prefill_s, "engine_decode_s": m.engine_decode_s,
                       "engine_decode_tokens_per_s": decode_rate(r.completion_tokens, m.engine_decode_s),
                       "prompt_tokens": r.prompt_tokens, "completion_tokens": r.completion_tokens,
                       "finish_reason": r.finish_reason, "text": r.text, **step_columns(r.steps)}
                rows.append({**row, **(m.counters.as_dict() if spec else {}), **per_request_columns(r.spec_metrics)})
                bar.update()
    return pd.DataFrame(rows)
