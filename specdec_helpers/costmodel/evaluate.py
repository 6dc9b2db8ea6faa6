"""Measure a speculation candidate against the baseline and put the numbers into the cost model: the one place
for the definitions notebooks 04 and 07 share (alpha, c, v(k), coverage f, speedups paired per prompt)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import pandas as pd

from specdec_helpers.costmodel import analysis, theory
from specdec_helpers.engine.serving import VLLMServer
from specdec_helpers.engine.spec_config import NGRAM, draft_model_config, ngram_config
from specdec_helpers.measure import phases
from specdec_helpers.measure.metrics import pooled_acceptance
from specdec_helpers.measure.requests import measure_prompts, warm_up
from specdec_helpers.models.resolve import resolve_model
from specdec_helpers.stats import MIN_VALUES_FOR_INTERVAL, bootstrap_ci


@dataclass
class Baseline:
    """The target alone: per-request results, its decode step time, and its verify cost."""

    results: pd.DataFrame
    step_s: float
    verify_summary: pd.DataFrame  # per n positions: median v, quartiles, 95% interval (phases.summarize_verify_cost)
    verify: theory.VerifyCost  # the medians: what the cost model uses


def measure_baseline(target_dir: Path, prompts: Sequence, *, max_tokens: int, repeats: int, temperature: float,
                     verify_ks: Sequence[int], provenance: dict, server_options: dict[str, Any]) -> Baseline:
    with VLLMServer(target_dir, name="baseline", **server_options) as server:
        warm_up(server)
        results = measure_prompts([server], prompts, temperature=temperature, repeats=repeats,
                                  max_tokens=max_tokens, provenance=provenance)
        step_s = decode_step_seconds(server)
        table = phases.add_verify_ratio(phases.verify_cost(server, ks=verify_ks))
    summary = phases.summarize_verify_cost(table)
    verify = theory.VerifyCost({int(n): float(v) for n, v in summary["v"].items()})
    return Baseline(results=results, step_s=step_s, verify_summary=summary, verify=verify)


def measure_candidate(candidate: str, target_dir: Path, prompts: Sequence, baseline: Baseline, *, k: int,
                      max_tokens: int, repeats: int, temperature: float, provenance: dict,
                      server_options: dict[str, Any], max_k: int,
                      draft_step: "DraftStep | None" = None) -> tuple[pd.DataFrame, dict]:
    """Run the candidate's speculative server on the baseline's prompts; return its rows and a summary.
    c = the draft's decode step time / the target's, each on its own server (0 for n-gram lookup);
    ``draft_step`` is the draft's step when the notebook timed it already (:func:`draft_step_seconds`)."""
    draft_dir = None if candidate == NGRAM else resolve_model(candidate)
    config = ngram_config(k, 4) if draft_dir is None else draft_model_config(draft_dir, k)
    with VLLMServer(target_dir, name=candidate, speculative_config=config, **server_options) as server:
        warm_up(server)
        rows = measure_prompts([server], prompts, temperature=temperature, repeats=repeats,
                               max_tokens=max_tokens, provenance=provenance)
    if draft_dir is None or Path(draft_dir).resolve() == Path(target_dir).resolve():
        c = 0.0 if draft_dir is None else 1.0
    else:
        c = (draft_step or draft_step_seconds(draft_dir, server_options)).step_s / baseline.step_s
    return rows, summarize_candidate(candidate, rows, baseline, k=k, c=c, max_k=max_k)


#: how a decode step is timed, target and draft alike (c is the ratio of two such medians): ``phases.itl_by_position``
STEP_METHOD = {"output_tokens": 32, "repeats": 2}


def decode_step_seconds(server: VLLMServer) -> float:
    """One decode step of one sequence on ``server``, timed by ``STEP_METHOD`` (the one method for c)."""
    return float(phases.itl_by_position(server, **STEP_METHOD)["itl_s"].median())


@dataclass
class DraftStep:
    step_s: float
    source: str  # "measured here" or which notebook of this run measured it


def draft_step_seconds(draft_dir: Path, server_options: dict[str, Any]) -> DraftStep:
    """The draft model's decode step, served alone (the numerator of c). Inside ``make run`` it is measured once,
    and later notebooks read it instead of starting that server again (only the target's step is timed again)."""
    from specdec_helpers.engine.pool import recall, remember

    server = VLLMServer(draft_dir, name="draft-alone", **server_options)
    key = f"draft-step:{server.pool_key()}:{STEP_METHOD['output_tokens']}x{STEP_METHOD['repeats']}"
    earlier = recall(key)
    if earlier is not None:
        return DraftStep(earlier["step_s"], f"measured by {earlier['notebook']} earlier in this run")
    with server:
        warm_up(server)
        step_s = decode_step_seconds(server)
    remember(key, {"step_s": step_s})
    return DraftStep(step_s, "measured here")


