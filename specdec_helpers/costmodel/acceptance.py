"""Acceptance as vLLM counts it: its speculative-decoding counters, the rates they define, and the same rates
pooled over many requests' rows. The cost model's first input; :mod:`measure.metrics` reads the counters from a
server, this module only says what they mean."""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import zip_longest

import pandas as pd


@dataclass(frozen=True)
class SpecCounters:
    """A snapshot (or difference) of vLLM's counters; rates as vLLM defines them (v1/spec_decode/metrics.py)."""

    drafts: float = 0.0  # speculation steps (one per request per step)
    draft_tokens: float = 0.0  # tokens the draft proposed
    accepted_tokens: float = 0.0  # proposed tokens the target accepted
    accepted_per_position: tuple[float, ...] = field(default_factory=tuple)

    def __sub__(self, earlier: "SpecCounters") -> "SpecCounters":
        per_position = zip_longest(self.accepted_per_position, earlier.accepted_per_position, fillvalue=0.0)
        return SpecCounters(self.drafts - earlier.drafts, self.draft_tokens - earlier.draft_tokens,
                            self.accepted_tokens - earlier.accepted_tokens, tuple(a - b for a, b in per_position))

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
        return tuple(count / self.drafts if self.drafts else float("nan") for count in self.accepted_per_position)

    def as_dict(self) -> dict[str, float]:
        return {"drafts": self.drafts, "draft_tokens": self.draft_tokens, "accepted_tokens": self.accepted_tokens,
                "acceptance_rate": self.acceptance_rate, "mean_acceptance_length": self.mean_acceptance_length,
                **{f"accept_pos{i}": rate for i, rate in enumerate(self.per_position_rate)}}


def pooled_acceptance(rows: pd.DataFrame) -> dict[str, float]:
    """Acceptance rate and mean acceptance length pooled over requests (rows with the counter columns)."""
    pooled = SpecCounters(rows["drafts"].sum(), rows["draft_tokens"].sum(), rows["accepted_tokens"].sum())
    return {"acceptance_rate": pooled.acceptance_rate, "mean_acceptance_length": pooled.mean_acceptance_length}
