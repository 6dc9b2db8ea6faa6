"""Turn tidy per-request rows (from ``measure.measure_prompts``) into the tables the notebooks show.

Pooled acceptance (sum of accepted / sum of proposed, vLLM's own definition over many requests)
is the headline; confidence intervals come from bootstrapping requests, since prompts differ far
more from each other than repeats of one prompt do. Speedups are paired: the same prompt, repeat
and temperature on the baseline and the speculative server, measured in the same run.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import pandas as pd

from .stats import bootstrap_ci


def add_time_per_token(results: pd.DataFrame) -> pd.DataFrame:
    """Seconds per generated token, end to end: comparable even when sampled answers differ in length."""
    out = results.copy()
    out["s_per_token"] = out["e2e_s"] / out["completion_tokens"].clip(lower=1)
    return out


def pooled_acceptance(rows: pd.DataFrame) -> dict[str, float]:
    drafts, proposed, accepted = rows["drafts"].sum(), rows["draft_tokens"].sum(), rows["accepted_tokens"].sum()
    return {"acceptance_rate": accepted / proposed if proposed else float("nan"),
            "mean_acceptance_length": 1 + accepted / drafts if drafts else float("nan")}


def per_position(rows: pd.DataFrame) -> list[float]:
    """Pooled share of drafts whose i-th token was accepted, for each position i."""
    cols = sorted((c for c in rows.columns if c.startswith("accept_pos")), key=lambda c: int(c[10:]))
    drafts = rows["drafts"].sum()
    return [float((rows[c] * rows["drafts"]).sum() / drafts) if drafts else float("nan") for c in cols]


def paired(results: pd.DataFrame, value: str, baseline: str = "baseline") -> pd.DataFrame:
    """Rows of every non-baseline server joined with the baseline's row for the same request."""
    keys = ["prompt_id", "repeat", "temperature"]
    base = results[results["server"] == baseline][keys + [value]].rename(columns={value: f"baseline_{value}"})
    other = results[results["server"] != baseline]
    return other.merge(base, on=keys, how="inner")


def cell_summary(results: pd.DataFrame, by: Sequence[str] = ("class", "temperature"),
                 baseline: str = "baseline", seed: int = 0) -> pd.DataFrame:
    """One row per server and cell: acceptance (pooled, with a CI), decode speed, and speedup (with a CI)."""
    results = add_time_per_token(results)
    joined = paired(results, "s_per_token", baseline).merge(
        paired(results, "decode_tokens_per_s", baseline)[["prompt_id", "repeat", "temperature", "server",
                                                          "baseline_decode_tokens_per_s"]],
        on=["prompt_id", "repeat", "temperature", "server"])
    rows = []
    for key, cell in joined.groupby(["server", *by], sort=True):
        key = key if isinstance(key, tuple) else (key,)
        speedup = cell["baseline_s_per_token"] / cell["s_per_token"]
        decode_speedup = cell["decode_tokens_per_s"] / cell["baseline_decode_tokens_per_s"]
        point, lo, hi = bootstrap_ci(speedup, np.median, seed=seed)
        _, acc_lo, acc_hi = bootstrap_ci(cell["acceptance_rate"].dropna(), np.mean, seed=seed)
        row = dict(zip(["server", *by], key))
        row.update(n=len(cell), **pooled_acceptance(cell), acceptance_ci_low=acc_lo, acceptance_ci_high=acc_hi,
                   per_position=per_position(cell),
                   baseline_decode_tokens_per_s=float(cell["baseline_decode_tokens_per_s"].median()),
                   decode_tokens_per_s=float(cell["decode_tokens_per_s"].median()),
                   decode_speedup=float(decode_speedup.median()),
                   speedup=point, speedup_ci_low=lo, speedup_ci_high=hi)
        rows.append(row)
    return pd.DataFrame(rows)


def per_position_long(summary: pd.DataFrame, label_cols: Sequence[str]) -> pd.DataFrame:
    """Long form of the per-position lists, for a line plot (position on x, rate on y)."""
    rows = []
    for _, row in summary.iterrows():
        label = " / ".join(str(row[c]) for c in label_cols)
        for i, rate in enumerate(row["per_position"]):
            rows.append({"cell": label, "position": i + 1, "accepted_share": rate})
    return pd.DataFrame(rows)
