"""Measure a speculation candidate against the baseline and put the numbers into the cost model: the one place
for the definitions notebooks 04 and 07 share (alpha, c, v(k), coverage f, speedups paired per prompt, the physics
guard). Every candidate request is paired with a baseline request on the same prompt, next to it in time
(:mod:`measure.paired`); decode times are the engine's own (the clock v(k) is timed with), end to end the client's."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np
import pandas as pd

from specdec_helpers.costmodel import analysis, theory
from specdec_helpers.costmodel.acceptance import pooled_acceptance
from specdec_helpers.engine.serving import VLLMServer
from specdec_helpers.engine.spec_config import (
    NGRAM,
    PROPOSERS,
    custom_config,
    draft_model_config,
    ngram_config,
)
from specdec_helpers.measure import phases
from specdec_helpers.measure.paired import measure_paired, sandwich_drift
from specdec_helpers.measure.requests import warm_up
from specdec_helpers.models.resolve import resolve_model
from specdec_helpers.stats import MIN_VALUES_FOR_INTERVAL, bootstrap_ratio_ci


@dataclass
class Baseline:
    """The target alone, kept up while the candidates pair against it: its decode step and its verify cost."""

    server: VLLMServer
    step_s: float
    verify_summary: pd.DataFrame  # per n positions: median v, quartiles, 95% interval (phases.summarize_verify_cost)
    verify: theory.VerifyCost  # the medians: what the cost model uses
    verify_low: theory.VerifyCost  # the intervals' lower ends: the physics guard gives verification the doubt


def measure_baseline(server: VLLMServer, *, verify_ks: Sequence[int], k: int, time_step: bool = True) -> Baseline:
    """On the running baseline ``server``: its decode step (``time_step``: c's denominator; the physics guard alone
    does not need it) and v(n) for every n of ``verify_ks`` and for n = k + 1, the pass that checks k drafts
    (measured, not interpolated: the guard and c divide by it)."""
    step_s = decode_step_seconds(server) if time_step else math.nan
    ks = sorted({*map(int, verify_ks), int(k) + 1})
    for attempt in (1, 2, 3):  # a burst of other work can make a pass look cheaper than nothing: measure again
        table = phases.add_verify_ratio(phases.verify_cost(server, ks=ks))
        try:
            summary = phases.summarize_verify_cost(table)
            break
        except ValueError as exc:
            if attempt == 3:
                raise
            print(f"{exc}\nMeasuring v(n) again.")
    return Baseline(server=server, step_s=step_s, verify_summary=summary,
                    verify=theory.VerifyCost({int(n): float(v) for n, v in summary["v"].items()}),
                    verify_low=theory.VerifyCost({int(n): float(v) for n, v in summary["ci_low"].items()}))


#: where the series' own proposer classes import from (spec_config.PROPOSERS): this package's folder
PACKAGE_ROOT = Path(__file__).resolve().parents[2]


def candidate_server(candidate: str, target_dir: Path, k: int, server_options: dict[str, Any],
                     prompt_lookup_max: int, proposers: Mapping[str, tuple[str, str | Path]] | None = None,
                     ) -> VLLMServer:
    """The speculative server of a candidate: ``"ngram"`` (prompt lookup, matching n-grams of at most
    ``prompt_lookup_max`` tokens: the profile's ``ngram_prompt_lookup_max``), a proposer class (the series' own,
    ``spec_config.PROPOSERS``, or ``proposers``: name -> (module.Class, the folder its module is in)) or a draft
    model's name."""
    classes = {name: (path, PACKAGE_ROOT) for name, path in PROPOSERS.items()} | dict(proposers or {})
    python_path: list[str] = []
    if candidate == NGRAM:
        config = ngram_config(k, prompt_lookup_max)
    elif candidate in classes:
        class_path, folder = classes[candidate]
        config, python_path = custom_config(class_path, k), [str(folder)]
    else:
        config = draft_model_config(resolve_model(candidate), k)
    return VLLMServer(target_dir, name=candidate, speculative_config=config, python_path=python_path,
                      **server_options)


