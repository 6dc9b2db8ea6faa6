"""Measure a speculation candidate against the baseline and put the numbers into the cost model: the one place
for the definitions notebooks 04 and 07 share (alpha, c, v(n), speedups paired per prompt, the physics guard; coverage
f and the paired speedup are 04's rules, from :mod:`specdec_helpers.costmodel.rules`). Every candidate request is
paired with a baseline request on the same prompt, next to it in time (:mod:`measure.paired`); decode times are the
engine's own (the clock v(n) is timed with), end to end the client's."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np
import pandas as pd

from specdec_helpers.costmodel import analysis, rules, theory
from specdec_helpers.costmodel.acceptance import pooled_acceptance
from specdec_helpers.costmodel.rules import draft_coverage, paired_speedup
from specdec_helpers.engine import spec_config
from specdec_helpers.engine.serving import VLLMServer
from specdec_helpers.engine.spec_config import NGRAM  # notebook 04 reads evaluate.NGRAM
from specdec_helpers.measure import phases
from specdec_helpers.measure.paired import measure_paired, sandwich_drift
from specdec_helpers.measure.requests import warm_up
from specdec_helpers.models.resolve import resolve_model
from specdec_helpers.report.recommendation import find_recommendation, from_notebook_04
from specdec_helpers.report.runs import REPO_ROOT
from specdec_helpers.stats import MIN_VALUES_FOR_INTERVAL, bootstrap_ratio_ci


@dataclass
class Baseline:
    """The target alone, kept up while the candidates pair against it: its decode step and its verify cost."""

    server: VLLMServer
    step_s: float
    verify_summary: pd.DataFrame  # per n positions: median v, quartiles, 95% interval (phases.summarize_verify_cost)
    verify: theory.VerifyCost  # the medians: what the cost model uses
    verify_low: theory.VerifyCost  # the intervals' lower ends: the physics guard gives verification the doubt
    #: the most a pair's time-to-first-token and decode ratios stray from 1 between two identical servers: set by
    #: :func:`aa_control` (04) or :func:`noise_from_04` (05-07); NaN (no A/A control) allows the guard no noise
    ttft_noise: float = math.nan
    decode_noise: float = math.nan
    #: a time-to-first-token ratio beyond ``ttft_noise`` is flagged only where the A/A control ran next to the pairs
    #: (04): 8 pairs of short prompts minutes away bound the other notebooks' prefill too loosely to reject with
    judge_ttft: bool = False


def measure_baseline(server: VLLMServer, *, verify_ns: Sequence[int], k: int, time_step: bool = True) -> Baseline:
    """On the running baseline ``server``: its decode step (``time_step``: c's denominator; the physics guard alone
    does not need it) and v(n) for every n of ``verify_ns`` and for n = k + 1, the pass that checks k drafts
    (measured, not interpolated: the guard and c divide by it)."""
    step_s = decode_step_seconds(server) if time_step else math.nan
    summary = timed_verify_summary(server, sorted({*map(int, verify_ns), int(k) + 1}))
    return Baseline(server=server, step_s=step_s, verify_summary=summary,
                    verify=theory.VerifyCost({int(n): float(v) for n, v in summary["v"].items()}),
                    verify_low=theory.VerifyCost({int(n): float(v) for n, v in summary["ci_low"].items()}))


def candidate_server(candidate: str, target_dir: Path, k: int, server_options: dict[str, Any],
                     prompt_lookup_max: int, proposers: Mapping[str, tuple[str, str | Path]] | None = None,
                     ) -> VLLMServer:
    """The speculative server of a candidate: ``"ngram"`` (prompt lookup, matching n-grams of at most
    ``prompt_lookup_max`` tokens: the profile's ``ngram_prompt_lookup_max``), ``"suffix"`` (vLLM's suffix decoding,
    always a server of its own: :func:`learns_in_server`), a proposer class (the series' own,
    ``spec_config.PROPOSERS``, or ``proposers``: name -> (module.Class, the folder its module is in)) or a draft
    model's name."""
    # the series' own classes import from the folder that holds this package
    classes = {name: (path, REPO_ROOT) for name, path in spec_config.PROPOSERS.items()} | dict(proposers or {})
    python_path: list[str] = []
    if candidate == NGRAM:
        config = spec_config.ngram_config(k, prompt_lookup_max)
    elif candidate == spec_config.SUFFIX:
        config = spec_config.suffix_config(k)
    elif candidate in classes:
        class_path, folder = classes[candidate]
        config, python_path = spec_config.custom_config(class_path, k), [str(folder)]
    elif candidate.startswith(spec_config.EAGLE3_PREFIX):
        config = spec_config.eagle3_config(candidate.removeprefix(spec_config.EAGLE3_PREFIX), k)
    else:
        config = spec_config.draft_model_config(resolve_model(candidate), k)
    server = VLLMServer(target_dir, name=candidate, speculative_config=config, python_path=python_path,
                        **server_options)
    if learns_in_server(server):  # what it learns stays in its server: never the run's shared one
        server.shared = False
    return server


