"""Read vLLM's speculative-decoding counters from the server's Prometheus ``/metrics`` page.

vLLM exports four counters (global to the engine, since it started):

* ``vllm:spec_decode_num_drafts_total``: speculation steps (one per request per step);
* ``vllm:spec_decode_num_draft_tokens_total``: tokens the draft proposed;
* ``vllm:spec_decode_num_accepted_tokens_total``: proposed tokens the target accepted;
* ``vllm:spec_decode_num_accepted_tokens_per_pos_total{position="i"}``: accepted at draft position i.

Counters are cumulative, so we read them before and after a request and subtract. With no other
traffic on that server the difference belongs to that request. The parsing is
prometheus_client's own, not ours.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import requests
from prometheus_client.parser import text_string_to_metric_families

_PREFIX = "vllm:spec_decode_num_"


@dataclass(frozen=True)
class SpecCounters:
    """A snapshot (or a difference) of vLLM's speculative-decoding counters."""

    drafts: float = 0.0
    draft_tokens: float = 0.0
    accepted_tokens: float = 0.0
    accepted_per_position: tuple[float, ...] = field(default_factory=tuple)

    def __sub__(self, earlier: "SpecCounters") -> "SpecCounters":
        width = max(len(self.accepted_per_position), len(earlier.accepted_per_position))
        mine = list(self.accepted_per_position) + [0.0] * (width - len(self.accepted_per_position))
        theirs = list(earlier.accepted_per_position) + [0.0] * (width - len(earlier.accepted_per_position))
        return SpecCounters(
            drafts=self.drafts - earlier.drafts,
            draft_tokens=self.draft_tokens - earlier.draft_tokens,
            accepted_tokens=self.accepted_tokens - earlier.accepted_tokens,
            accepted_per_position=tuple(a - b for a, b in zip(mine, theirs)),
        )

    # vLLM's own definitions (vllm/v1/spec_decode/metrics.py)
    @property
    def acceptance_rate(self) -> float:
        """Accepted / proposed draft tokens (NaN when nothing was proposed)."""
        return self.accepted_tokens / self.draft_tokens if self.draft_tokens else float("nan")

    @property
    def mean_acceptance_length(self) -> float:
        """Tokens produced per target pass: 1 (the target's own token) + accepted per draft."""
        return 1.0 + self.accepted_tokens / self.drafts if self.drafts else float("nan")

    @property
    def per_position_rate(self) -> tuple[float, ...]:
        """Share of drafts whose token at position i was accepted (falls with i)."""
        if not self.drafts:
            return tuple(float("nan") for _ in self.accepted_per_position)
        return tuple(count / self.drafts for count in self.accepted_per_position)

    def as_dict(self) -> dict[str, float]:
        row = {
            "drafts": self.drafts,
            "draft_tokens": self.draft_tokens,
            "accepted_tokens": self.accepted_tokens,
            "acceptance_rate": self.acceptance_rate,
            "mean_acceptance_length": self.mean_acceptance_length,
        }
        for i, rate in enumerate(self.per_position_rate):
            row[f"accept_pos{i}"] = rate
        return row


def parse_spec_counters(text: str) -> SpecCounters:
    """Sum the speculative-decoding counters over all engines and models in a /metrics page."""
    totals = {"drafts": 0.0, "draft_tokens": 0.0, "accepted_tokens": 0.0}
    per_pos: dict[int, float] = {}
    for family in text_string_to_metric_families(text):
        if not family.name.startswith(_PREFIX):
            continue
        for sample in family.samples:
            if not sample.name.endswith("_total"):  # skip *_created timestamps
                continue
            key = sample.name[len(_PREFIX):-len("_total")]
            if key == "accepted_tokens_per_pos":
                position = int(sample.labels["position"])
                per_pos[position] = per_pos.get(position, 0.0) + sample.value
            elif key in totals:
                totals[key] += sample.value
    width = max(per_pos) + 1 if per_pos else 0
    return SpecCounters(accepted_per_position=tuple(per_pos.get(i, 0.0) for i in range(width)), **totals)


def read_spec_counters(base_url: str, timeout_s: float = 10.0) -> SpecCounters:
    """Fetch ``{base_url}/metrics`` and parse it; a baseline server reports all zeros."""
    response = requests.get(f"{base_url.rstrip('/')}/metrics", timeout=timeout_s)
    response.raise_for_status()
    return parse_spec_counters(response.text)
