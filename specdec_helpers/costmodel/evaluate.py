"""Measure a speculation candidate against the baseline, and put the numbers into the cost model.

Notebooks 04 and 07 ask the same question of every candidate (n-gram lookup, or a draft model):
how often is it accepted (alpha), what does it cost (c), what does the cost model predict from
those two and this hardware's verify cost v(k), and what speedup did we actually measure? Doing it
in one place keeps the definitions identical across notebooks:

* alpha: vLLM's pooled acceptance rate; for the cost model, a per-token alpha fitted so that the
  model's expected tokens per pass match vLLM's mean acceptance length;
* c: the draft's decode step time over the target's, each measured on its own server (n-gram
  lookup is a table search on the CPU: c = 0);
* v(k): from ``phases.verify_cost`` on the baseline server (the engine's own pass times, median of
  interleaved repeats; the spread travels with it in ``Baseline.verify_summary``);
* coverage f: the share of decode steps that carried a draft (1 for a draft model, less for n-gram
  lookup); every prediction here, including the best k, uses it;
* measured speedup: paired per prompt, decode tokens/s and end-to-end time per token.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import pandas as pd

from specdec_helpers.costmodel import analysis
from specdec_helpers.measure import phases
from specdec_helpers.costmodel import theory
from specdec_helpers.measure.requests import measure_prompts, warm_up
from specdec_helpers.models.resolve import resolve_model
from specdec_helpers.engine.serving import VLLMServer, draft_model_config, ngram_config
from specdec_helpers.stats import bootstrap_ci

NGRAM = "ngram"


@dataclass
class Baseline:
    """The target alone: per-request results, its decode step time, and its verify cost."""

    results: pd.DataFrame
    step_s: float
    verify_table: pd.DataFrame
    verify_summary: pd.DataFrame  # per n positions: median v, quartiles, 95% interval (phases.summarize_verify_cost)
    verify: theory.VerifyCost  # the medians: what the cost model uses


def measure_baseline(target_dir: Path, prompts: Sequence, *, max_tokens: int, repeats: int, temperature: float,
                     verify_ks: Sequence[int], provenance: dict, server_options: dict[str, Any]) -> Baseline:
    with VLLMServer(target_dir, name="baseline", **server_options) as server:
        warm_up(server)
        results = measure_prompts([server], prompts, temperature=temperature, repeats=repeats,
                                  max_tokens=max_tokens, provenance=provenance)
        itl = phases.itl_by_position(server, output_tokens=32, repeats=2)
        step_s = float(itl["itl_s"].median())
        table = phases.add_verify_ratio(phases.verify_cost(server, ks=verify_ks))
    summary = phases.summarize_verify_cost(table)
    verify = theory.VerifyCost({int(n): float(v) for n, v in summary["v"].items()})
    return Baseline(results=results, step_s=step_s, verify_table=table, verify_summary=summary, verify=verify)


def candidate_config(candidate: str, k: int, draft_sample_method: str | None = None,
                     ngram_lookup_max: int = 4) -> tuple[dict, Path | None]:
    """The ``--speculative-config`` for a candidate name, and its draft directory (None for n-gram)."""
    if candidate == NGRAM:
        return ngram_config(k, ngram_lookup_max), None
    draft_dir = resolve_model(candidate)
    return draft_model_config(draft_dir, k, draft_sample_method), draft_dir


def draft_step_cost(draft_dir: Path | None, target_dir: Path, step_s: float, server_options: dict[str, Any]) -> float:
    """c = the draft's decode step time / the target's, each on its own server."""
    if draft_dir is None:
        return 0.0
    if Path(draft_dir).resolve() == Path(target_dir).resolve():
        return 1.0
    with VLLMServer(draft_dir, name="draft-alone", **server_options) as server:
        itl = phases.itl_by_position(server, output_tokens=32, repeats=2)
    return float(itl["itl_s"].median()) / step_s


def measure_candidate(candidate: str, target_dir: Path, prompts: Sequence, baseline: Baseline, *, k: int,
                      max_tokens: int, repeats: int, temperature: float, provenance: dict,
                      server_options: dict[str, Any], draft_sample_method: str | None = None,
                      measure_cost: bool = True) -> tuple[pd.DataFrame, dict]:
    """Run the candidate's speculative server on the baseline's prompts; return its rows and a summary."""
    config, draft_dir = candidate_config(candidate, k, draft_sample_method)
    with VLLMServer(target_dir, name=candidate, speculative_config=config, **server_options) as server:
        warm_up(server)
        rows = measure_prompts([server], prompts, temperature=temperature, repeats=repeats,
                               max_tokens=max_tokens, provenance=provenance)
    c = draft_step_cost(draft_dir, target_dir, baseline.step_s, server_options) if measure_cost else float("nan")
    return rows, summarize_candidate(candidate, rows, baseline, k=k, c=c)


def summarize_candidate(candidate: str, rows: pd.DataFrame, baseline: Baseline, *, k: int, c: float,
                        by_class: str | None = None) -> dict:
    """Acceptance, cost, the model's prediction and the measured speedups for one candidate."""
    both = pd.concat([baseline.results, rows], ignore_index=True)
    if by_class:
        both = both[both["class"] == by_class]
    both = analysis.add_time_per_token(both)
    spec = both[both["server"] == candidate]
    pooled = analysis.pooled_acceptance(spec)
    mal = pooled["mean_acceptance_length"]
    alpha_token = theory.alpha_from_mean_acceptance_length(min(max(mal, 1.0), k + 1.0), k) if np.isfinite(mal) else 0.0
    decode = analysis.paired(both, "decode_tokens_per_s", baseline="baseline")
    decode_ratio = (decode["decode_tokens_per_s"] / decode["baseline_decode_tokens_per_s"]).dropna()
    e2e = analysis.paired(both, "s_per_token", baseline="baseline")
    e2e_ratio = e2e["baseline_s_per_token"] / e2e["s_per_token"]
    point, lo, hi = bootstrap_ci(e2e_ratio, np.median)
    coverage = draft_coverage(spec)
    predicted = (theory.predicted_speedup_with_coverage(alpha_token, k, c, baseline.verify, coverage)
                 if np.isfinite(c) else float("nan"))
    # the same coverage as the prediction above: n-gram lookup that drafts on few steps must not be
    # credited with the per-drafted-step gain of a long k
    best_k, best_pred = (theory.best_k(alpha_token, c, baseline.verify, max_k=8, coverage=coverage)
                         if np.isfinite(c) else (k, float("nan")))
    return {
        "candidate": candidate,
        "k": k,
        "acceptance_rate": pooled["acceptance_rate"],
        "mean_acceptance_length": mal,
        "per_position": analysis.per_position(spec),
        "alpha_per_token": alpha_token,
        "c": c,
        "coverage": coverage,
        "verify_cost_k_plus_1": baseline.verify(k + 1),
        "predicted_decode_speedup": predicted,
        "measured_decode_speedup": float(decode_ratio.median()) if len(decode_ratio) else float("nan"),
        "measured_speedup": point,
        "speedup_ci_low": lo,
        "speedup_ci_high": hi,
        "best_k": best_k,
        "predicted_speedup_at_best_k": best_pred,
    }