def measure_candidate(candidate: str, baseline: Baseline, prompts: Sequence, *, k: int, together: bool,
                      max_tokens: int, repeats: int, temperature: float, provenance: dict,
                      server_options: dict[str, Any], max_k: int, prompt_lookup_max: int,
                      proposers: Mapping[str, tuple[str, str | Path]] | None = None) -> tuple[pd.DataFrame, dict]:
    """The candidate's requests paired with fresh baseline requests (both servers up when ``together``, else a
    sandwich), then v(k+1) timed again on the baseline right after them (``VERIFY_NEXT_TO_PAIRS_ROUNDS``: the bound
    and c divide by it, so it is measured minutes from the pairs it judges, not at the notebook's start); returns every
    row (the baseline's too) and :func:`summarize_candidate`."""
    server = candidate_server(candidate, Path(baseline.server.model), k, server_options, prompt_lookup_max, proposers)
    if learns_in_server(server) and repeats > 1:
        print(f"{candidate}: one repeat, not {repeats} (a second request with the same prompt would draft from the "
              "server's own answer to the first: a cache, not speculation)")
        repeats = 1
    rows = measure_paired(baseline.server, [server], prompts, together=together, temperature=temperature,
                          repeats=repeats, max_tokens=max_tokens, provenance=provenance)
    if baseline.server.running:  # v(k+1) now: its median and the low end of its 95% interval
        v = timed_verify_summary(baseline.server, [k + 1], repeats=VERIFY_NEXT_TO_PAIRS_ROUNDS).loc[k + 1]
        rows = rows.assign(verify_k_plus_1=float(v["v"]), verify_low_k_plus_1=float(v["ci_low"]))
    return rows, summarize_candidate(candidate, rows, baseline, k=k, max_k=max_k)


def unavailable_candidates(candidates: Sequence[str]) -> dict[str, str]:
    """The candidates this environment cannot serve, each with why (a notebook measures the others and says so):
    suffix decoding without arctic-inference, which ``make env`` builds from source and may have failed to build."""
    import importlib.util

    missing = {}
    if spec_config.SUFFIX in candidates and importlib.util.find_spec("arctic_inference") is None:
        missing[spec_config.SUFFIX] = (
            "vLLM's suffix decoding needs the arctic-inference package, which `make env` builds from source (a C++20 "
            "compiler and the Python headers); it is not installed here: see the build log in $SPECDEC_CACHE/wheels, "
            "or take `suffix` out of draft_candidates")
    return missing


def learns_in_server(server: VLLMServer) -> bool:
    """Does this server draft from the answers of requests it served before, including one with the same prompt?
    vLLM's suffix decoding does (its global tree holds every finished answer), so it gets a fresh server (not the run's
    shared one, which earlier notebooks fed the same prompts) and each prompt once. The series' ``traffic`` learns
    too, but never from a request with the same prompt."""
    return (server.speculative_config or {}).get("method") == spec_config.SUFFIX


#: rounds of the v(k+1) measurement next to each candidate's pairs (3 is the least for a median and an interval)
VERIFY_NEXT_TO_PAIRS_ROUNDS = 5


