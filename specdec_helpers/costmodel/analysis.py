"""Per-request rows into the notebooks' tables: acceptance pooled (vLLM's definition), speedups paired per request."""

from __future__ import annotations

from typing import Sequence

import pandas as pd

from specdec_helpers.costmodel import theory
from specdec_helpers.costmodel.acceptance import pooled_acceptance
from specdec_helpers.costmodel.rules import paired_speedup
from specdec_helpers.stats import MIN_VALUES_FOR_INTERVAL, bootstrap_ratio_ci


def add_time_per_token(results: pd.DataFrame) -> pd.DataFrame:
    """Seconds per generated token, end to end: comparable even when sampled answers differ in length."""
    return results.assign(s_per_token=results["e2e_s"] / results["completion_tokens"].clip(lower=1))


def per_position(rows: pd.DataFrame) -> list[float]:
    """Pooled share of drafts whose i-th token was accepted, for each position i."""
    cols = sorted((c for c in rows.columns if c.startswith("accept_pos")), key=lambda c: int(c[10:]))
    drafts = rows["drafts"].sum()
    return [float((rows[c] * rows["drafts"]).sum() / drafts) if drafts else float("nan") for c in cols]


def paired(results: pd.DataFrame, value: str | Sequence[str], baseline: str = "baseline") -> pd.DataFrame:
    """Rows of every non-baseline server joined with the baseline's ``value`` column(s) for the same request (the mean
    of the baseline's two blocks when a sandwich measured it twice, :mod:`measure.paired`)."""
    keys = ["prompt_id", "repeat", "temperature"]
    values = [value] if isinstance(value, str) else list(value)
    base = results[results["server"] == baseline][keys + values]
    how = {v: "mean" if pd.api.types.is_numeric_dtype(base[v]) else "first" for v in values}
    base = base.groupby(keys, as_index=False).agg(how).rename(columns={v: f"baseline_{v}" for v in values})
    return results[results["server"] != baseline].merge(base, on=keys, how="inner")


def cell_summary(results: pd.DataFrame, by: Sequence[str] = ("class", "temperature"),
                 baseline: str = "baseline", seed: int = 0) -> pd.DataFrame:
    """One row per server and cell: acceptance and speedup with their intervals (NaN for too few requests, with
    the speedup's range instead), decode speed. The speedup is notebook 04's ``paired_speedup`` (its bootstrap's
    fixed seed, ``stats.bootstrap_ci``'s default 0); ``seed`` is the acceptance interval's."""
    joined = paired(add_time_per_token(results), ["s_per_token", "decode_tokens_per_s"], baseline)
    rows = []
    for key, cell in joined.groupby(["server", *by], sort=True):
        speedup = cell["baseline_s_per_token"] / cell["s_per_token"]
        decode_speedup = cell["decode_tokens_per_s"] / cell["baseline_decode_tokens_per_s"]
        point, lo, hi = paired_speedup(speedup)
        pooled = pooled_acceptance(cell)
        # a 95% bootstrap interval over requests of the pooled ratio itself
        _, acc_lo, acc_hi = bootstrap_ratio_ci(cell["accepted_tokens"], cell["draft_tokens"], seed=seed,
                                               min_n=MIN_VALUES_FOR_INTERVAL)
        k = int(cell["num_speculative_tokens"].max()) if "num_speculative_tokens" in cell else 0
        alpha = theory.alpha_from_mean_acceptance_length(pooled["mean_acceptance_length"], k, clip=True)
        rows.append(dict(zip(["server", *by], key), n=len(cell), **pooled, acceptance_ci_low=acc_lo,
                         acceptance_ci_high=acc_hi, alpha_per_token=alpha, per_position=per_position(cell),
                         baseline_decode_tokens_per_s=float(cell["baseline_decode_tokens_per_s"].median()),
                         decode_tokens_per_s=float(cell["decode_tokens_per_s"].median()),
                         decode_speedup=float(decode_speedup.median()), speedup=point, speedup_ci_low=lo,
                         speedup_ci_high=hi, speedup_min=float(speedup.min()), speedup_max=float(speedup.max())))
    # named columns even with no row (the physics guard left out every pair): the notebook's tables stay empty
    return pd.DataFrame(rows, columns=["server", *by, "n", "acceptance_rate", "mean_acceptance_length",
                                       "acceptance_ci_low", "acceptance_ci_high", "alpha_per_token", "per_position",
                                       "baseline_decode_tokens_per_s", "decode_tokens_per_s", "decode_speedup",
                                       "speedup", "speedup_ci_low", "speedup_ci_high", "speedup_min", "speedup_max"])


def per_position_long(summary: pd.DataFrame, label_cols: Sequence[str]) -> pd.DataFrame:
    """Long form of the per-position lists, for a line plot (position on x, rate on y)."""
    return pd.DataFrame([(" / ".join(str(row[c]) for c in label_cols), i, rate) for _, row in summary.iterrows()
                         for i, rate in enumerate(row["per_position"], start=1)],
                        columns=["cell", "position", "accepted_share"])


def first_difference(a: Sequence, b: Sequence) -> int | None:
    """Where two sequences first differ (the shorter's length if one is a prefix of the other); None if equal."""
    i = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
    return None if i == len(a) == len(b) else i


def greedy_agreement(results: pd.DataFrame, baseline: str = "baseline") -> pd.DataFrame:
    """At temperature 0, is each speculative answer the baseline's, character for character (lossless only in exact
    arithmetic)? ``first_difference``: the character where they part, or -1."""
    rows = []
    for _, r in paired(results[results["temperature"] == 0], "text", baseline).iterrows():
        a, b = str(r["baseline_text"]), str(r["text"])
        first = first_difference(a, b)
        rows.append({"server": r["server"], "prompt_id": r["prompt_id"], "class": r.get("class"),
                     "repeat": r["repeat"], "identical": a == b, "first_difference": -1 if first is None else first})
    return pd.DataFrame(rows, columns=["server", "prompt_id", "class", "repeat", "identical", "first_difference"])