def summarize_candidate(candidate: str, rows: pd.DataFrame, baseline: Baseline, *, k: int, c: float, max_k: int,
                        by_class: str | None = None) -> dict:
    """Acceptance, cost, the model's prediction and the measured speedups for one candidate (best_k in 0..max_k)."""
    both = pd.concat([baseline.results, rows], ignore_index=True)
    both = analysis.add_time_per_token(both[both["class"] == by_class] if by_class else both)
    spec = both[both["server"] == candidate]
    pooled = pooled_acceptance(spec)
    mal = pooled["mean_acceptance_length"]
    alpha_token = theory.alpha_from_mean_acceptance_length(mal, k, clip=True)
    alpha_token = 0.0 if math.isnan(alpha_token) else alpha_token  # no drafts: none accepted
    pairs = analysis.paired(both, ["decode_tokens_per_s", "s_per_token"], baseline="baseline")
    decode_ratio = (pairs["decode_tokens_per_s"] / pairs["baseline_decode_tokens_per_s"]).dropna()
    ratios = (pairs["baseline_s_per_token"] / pairs["s_per_token"]).dropna()
    point, lo, hi = bootstrap_ci(ratios, np.median, min_n=MIN_VALUES_FOR_INTERVAL)

    def stat(values: pd.Series, how: str) -> float:  # NaN for no values
        return float(getattr(values, how)()) if len(values) else float("nan")
    coverage = draft_coverage(spec)
    predicted = (theory.predicted_speedup_with_coverage(alpha_token, k, c, baseline.verify, coverage)
                 if np.isfinite(c) else float("nan"))
    # the same coverage: n-gram lookup that drafts on few steps must not get the per-drafted-step gain of a long k
    best_k, best_pred = (theory.best_k(alpha_token, c, baseline.verify, max_k=max_k, coverage=coverage)
                         if np.isfinite(c) else (k, float("nan")))
    return {"candidate": candidate, "k": k, "acceptance_rate": pooled["acceptance_rate"],
            "mean_acceptance_length": mal, "per_position": analysis.per_position(spec),
            "alpha_per_token": alpha_token, "c": c, "coverage": coverage,
            "verify_cost_k_plus_1": baseline.verify(k + 1), "predicted_decode_speedup": predicted,
            "measured_decode_speedup": stat(decode_ratio, "median"), "decode_speedup_min": stat(decode_ratio, "min"),
            "decode_speedup_max": stat(decode_ratio, "max"), "measured_speedup": point, "speedup_ci_low": lo,
            "speedup_ci_high": hi, "n_pairs": int(len(ratios)), "speedup_min": stat(ratios, "min"),
            "speedup_max": stat(ratios, "max"), "best_k": best_k, "predicted_speedup_at_best_k": best_pred}


def draft_coverage(spec_rows: pd.DataFrame) -> float:
    """Coverage f, the share of decode steps that carried a draft: one yields 1 + accepted tokens, one without 1."""
    drafts, accepted = spec_rows["drafts"].sum(), spec_rows["accepted_tokens"].sum()
    plain = max((spec_rows["completion_tokens"] - 1).clip(lower=0).sum() - drafts - accepted, 0)
    return float(drafts / (drafts + plain)) if drafts + plain else 0.0


def prediction_curve(summary: dict, verify: theory.VerifyCost, ks: Sequence[int] = range(0, 9)) -> pd.DataFrame:
    return pd.DataFrame([{"candidate": summary["candidate"], "k": k,
                          "predicted_speedup": theory.predicted_speedup_with_coverage(
                              summary["alpha_per_token"], k, summary["c"], verify, summary["coverage"])}
                         for k in ks])


def draft_steps(draft_dirs: dict[str, Path], target_dir: Path, server_options: dict[str, Any]) -> dict[str, DraftStep]:
    """:func:`draft_step_seconds` for each draft model that is not the target itself (a self-draft has c = 1)."""
    return {name: draft_step_seconds(path, server_options) for name, path in draft_dirs.items()
            if Path(path).resolve() != Path(target_dir).resolve()}