def measure_candidate(candidate: str, baseline: Baseline, prompts: Sequence, *, k: int, together: bool,
                      max_tokens: int, repeats: int, temperature: float, provenance: dict,
                      server_options: dict[str, Any], max_k: int, prompt_lookup_max: int,
                      proposers: Mapping[str, tuple[str, str | Path]] | None = None) -> tuple[pd.DataFrame, dict]:
    """The candidate's requests paired with fresh baseline requests (both servers up when ``together``, else a
    sandwich); returns every row (the baseline's too) and :func:`summarize_candidate`."""
    server = candidate_server(candidate, Path(baseline.server.model), k, server_options, prompt_lookup_max, proposers)
    rows = measure_paired(baseline.server, [server], prompts, together=together, temperature=temperature,
                          repeats=repeats, max_tokens=max_tokens, provenance=provenance)
    return rows, summarize_candidate(candidate, rows, baseline, k=k, max_k=max_k)


#: how a decode step is timed, target and draft alike (c is the ratio of two such medians): ``phases.itl_by_position``
STEP_METHOD = {"output_tokens": 32, "repeats": 2}


def decode_step_seconds(server: VLLMServer) -> float:
    """One decode step of one sequence on ``server``, timed by ``STEP_METHOD`` (the one method for c)."""
    return float(phases.itl_by_position(server, **STEP_METHOD)["itl_s"].median())


def draft_step_seconds(draft_dir: Path, server_options: dict[str, Any]) -> float:
    """The draft model's decode step, served alone (c's numerator as the papers time it: a separate model with its own
    per-step overhead)."""
    with VLLMServer(draft_dir, name="draft-alone", **server_options) as server:
        warm_up(server)
        return decode_step_seconds(server)


def pair_table(rows: pd.DataFrame, baseline: Baseline, k: int) -> pd.DataFrame:
    """One row per candidate request with its paired baseline request: the speedups (decode by the engine's clock and
    by the client's, end to end by the client's), the steps it took, the c its steps imply (``theory.c_from_step``)
    and the physics guard: ``decode_bound`` = tokens per step / (f * v(k+1) + 1 - f), the most any drafting could
    give, with verification at the low end of its measured interval. A pair above it measured drift, not
    speculation: ``flagged``, and kept out of every statistic that decides something."""
    rows = analysis.add_time_per_token(rows)
    pairs = analysis.paired(rows, ["s_per_token", "e2e_s", "decode_tokens_per_s", "engine_decode_s",
                                   "engine_decode_tokens_per_s", "completion_tokens", "sent_at"])
    decoded = (pairs["completion_tokens"] - 1).clip(lower=0)
    plain = (decoded - pairs["drafts"] - pairs["accepted_tokens"]).clip(lower=0)
    steps = (pairs["drafts"] + plain).where(lambda x: x > 0)
    f = pairs["drafts"] / steps
    base_step = pairs["baseline_engine_decode_s"] / (pairs["baseline_completion_tokens"] - 1).where(lambda x: x > 0)
    step_ratio = pairs["engine_decode_s"] / steps / base_step
    v, v_low = baseline.verify(k + 1), baseline.verify_low(k + 1)
    c = [theory.c_from_step(r, k, v, ff) if np.isfinite(r) and np.isfinite(ff) else math.nan
         for r, ff in zip(step_ratio, f)]
    bound = decoded / steps / (f * v_low + 1 - f)
    decode_speedup = pairs["engine_decode_tokens_per_s"] / pairs["baseline_engine_decode_tokens_per_s"]
    return pd.DataFrame({
        "candidate": pairs["server"], "k": k, "prompt_id": pairs["prompt_id"], "class": pairs["class"],
        "repeat": pairs["repeat"], "temperature": pairs["temperature"],
        "seconds_apart": (pairs["sent_at"] - pairs["baseline_sent_at"]).abs(), "steps": steps, "coverage": f,
        "tokens_per_step": decoded / steps, "step_ratio": step_ratio, "c_in_server": c,
        "decode_speedup": decode_speedup,
        "decode_speedup_client": pairs["decode_tokens_per_s"] / pairs["baseline_decode_tokens_per_s"],
        "speedup": pairs["baseline_s_per_token"] / pairs["s_per_token"],
        "baseline_e2e_s": pairs["baseline_e2e_s"], "e2e_s": pairs["e2e_s"], "decode_bound": bound,
        "flagged": decode_speedup > bound})


def relative_spread(values: pd.Series) -> float:
    """Interquartile range over median: how much a set of paired ratios scatters (what 04 compares the clocks by)."""
    values = values.dropna()
    return float((values.quantile(0.75) - values.quantile(0.25)) / values.median()) if len(values) else math.nan