def timed_verify_summary(server: VLLMServer, ns: Sequence[int], attempts: int = 3, **timing: Any) -> pd.DataFrame:
    """``phases.summarize_verify_cost`` of v(n) for every n of ``ns`` on the running ``server``, timed again (up to
    ``attempts`` times in all) when a burst of other work made a pass look cheaper than nothing: on a busy 2-core
    machine that happens now and then, and one retimed round costs seconds where a failed notebook costs its run."""
    def timed() -> pd.DataFrame:
        return phases.summarize_verify_cost(phases.verify_cost(server, ns=ns, **timing))  # it adds the ratios itself

    for _ in range(attempts - 1):
        try:
            return timed()
        except ValueError as exc:
            print(f"{exc}\nMeasuring v(n) again.")
    return timed()  # the last attempt's error is the notebook's


def decode_step_seconds(server: VLLMServer) -> float:
    """One decode step of one sequence on ``server``: the one timing for target and draft alike (c is the ratio of
    two such medians)."""
    return float(phases.itl_by_position(server, output_tokens=32, repeats=2)["itl_s"].median())


#: a lookup's one-token steps stand for its undrafted steps when at least this share of them carried no draft
UNDRAFTED_SHARE_FOR_PLAIN_STEP = 0.75


def pair_table(rows: pd.DataFrame, baseline: Baseline, k: int) -> pd.DataFrame:
    """One row per candidate request with its paired baseline request: the speedups (decode by the engine's clock and
    by the client's, end to end and time to first token by the client's), split into tokens per step and time per
    step, the c its steps imply (``theory.c_from_step``) and the physics guard.

    ``plain_step_ratio`` u: the candidate's one-token steps over the baseline's, where most carried no draft (a
    lookup's): what the server's configuration costs (u > 1) or gives (u < 1) apart from speculation; its median over
    the candidate's pairs scales every target step of that server in the guard and in c (1 where it cannot be
    measured: a draft model drafts at every step). ``decode_bound`` = tokens per step / ((f * v(k+1) + 1 - f) *
    min(u, 1)), v at the low end of its interval measured next to these pairs (``verify_low_k_plus_1``; else the
    notebook's): the most any drafting could give. End to end, prefill is the same work on both servers (more with a
    draft model, which prefills too), so ``e2e_bound`` = (T + D) / (T + D / decode_bound), T and D the baseline
    request's time to first token and decode time: a baseline whose prefill was slow by chance tightens it, which is
    what catches an end-to-end gain that is prefill noise. Two identical servers differ too (the A/A control, where
    it ran): the decode bound is widened by their worst decode ratio (``baseline.decode_noise``) and T may shrink by
    their worst time-to-first-token ratio (``baseline.ttft_noise``), so the bounds judge what noise cannot explain. A
    pair above either bound, or with a time-to-first-token ratio beyond that scatter, measured the machine, not
    speculation: ``flagged``, and kept out of every statistic that decides something (time to first token only with
    ``baseline.judge_ttft``)."""
    rows = analysis.add_time_per_token(rows)
    for column in ("drafts", "accepted_tokens", "one_token_step_s", "one_token_steps"):
        if column not in rows:
            rows = rows.assign(**{column: math.nan if column == "one_token_step_s" else 0})
    pairs = analysis.paired(rows, ["s_per_token", "e2e_s", "ttft_s", "decode_tokens_per_s", "engine_decode_s",
                                   "engine_decode_tokens_per_s", "completion_tokens", "sent_at", "one_token_step_s"])
    pairs[["drafts", "accepted_tokens"]] = pairs[["drafts", "accepted_tokens"]].fillna(0)
    decoded = (pairs["completion_tokens"] - 1).clip(lower=0)
    plain = (decoded - pairs["drafts"] - pairs["accepted_tokens"]).clip(lower=0)
    steps = (pairs["drafts"] + plain).where(lambda x: x > 0)
    f = pairs["drafts"] / steps
    base_step = pairs["baseline_engine_decode_s"] / (pairs["baseline_completion_tokens"] - 1).where(lambda x: x > 0)
    step_ratio = pairs["engine_decode_s"] / steps / base_step
    near = "verify_k_plus_1" in pairs and pairs["verify_k_plus_1"].notna().all()
    v = pairs["verify_k_plus_1"] if near else pd.Series(baseline.verify(k + 1), index=pairs.index)
    v_low = pairs["verify_low_k_plus_1"] if near else pd.Series(baseline.verify_low(k + 1), index=pairs.index)
    # one-token steps that carried no draft: the steps without a draft, of all one-token steps
    undrafted_share = (plain / pairs["one_token_steps"].where(lambda x: x > 0)).clip(upper=1.0)
    u_pair = (pairs["one_token_step_s"] / pairs["baseline_one_token_step_s"]).where(
        undrafted_share >= UNDRAFTED_SHARE_FOR_PLAIN_STEP)
    u = u_pair.groupby(pairs["server"]).transform("median").fillna(1.0)
    c = [theory.c_from_step(r / uu, k, vv, ff) if np.isfinite(r) and np.isfinite(ff) else math.nan
         for r, uu, vv, ff in zip(step_ratio, u, v, f)]
    # u < 1 (plain steps faster than the baseline's) raises what the pair can reach; u > 1 never lowers the bound: a
    # slower configuration cannot make a pair faster than physics, and a noisy u would flag honest slow pairs
    decode_noise, ttft_noise = (x if np.isfinite(x) else 1.0 for x in (baseline.decode_noise, baseline.ttft_noise))
    bound = decoded / steps / ((f * v_low + 1 - f) * np.minimum(u, 1.0)) * decode_noise
    decode_speedup = pairs["engine_decode_tokens_per_s"] / pairs["baseline_engine_decode_tokens_per_s"]
    speedup = pairs["baseline_s_per_token"] / pairs["s_per_token"]
    prefill = pairs["baseline_ttft_s"]
    decode_s = (pairs["baseline_e2e_s"] - prefill).clip(lower=0)
    e2e_bound = (prefill + decode_s) / (prefill / ttft_noise + decode_s / bound)
    ttft_speedup = pairs["baseline_ttft_s"] / pairs["ttft_s"]  # above 1: the candidate answered first sooner
    over_decode, over_e2e = decode_speedup > bound, speedup > e2e_bound
    judged = baseline.judge_ttft and np.isfinite(baseline.ttft_noise)
    over_ttft = ttft_speedup > baseline.ttft_noise if judged else False
    return pd.DataFrame({
        "candidate": pairs["server"], "k": k, "prompt_id": pairs["prompt_id"], "class": pairs["class"],
        "repeat": pairs["repeat"], "temperature": pairs["temperature"],
        "seconds_apart": (pairs["sent_at"] - pairs["baseline_sent_at"]).abs(), "steps": steps, "coverage": f,
        "tokens_per_step": decoded / steps, "step_ratio": step_ratio, "plain_step_ratio_pair": u_pair,
        "plain_step_ratio": u.where(u_pair.groupby(pairs["server"]).transform("count") > 0),
        "verify_k_plus_1": v, "c_in_server": c, "decode_speedup": decode_speedup,
        "decode_speedup_client": pairs["decode_tokens_per_s"] / pairs["baseline_decode_tokens_per_s"],
        "speedup": speedup, "ttft_speedup": ttft_speedup,
        "baseline_e2e_s": pairs["baseline_e2e_s"], "e2e_s": pairs["e2e_s"], "decode_bound": bound,
        "e2e_bound": e2e_bound, "flagged": over_decode | over_e2e | over_ttft,
        "flag_reason": np.where(over_decode, "decode above bound", np.where(
            over_e2e, "end to end above bound", np.where(over_ttft, "time to first token above the A/A scatter", "")))})