def draft_coverage(spec_rows: pd.DataFrame) -> float:
    """Coverage f: the share of decode steps that carried a draft, from vLLM's counters and token counts.

    The one definition the series uses (:func:`theory.predicted_speedup_with_coverage`,
    :func:`theory.best_k` and :func:`theory.concurrency_speedup` take it as ``coverage``).

    A step with a draft yields 1 + accepted tokens, a step without one yields 1, and the first
    token comes from prefill: so steps without a draft = (completion tokens - 1) - drafts - accepted.
    """
    drafts = spec_rows["drafts"].sum()
    accepted = spec_rows["accepted_tokens"].sum()
    plain = max((spec_rows["completion_tokens"] - 1).clip(lower=0).sum() - drafts - accepted, 0)
    return float(drafts / (drafts + plain)) if drafts + plain else 0.0


def prediction_curve(summary: dict, verify: theory.VerifyCost, ks: Sequence[int] = range(0, 9)) -> pd.DataFrame:
    """Predicted decode speedup for every k, from the candidate's measured alpha and c."""
    return pd.DataFrame([{"candidate": summary["candidate"], "k": k,
                          "predicted_speedup": theory.predicted_speedup_with_coverage(
                              summary["alpha_per_token"], k, summary["c"], verify, summary["coverage"])}
                         for k in ks])
