"""Turn tidy per-request rows (from ``measure.measure_prompts``) into the tables the notebooks show.

Pooled acceptance (sum of accepted / sum of proposed, vLLM's own definition over many requests)
is the headline, and its confidence interval bootstraps that same pooled ratio over requests (one
estimator for the number, its interval and its bar), since prompts differ far more from each other
than repeats of one prompt do. Speedups are paired: the same prompt, repeat and temperature on the
baseline and the speculative server, measured in the same run.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import pandas as pd

from specdec_helpers.costmodel import theory
from specdec_helpers.stats import bootstrap_ci, bootstrap_ratio_ci


def add_time_per_token(results: pd.DataFrame) -> pd.DataFrame:
    """Seconds per generated token, end to end: comparable even when sampled answers differ in length."""
    out = results.copy()
    out["s_per_token"] = out["e2e_s"] / out["completion_tokens"].clip(lower=1)
    return out


def pooled_acceptance(rows: pd.DataFrame) -> dict[str, float]:
    """vLLM's two summary numbers over many requests: accepted / proposed, and 1 + accepted / drafts."""
    drafts, proposed, accepted = rows["drafts"].sum(), rows["draft_tokens"].sum(), rows["accepted_tokens"].sum()
    return {"acceptance_rate": accepted / proposed if proposed else float("nan"),
            "mean_acceptance_length": 1 + accepted / drafts if drafts else float("nan")}


def pooled_acceptance_ci(rows: pd.DataFrame, seed: int = 0) -> tuple[float, float, float]:
    """Pooled acceptance rate with a 95% bootstrap interval over requests: ``(point, low, high)``.

    The point is exactly :func:`pooled_acceptance`'s rate; the interval resamples requests and
    recomputes the same pooled ratio, so a figure that draws the point with this interval shows
    one estimator, not a pooled title over per-request error bars.
    """
    return bootstrap_ratio_ci(rows["accepted_tokens"], rows["draft_tokens"], seed=seed)


def alpha_per_token(mean_acceptance_length: float, k: int) -> float:
    """The cost model's per-token alpha from vLLM's mean acceptance length (NaN when unknown).

    vLLM's acceptance *rate* (accepted / proposed) is not the alpha of E = (1 - alpha^(k+1)) /
    (1 - alpha): a rate of 0.19 with mean acceptance length 1.74 at k = 4 means alpha = 0.43,
    because later positions are reached only when every earlier one was accepted. This inverts E.
    """
    if not np.isfinite(mean_acceptance_length) or k < 1:
        return float("nan")
    return theory.alpha_from_mean_acceptance_length(min(max(float(mean_acceptance_length), 1.0), k + 1.0), int(k))


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
        pooled = pooled_acceptance(cell)
        _, acc_lo, acc_hi = pooled_acceptance_ci(cell, seed=seed)
        k = int(cell["num_speculative_tokens"].max()) if "num_speculative_tokens" in cell else 0
        row = dict(zip(["server", *by], key))
        row.update(n=len(cell), **pooled, acceptance_ci_low=acc_lo, acceptance_ci_high=acc_hi,
                   alpha_per_token=alpha_per_token(pooled["mean_acceptance_length"], k),
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


def greedy_agreement(results: pd.DataFrame, baseline: str = "baseline") -> pd.DataFrame:
    """At temperature 0, is each speculative answer the baseline's, character for character?

    Why: speculative decoding is lossless in exact arithmetic, but the verify pass scores k + 1
    positions in one batched matrix product while the baseline scores one position at a time, so
    floating-point rounding differs; where the target's top two tokens are nearly tied, the
    argmax can flip and the answers part from there. One row per paired greedy request with
    ``identical`` and ``first_difference`` (the character index where they part, or -1).
    """
    greedy = results[results["temperature"] == 0]
    keys = ["prompt_id", "repeat", "temperature"]
    base = greedy[greedy["server"] == baseline][keys + ["text"]].rename(columns={"text": "baseline_text"})
    other = greedy[greedy["server"] != baseline]
    joined = other.merge(base, on=keys, how="inner")
    rows = []
    for _, r in joined.iterrows():
        a, b = str(r["baseline_text"]), str(r["text"])
        first = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), -1 if a == b else min(len(a), len(b)))
        rows.append({"server": r["server"], "prompt_id": r["prompt_id"], "class": r.get("class"),
                     "repeat": r["repeat"], "identical": a == b, "first_difference": first})
    return pd.DataFrame(rows, columns=["server", "prompt_id", "class", "repeat", "identical", "first_difference"])


def speedup_reading(point: float, low: float, high: float) -> str:
    """How a speedup and its 95% interval read: the words a generated sentence uses.

    "faster" only when the whole interval is above 1, "slower" only when it is all below 1;
    otherwise the run cannot tell the difference from noise, and the sentence must say so.
    """
    if not np.isfinite(point):
        return "not measured"
    if not (np.isfinite(low) and np.isfinite(high)):
        return "faster (one prompt, no interval)" if point > 1 else "slower (one prompt, no interval)"
    if low > 1.0:
        return "faster"
    if high < 1.0:
        return "slower"
    return "not distinguishable from 1x"