def relative_spread(values: pd.Series) -> float:
    """Interquartile range over median: how much a set of paired ratios scatters (what 04 compares the clocks by)."""
    return float((values.quantile(0.75) - values.quantile(0.25)) / values.median())  # NaN for no values


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
    # c from the kept pairs: a flagged pair's steps measured the machine, not the proposer (from all pairs when the
    # guard kept none with a draft: a description only, since such a candidate decides nothing, 04's rule)
    c_source = kept if kept["c_in_server"].notna().any() else table
    c_in_server = float(c_source["c_in_server"].median()) if c_source["c_in_server"].notna().any() else math.nan
    c = c_in_server if c is None else c
    coverage = draft_coverage(spec)
    # below 0 is noise around free drafting: the model's c >= 0; a proposer that never drafted spent nothing drafting
    c_model = max(c, 0.0) if np.isfinite(c) else 0.0 if coverage == 0 else math.nan
    ratios = kept["speedup"].dropna()
    point, lo, hi = paired_speedup(ratios)
    predicted = (theory.predicted_speedup_with_coverage(alpha_token, k, c_model, baseline.verify, coverage)
                 if np.isfinite(c_model) else math.nan)
    # 01's search with the same coverage: n-gram lookup that drafts on few steps must not get the per-drafted-step
    # gain of a long k
    with_coverage = partial(theory.predicted_speedup_with_coverage, coverage=coverage)
    best_k, best_pred = (rules.best_k(alpha_token, c_model, lambda g: baseline.verify(g + 1), max_k, with_coverage)
                         if np.isfinite(c_model) else (k, math.nan))
    flagged = table[table["flagged"]]
    # a workload's speedup: what its users wait for in all, total baseline time over total speculative time
    total, total_lo, total_hi = bootstrap_ratio_ci(kept["baseline_e2e_s"], kept["e2e_s"], min_n=MIN_VALUES_FOR_INTERVAL)
    # pandas' median, min and max skip NaN and give NaN for no values
    verify_next = float(table["verify_k_plus_1"].median())
    described = kept if len(kept) else table  # the decomposition's pairs: the kept ones (all where none was, as c)
    return {"candidate": candidate, "k": k, "acceptance_rate": pooled["acceptance_rate"],
            "mean_acceptance_length": mal, "per_position": analysis.per_position(spec),
            "alpha_per_token": alpha_token, "c": c_model, "c_in_server": c_in_server, "coverage": coverage,
            "verify_cost_k_plus_1": baseline.verify(k + 1),  # what the prediction used; c used verify_next_to_pairs
            "predicted_decode_speedup": predicted, "measured_decode_speedup": float(kept["decode_speedup"].median()),
            "decode_speedup_min": float(kept["decode_speedup"].min()),
            "decode_speedup_max": float(kept["decode_speedup"].max()), "measured_speedup": point,
            "speedup_ci_low": lo, "speedup_ci_high": hi, "n_pairs": int(len(ratios)),
            "speedup_min": float(ratios.min()), "speedup_max": float(ratios.max()),
            "total_time_speedup": total, "total_time_ci_low": total_lo, "total_time_ci_high": total_hi,
            "decode_spread_engine": relative_spread(kept["decode_speedup"]),
            "decode_spread_client": relative_spread(kept["decode_speedup_client"]),
            "n_flagged": int(len(flagged)),
            "flagged": [f"{r.prompt_id}: {r.decode_speedup:.2f}x decode (bound {r.decode_bound:.2f}x), "
                        f"{r.speedup:.2f}x end to end (bound {r.e2e_bound:.2f}x), "
                        f"time to first token {r.ttft_speedup:.2f}x"
                        for r in flagged.itertuples()],
            "method": str(spec["method"].iloc[0]) if "method" in spec and len(spec) else "",
            "tokens_per_step": float(described["tokens_per_step"].median()),
            "time_per_step": float(described["step_ratio"].median()),
            "plain_step_ratio": float(table["plain_step_ratio_pair"].median()),
            "plain_step_ratio_n": int(table["plain_step_ratio_pair"].notna().sum()),
            "ttft_speedup": float(table["ttft_speedup"].median()), "verify_next_to_pairs": verify_next,
            "design": str(rows["design"].iloc[0]) if "design" in rows and len(rows) else "",
            "drift": sandwich_drift(rows) if "design" in rows else math.nan,
            "best_k": best_k, "predicted_speedup_at_best_k": best_pred}