def summarize_candidate(candidate: str, rows: pd.DataFrame, baseline: Baseline, *, k: int, max_k: int,
                        by_class: str | None = None, c: float | None = None) -> dict:
    """Acceptance, cost, the model's prediction and the measured (paired, guarded) speedups for one candidate (best_k in
    0..max_k). ``c``: the draft's cost to use; default the in-server c of these rows (pass the all-prompts value for a
    class, so a class's prediction is not fitted to that class's own timings)."""
    rows = rows[rows["class"] == by_class] if by_class else rows
    spec = rows[rows["server"] == candidate]
    table = pair_table(rows[rows["server"].isin(["baseline", candidate])], baseline, k)
    kept = table[~table["flagged"]]
    pooled = pooled_acceptance(spec)
    mal = pooled["mean_acceptance_length"]
    alpha_token = theory.alpha_from_mean_acceptance_length(mal, k, clip=True)
    alpha_token = 0.0 if math.isnan(alpha_token) else alpha_token  # no drafts: none accepted
    c_in_server = float(table["c_in_server"].median()) if table["c_in_server"].notna().any() else math.nan
    c = c_in_server if c is None else c
    c_model = max(c, 0.0) if np.isfinite(c) else math.nan  # below 0 is noise around free drafting: the model's c >= 0
    ratios = kept["speedup"].dropna()
    point, lo, hi = analysis.paired_speedup(ratios)

    def stat(values: pd.Series, how: str) -> float:  # NaN for no values
        return float(getattr(values.dropna(), how)()) if values.notna().any() else math.nan
    coverage = draft_coverage(spec)
    predicted = (theory.predicted_speedup_with_coverage(alpha_token, k, c_model, baseline.verify, coverage)
                 if np.isfinite(c_model) else math.nan)
    # the same coverage: n-gram lookup that drafts on few steps must not get the per-drafted-step gain of a long k
    best_k, best_pred = (theory.best_k(alpha_token, c_model, baseline.verify, max_k=max_k, coverage=coverage)
                         if np.isfinite(c_model) else (k, math.nan))
    flagged = table[table["flagged"]]
    # a workload's speedup: what its users wait for in all, total baseline time over total speculative time
    total, total_lo, total_hi = (bootstrap_ratio_ci(kept["baseline_e2e_s"], kept["e2e_s"], min_n=MIN_VALUES_FOR_INTERVAL)
                                 if len(kept) else (math.nan,) * 3)
    return {"candidate": candidate, "k": k, "acceptance_rate": pooled["acceptance_rate"],
            "mean_acceptance_length": mal, "per_position": analysis.per_position(spec),
            "alpha_per_token": alpha_token, "c": c_model, "c_in_server": c_in_server, "coverage": coverage,
            "verify_cost_k_plus_1": baseline.verify(k + 1), "predicted_decode_speedup": predicted,
            "measured_decode_speedup": stat(kept["decode_speedup"], "median"),
            "decode_speedup_min": stat(kept["decode_speedup"], "min"),
            "decode_speedup_max": stat(kept["decode_speedup"], "max"), "measured_speedup": point,
            "speedup_ci_low": lo, "speedup_ci_high": hi, "n_pairs": int(len(ratios)),
            "speedup_min": stat(ratios, "min"), "speedup_max": stat(ratios, "max"),
            "total_time_speedup": total, "total_time_ci_low": total_lo, "total_time_ci_high": total_hi,
            "decode_spread_engine": relative_spread(kept["decode_speedup"]),
            "decode_spread_client": relative_spread(kept["decode_speedup_client"]),
            "n_flagged": int(len(flagged)),
            "flagged": [f"{r.prompt_id}: {r.decode_speedup:.2f}x decode > bound {r.decode_bound:.2f}x"
                        for r in flagged.itertuples()],
            "design": str(rows["design"].iloc[0]) if "design" in rows and len(rows) else "",
            "drift": sandwich_drift(rows) if "design" in rows else math.nan,
            "best_k": best_k, "predicted_speedup_at_best_k": best_pred}


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


def draft_steps(draft_dirs: dict[str, Path], target_dir: Path, server_options: dict[str, Any]) -> dict[str, float]:
    """:func:`draft_step_seconds` for each draft model that is not the target itself (a self-draft has c = 1)."""
    return {name: draft_step_seconds(path, server_options) for name, path in draft_dirs.items()
            if Path(path).resolve() != Path(target_dir).resolve()}
