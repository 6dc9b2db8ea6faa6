"""vLLM's speculative-decoding counters and per-request timings, from the server's ``/metrics`` page: cumulative
since the engine started, so a request's share is the difference of two reads around it (no other traffic)."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable

import requests
from prometheus_client.parser import text_string_to_metric_families

from specdec_helpers.costmodel.acceptance import SpecCounters

_PREFIX = "vllm:spec_decode_num_"


def parse_spec_counters(text: str) -> SpecCounters:
    """Sum the speculative-decoding counters over all engines and models in a /metrics page."""
    totals = {"drafts": 0.0, "draft_tokens": 0.0, "accepted_tokens": 0.0}
    per_pos: dict[int, float] = {}
    families = [f for f in text_string_to_metric_families(text) if f.name.startswith(_PREFIX)]
    for sample in (s for f in families for s in f.samples if s.name.endswith("_total")):  # not *_created
        key = sample.name[len(_PREFIX):-len("_total")]
        if key == "accepted_tokens_per_pos":
            position = int(sample.labels["position"])
            per_pos[position] = per_pos.get(position, 0.0) + sample.value
        elif key in totals:
            totals[key] += sample.value
    per_position = tuple(per_pos.get(i, 0.0) for i in range(max(per_pos, default=-1) + 1))
    return SpecCounters(accepted_per_position=per_position, **totals)


def _metrics_page(base_url: str) -> str:
    response = requests.get(f"{base_url.rstrip('/')}/metrics", timeout=10.0)
    response.raise_for_status()
    return response.text


def read_spec_counters(base_url: str) -> SpecCounters:
    """The counters of ``{base_url}/metrics``; a baseline server reports all zeros."""
    return parse_spec_counters(_metrics_page(base_url))


# The engine's own timings (vllm/v1/metrics/stats.py): without the HTTP and process hops a client times.
PREFILL_TIME = "vllm:request_prefill_time_seconds"  # first token - first scheduled
DECODE_TIME = "vllm:request_decode_time_seconds"  # last token - first token


def parse_histogram_totals(text: str, name: str) -> tuple[float, float]:
    """``(sum, count)`` of histogram ``name`` over its label sets: ``_sum`` is exact, buckets only bound a value."""
    families = [f for f in text_string_to_metric_families(text) if f.name == name]
    if not families:
        raise ValueError(f"the /metrics page has no histogram {name!r} (is this a vLLM v1 server?)")
    samples = [s for f in families for s in f.samples]
    return tuple(sum((s.value for s in samples if s.name == f"{name}{end}"), 0.0) for end in ("_sum", "_count"))


@dataclass(frozen=True)
class EngineSnapshot:
    """One read of ``/metrics``: the speculative counters and the engine's request timing histograms (sum, count)."""

    counters: SpecCounters
    prefill: tuple[float, float]
    decode: tuple[float, float]


def read_snapshot(base_url: str) -> EngineSnapshot:
    text = _metrics_page(base_url)
    return EngineSnapshot(parse_spec_counters(text), parse_histogram_totals(text, PREFILL_TIME),
                          parse_histogram_totals(text, DECODE_TIME))


def around_request(base_url: str, send: Callable[[], Any],
                   settle_s: float = 2.0) -> tuple[Any, EngineSnapshot, EngineSnapshot]:
    """``send()`` between two reads of ``/metrics``, the second once the engine has recorded a finished request
    (vLLM 0.32 records a request's times, the decode time last, as it answers; waiting up to ``settle_s`` guards a
    late record). The differences are the request's own when no other client used the server meanwhile."""
    before = read_snapshot(base_url)
    result = send()
    deadline = time.monotonic() + settle_s
    while (after := read_snapshot(base_url)).decode[1] <= before.decode[1] and time.monotonic() < deadline:
        time.sleep(0.02)
    return result, before, after