def draft_steps(draft_dirs: dict[str, Path], target_dir: Path, server_options: dict[str, Any]) -> dict[str, float]:
    """Each draft model's decode step, served alone (c's numerator as the papers time it: a separate model with its own
    per-step overhead); not the target itself (a self-draft has c = 1)."""
    steps = {}
    for name, path in draft_dirs.items():
        if Path(path).resolve() != Path(target_dir).resolve():
            with VLLMServer(path, name="draft-alone", **server_options) as server:
                warm_up(server)
                steps[name] = decode_step_seconds(server)
    return steps


def aa_control(baseline: Baseline, prompts: Sequence, *, max_tokens: int, provenance: dict,
               server_options: dict[str, Any]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Two identical baseline servers measured with the candidates' paired design (ABBA, one request at a time): the
    ratio between them is what two servers differ by when nothing differs but the server, the noise floor a
    candidate's speedup is read against. Returns the rows and one row per ratio (decode, end to end, time to first
    token, one-token steps) with its median, 95% interval (from ``MIN_VALUES_FOR_INTERVAL`` pairs) and range."""
    # the second baseline: the same target and settings, another server (its own process and cache); it must not be
    # the pool's shared baseline (the same command line): a marker in its environment
    replica = VLLMServer(Path(baseline.server.model), name="baseline-replica",
                         extra_env={"SPECDEC_ROLE": "A/A control replica"}, **server_options)
    rows = measure_paired(baseline.server, [replica], prompts, together=True, temperature=0.0, repeats=1,
                          max_tokens=max_tokens, provenance=provenance)
    table = pair_table(rows, replace(baseline, ttft_noise=math.nan, decode_noise=math.nan, judge_ttft=False), 1)
    ratios = {"decode (engine)": table["decode_speedup"], "end to end": table["speedup"],
              "time to first token": table["ttft_speedup"], "one-token step": table["plain_step_ratio_pair"]}
    summary = []
    for what, values in ratios.items():
        values = values.dropna()
        point, low, high = paired_speedup(values) if len(values) else (math.nan,) * 3
        summary.append({"ratio": what, "pairs": len(values), "median": point, "ci_low": low, "ci_high": high,
                        "min": float(values.min()) if len(values) else math.nan,
                        "max": float(values.max()) if len(values) else math.nan})
    summary = pd.DataFrame(summary)
    baseline.decode_noise, baseline.ttft_noise = _worst_ratios(summary)
    baseline.judge_ttft = True
    return rows, summary


def _worst_ratios(summary: pd.DataFrame) -> tuple[float, float]:
    """Two identical servers' worst decode and time-to-first-token ratios, either way from 1 (NaN when missing)."""
    by = summary.set_index("ratio")
    worst = [max(by.at[r, "max"], 1 / by.at[r, "min"]) if r in by.index and by.at[r, "min"] > 0 else math.nan
             for r in ("decode (engine)", "time to first token")]
    return tuple(float(w) if np.isfinite(w) else math.nan for w in worst)


def noise_from_04(baseline: Baseline, run_dir: str | Path, target_model: str) -> str:
    """Give the physics guard of a notebook that runs no A/A control of its own (05, 06, 07) notebook 04's, from the
    same run folder and target, as allowances on both bounds (not as a time-to-first-token check: ``judge_ttft``);
    without it the guard allows no noise between two servers. Returns the line the notebook prints."""
    aa, where = from_notebook_04(run_dir, "aa_control")
    found, _ = find_recommendation(run_dir)  # it names the target 04 measured on
    if not aa or found is None or found.get("target_model") != target_model:
        why = where if not aa else f"notebook 04's A/A control ({where}) was not measured on {target_model}"
        return f"the physics guard allows no noise between two servers: {why}"
    baseline.decode_noise, baseline.ttft_noise = _worst_ratios(pd.DataFrame(aa))
    return (f"the physics guard allows two identical servers' worst ratios in notebook 04's A/A control ({where}): "
            f"decode {baseline.decode_noise:.2f}x, time to first token {baseline.ttft_noise:.2f}x")
