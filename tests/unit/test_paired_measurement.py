"""The series' one way to measure a speedup (measure.paired, measure.evaluate): pairs in ABBA order, a sandwich's
drift, the in-server c and the physics guard, on rows of the shape measure_prompts records."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from specdec_helpers.costmodel import analysis, rules, theory
from specdec_helpers.measure import evaluate
from specdec_helpers.measure.paired import INTERLEAVED, SANDWICH, sandwich_drift
from specdec_helpers.measure.requests import interleaved_order

K = 4
VERIFY = theory.VerifyCost({1: 1.0, 2: 1.1, 5: 1.5, 8: 2.0})
VERIFY_LOW = theory.VerifyCost({1: 1.0, 2: 1.05, 5: 1.4, 8: 1.9})


def _baseline() -> evaluate.Baseline:
    return evaluate.Baseline(server=None, step_s=0.1, verify_summary=pd.DataFrame(), verify=VERIFY,
                             verify_low=VERIFY_LOW)


def _row(server: str, prompt: str, *, block: int, slot: int, sent_at: float, tokens: int, engine_decode_s: float,
         drafts: float = math.nan, accepted: float = math.nan, e2e_s: float | None = None) -> dict:
    """One request as measure_prompts records it (the columns the analysis reads)."""
    spec = server != "baseline"
    decode_client = engine_decode_s * 1.05
    e2e = e2e_s if e2e_s is not None else engine_decode_s + 0.2
    return {"server": server, "method": "draft_model" if spec else "none", "num_speculative_tokens": K if spec else 0,
            "served_format": "float32", "prompt_id": prompt, "class": "structured", "subcategory": "json",
            "repeat": 0, "block": block, "slot": slot, "sent_at": sent_at, "temperature": 0.0, "ttft_s": 0.2,
            "e2e_s": e2e, "decode_s": decode_client, "mean_itl_s": decode_client / (tokens - 1),
            "decode_tokens_per_s": (tokens - 1) / decode_client, "engine_prefill_s": 0.15,
            "engine_decode_s": engine_decode_s, "engine_decode_tokens_per_s": (tokens - 1) / engine_decode_s,
            "prompt_tokens": 40, "completion_tokens": tokens, "finish_reason": "length", "text": "x",
            **({"drafts": drafts, "draft_tokens": drafts * K, "accepted_tokens": accepted} if spec else {}),
            "design": INTERLEAVED, "sandwich": ""}


def _pair(prompt: str, block: int, *, spec_decode_s: float, drafts: int = 10, accepted: int = 30,
          base_decode_s: float = 4.0, tokens: int = 41) -> list[dict]:
    """A baseline request (0.1 s per token) and a speculative one on the same prompt, 41 tokens each."""
    t0 = 100.0 * block
    return [_row("baseline", prompt, block=block, slot=0, sent_at=t0, tokens=tokens, engine_decode_s=base_decode_s),
            _row("draft", prompt, block=block, slot=1, sent_at=t0 + 5, tokens=tokens, engine_decode_s=spec_decode_s,
                 drafts=drafts, accepted=accepted)]


def test_abba_order_alternates_which_server_goes_first():
    servers = ["baseline", "a", "b"]
    assert interleaved_order(servers, 0) == servers
    assert interleaved_order(servers, 1) == servers[::-1]
    assert interleaved_order(servers, 2) == servers


def test_c_from_step_runs_the_cost_model_backwards():
    for c, f in [(0.3, 1.0), (0.05, 0.4), (0.0, 1.0)]:
        v = VERIFY(K + 1)
        step = f * (K * c + v) + (1 - f)  # what the model says one speculative step costs, in baseline steps
        assert theory.c_from_step(step, K, v, f) == pytest.approx(c)
    assert math.isnan(theory.c_from_step(1.2, K, 1.5, 0.0))  # no drafted step: nothing to learn


def test_pair_table_applies_the_stated_formulas_to_the_recorded_times():
    # 40 decoded tokens in 10 drafted steps (1 + 3 accepted each), no plain step: f = 1
    rows = pd.DataFrame(_pair("p1", 0, spec_decode_s=2.5))
    table = evaluate.pair_table(rows, _baseline(), K)
    r = table.iloc[0]
    base_step = 4.0 / 40
    assert r["steps"] == 10 and r["coverage"] == 1.0 and r["tokens_per_step"] == 4.0
    assert r["step_ratio"] == pytest.approx(2.5 / 10 / base_step)
    assert r["c_in_server"] == pytest.approx((2.5 / 10 / base_step - VERIFY(K + 1)) / K)
    assert r["decode_speedup"] == pytest.approx(4.0 / 2.5)
    assert r["decode_bound"] == pytest.approx(4.0 / VERIFY_LOW(K + 1))
    assert r["seconds_apart"] == 5.0 and not r["flagged"]


def test_the_guard_flags_a_pair_above_the_physics_bound_and_leaves_the_others():
    # p2's speculative request decoded 4 tokens per step in less time than verifying alone allows (4 / 1.4 = 2.86x)
    rows = pd.DataFrame(_pair("p1", 0, spec_decode_s=2.5) + _pair("p2", 1, spec_decode_s=1.2)
                        + _pair("p3", 2, spec_decode_s=2.7))
    table = evaluate.pair_table(rows, _baseline(), K)
    assert table.set_index("prompt_id")["flagged"].to_dict() == {"p1": False, "p2": True, "p3": False}
    assert table.loc[table["flagged"], "c_in_server"].iloc[0] < 0  # the same statement: a step cheaper than verifying
    summary = evaluate.summarize_candidate("draft", rows, _baseline(), k=K, max_k=8)
    assert summary["n_flagged"] == 1 and summary["flagged"][0].startswith("p2:")
    assert summary["n_pairs"] == 2  # the flagged pair is in no statistic
    kept = table[~table["flagged"]]
    assert summary["measured_decode_speedup"] == pytest.approx(kept["decode_speedup"].median())
    assert summary["decode_speedup_max"] == pytest.approx(kept["decode_speedup"].max())
    assert summary["c_in_server"] == pytest.approx(kept["c_in_server"].median())  # c from the kept pairs only
    assert summary["total_time_speedup"] == pytest.approx(kept["baseline_e2e_s"].sum() / kept["e2e_s"].sum())
    # the decomposition reads the same kept pairs as the speedup it decomposes
    assert summary["tokens_per_step"] == pytest.approx(kept["tokens_per_step"].median())
    assert summary["time_per_step"] == pytest.approx(kept["step_ratio"].median())
    assert summary["time_per_step"] != pytest.approx(table["step_ratio"].median())  # the flagged pair would move it
    # the v(k + 1) shown next to the prediction is the one the prediction used: the baseline's
    assert summary["verify_cost_k_plus_1"] == pytest.approx(VERIFY(K + 1))


def test_a_class_prediction_uses_the_c_it_is_given_not_its_own_timings():
    rows = pd.DataFrame(_pair("p1", 0, spec_decode_s=2.5) + _pair("p2", 1, spec_decode_s=2.9))
    mine = evaluate.summarize_candidate("draft", rows, _baseline(), k=K, max_k=8)
    given = evaluate.summarize_candidate("draft", rows, _baseline(), k=K, max_k=8, c=0.5)
    assert given["c"] == 0.5 and mine["c"] == pytest.approx(max(mine["c_in_server"], 0.0))
    assert given["predicted_decode_speedup"] == pytest.approx(
        theory.predicted_speedup_with_coverage(given["alpha_per_token"], K, 0.5, VERIFY, given["coverage"]))


def test_the_best_k_of_04_and_07_is_01s_rule(monkeypatch):
    """summarize_candidate (04, 07) searches k with notebook 01's exported best_k, over the prediction with the
    candidate's coverage: an edit of that rule changes every best k that follows (no second copy)."""
    rows = pd.DataFrame(_pair("p1", 0, spec_decode_s=2.5) + _pair("p2", 1, spec_decode_s=2.9))
    summary = evaluate.summarize_candidate("draft", rows, _baseline(), k=K, max_k=8)
    searched = [theory.predicted_speedup_with_coverage(summary["alpha_per_token"], g, summary["c"], VERIFY,
                                                       summary["coverage"]) for g in range(1, 9)]
    assert summary["predicted_speedup_at_best_k"] == pytest.approx(max(1.0, *searched))
    monkeypatch.setattr(rules, "best_k", lambda *args, **kwargs: (3, 9.9))
    edited = evaluate.summarize_candidate("draft", rows, _baseline(), k=K, max_k=8)
    assert (edited["best_k"], edited["predicted_speedup_at_best_k"]) == (3, 9.9)


def test_a_proposer_that_never_drafted_costs_nothing_and_is_predicted_at_plain_speed():
    """A lookup that found nothing to copy on every prompt has no drafted step to learn c from: the model's c is 0
    (no drafting ran), so every prediction that follows is plain decoding, 1.0x, not a ValueError on a NaN c."""
    rows = pd.DataFrame(_pair("p1", 0, spec_decode_s=4.1, drafts=0, accepted=0) +
                        _pair("p2", 1, spec_decode_s=4.2, drafts=0, accepted=0))
    summary = evaluate.summarize_candidate("draft", rows, _baseline(), k=K, max_k=8)
    assert math.isnan(summary["c_in_server"]) and summary["coverage"] == 0 and summary["c"] == 0
    assert summary["predicted_decode_speedup"] == 1.0 and summary["best_k"] == 0
    assert rules.model_speedup(summary["alpha_per_token"], K, summary["c"], {1: 0.1, 5: 0.12}, 4,
                               summary["coverage"]) == 1.0


def test_a_sandwich_pairs_with_the_mean_of_its_baseline_blocks_and_reports_their_drift():
    before = _row("baseline", "p1", block=0, slot=0, sent_at=0, tokens=41, engine_decode_s=4.0, e2e_s=4.0)
    spec = _row("draft", "p1", block=0, slot=0, sent_at=60, tokens=41, engine_decode_s=2.5, drafts=10, accepted=30)
    after = _row("baseline", "p1", block=0, slot=0, sent_at=120, tokens=41, engine_decode_s=5.0, e2e_s=5.0)
    rows = pd.DataFrame([before | {"sandwich": "before"}, spec, after | {"sandwich": "after"}]).assign(design=SANDWICH)
    joined = analysis.paired(rows, ["e2e_s", "engine_decode_s"])
    assert len(joined) == 1 and joined["baseline_e2e_s"].iloc[0] == pytest.approx(4.5)
    assert sandwich_drift(rows) == pytest.approx((40 / 5.0) / (40 / 4.0))  # the baseline decoded 20% slower after
    assert math.isnan(sandwich_drift(pd.DataFrame(_pair("p1", 0, spec_decode_s=2.5))))


def test_draft_coverage_counts_steps_with_and_without_a_draft():
    # 41 tokens: 1 from prefill, 40 decoded. 6 drafted steps yield 1 + 3 accepted = 24 tokens; the other 16 came
    # one per plain step: f = 6 / (6 + 16)
    spec = pd.DataFrame(_pair("p1", 0, spec_decode_s=2.5, drafts=6, accepted=18)).query("server == 'draft'")
    assert rules.draft_coverage(spec) == pytest.approx(6 / 22)
    # two requests pool their steps; no drafts at all: coverage 0
    two = pd.concat([spec, spec.assign(drafts=10, accepted_tokens=30)])
    assert rules.draft_coverage(two) == pytest.approx((6 + 10) / (6 + 16 + 10))
    assert rules.draft_coverage(spec.assign(drafts=0, accepted_tokens=0)) == 0.0


def test_summarize_candidate_on_recorded_rows_matches_the_hand_computed_numbers():
    # eight prompts: spec decode 2.0 s against the baseline's 4.0 s, every step drafted with 3 of 4 accepted
    # (f = 1); one pair faster than its acceptance allows (decode 0.5 s: 8x > 4 / v_low(5)) is left out
    rows = [r for i in range(8) for r in _pair(f"p{i}", i, spec_decode_s=2.0)]
    rows += _pair("p8", 8, spec_decode_s=0.5)
    summary = evaluate.summarize_candidate("draft", pd.DataFrame(rows), _baseline(), k=K, max_k=8)
    assert summary["n_flagged"] == 1 and summary["flagged"][0].startswith("p8:")
    assert summary["n_pairs"] == 8 and summary["coverage"] == 1.0
    assert summary["acceptance_rate"] == pytest.approx(30 / 40)  # pooled over all nine requests
    assert summary["mean_acceptance_length"] == pytest.approx(4.0)
    assert summary["alpha_per_token"] == pytest.approx(theory.alpha_from_mean_acceptance_length(4.0, K))
    assert summary["measured_decode_speedup"] == pytest.approx(2.0)
    # end to end: (4.0 + 0.2) / (2.0 + 0.2) for each kept pair, and the same as the ratio of their totals
    assert summary["measured_speedup"] == pytest.approx(4.2 / 2.2)
    assert summary["total_time_speedup"] == pytest.approx(4.2 / 2.2)
    # the in-server c: one speculative step is 0.2 s against the baseline's 0.1 s, so (2.0 - v(5)) / 4
    c = (2.0 - VERIFY(K + 1)) / K
    assert summary["c_in_server"] == pytest.approx(c, rel=1e-6) and summary["c"] == pytest.approx(c, rel=1e-6)
    assert summary["predicted_decode_speedup"] == pytest.approx(
        theory.predicted_speedup_with_coverage(summary["alpha_per_token"], K, c, VERIFY, 1.0))
    # a class's summary reads only that class's rows, with the c it is given (not fitted to its own timings)
    assert evaluate.summarize_candidate("draft", pd.DataFrame(rows), _baseline(), k=K, max_k=8, by_class="creative",
                                        c=0.1)["n_pairs"] == 0


def _lookup_pair(prompt: str, block: int, *, spec_decode_s: float, plain_step_s: float, e2e_s: float | None = None):
    """A lookup's request: 4 drafted steps of 40 (1 accepted token each, f = 0.11), its one-token steps timed from the
    stream; the baseline's one-token steps 0.1 s."""
    base, spec = _pair(prompt, block, spec_decode_s=spec_decode_s, drafts=4, accepted=4)
    base |= {"one_token_steps": 40, "one_token_step_s": 0.1}
    spec |= {"one_token_steps": 32, "one_token_step_s": plain_step_s, "method": "ngram"}
    if e2e_s is not None:
        spec["e2e_s"] = e2e_s
    return [base, spec]


def test_a_slower_configuration_is_measured_apart_from_speculation_and_never_flags_an_honest_slow_pair():
    """n-gram's plain steps ran ~1.3x the baseline's on an AMD EPYC: that is the configuration's cost (u), divided
    out of c, and it must not tighten the physics bound (a noisy u > 1 flagged honest pairs at 0.92x)."""
    rows = pd.DataFrame(sum((_lookup_pair(f"p{i}", i, spec_decode_s=4.3, plain_step_s=0.13) for i in range(4)), []))
    table = evaluate.pair_table(rows, _baseline(), K)
    assert table["plain_step_ratio"].iloc[0] == pytest.approx(1.3) and not table["flagged"].any()
    # the bound is the free-drafting one: tokens per step over (f * v_low(k+1) + 1 - f), u > 1 not applied
    f = 4 / 36
    assert table["decode_bound"].iloc[0] == pytest.approx((40 / 36) / (f * VERIFY_LOW(K + 1) + 1 - f))
    # c with u divided out: the step ratio over u, run backwards through the cost model
    step_ratio = (4.3 / 36) / 0.1
    assert table["c_in_server"].iloc[0] == pytest.approx(theory.c_from_step(step_ratio / 1.3, K, VERIFY(K + 1), f))


def test_an_end_to_end_speedup_above_what_decoding_allows_is_flagged():
    # decode 0.98x (allowed), but end to end 1.3x: prefill is the same work on both servers, so that is noise
    rows = pd.DataFrame(_lookup_pair("p0", 0, spec_decode_s=4.08, plain_step_s=0.1, e2e_s=3.3)
                        + _lookup_pair("p1", 1, spec_decode_s=4.08, plain_step_s=0.1))
    table = evaluate.pair_table(rows, _baseline(), K).set_index("prompt_id")
    assert table.loc["p0", "flagged"] and table.loc["p0", "flag_reason"] == "end to end above bound"
    assert not table.loc["p1", "flagged"] and table.loc["p1", "flag_reason"] == ""


def _with_prefill(pair: list[dict], baseline_ttft_s: float) -> list[dict]:
    """The pair with the baseline request's prefill slower by chance: its time to first token and end to end grow."""
    base, spec = pair
    extra = baseline_ttft_s - base["ttft_s"]
    return [base | {"ttft_s": baseline_ttft_s, "e2e_s": base["e2e_s"] + extra}, spec]


def test_an_end_to_end_gain_from_a_slow_baseline_prefill_is_flagged_even_below_the_decode_bound():
    """Prefill is the same work on both servers, so end to end a pair reaches at most (T + D) / (T + D / bound): the
    baseline's prefill took 3 s by chance here, which made a 1.6x decode look 2.6x end to end (under the decode bound
    of 2.86x, so max(bound, 1) let it through)."""
    rows = pd.DataFrame(_with_prefill(_pair("p0", 0, spec_decode_s=2.5), 3.0) + _pair("p1", 1, spec_decode_s=2.5))
    table = evaluate.pair_table(rows, _baseline(), K).set_index("prompt_id")
    bound = 4.0 / VERIFY_LOW(K + 1)
    assert table.loc["p0", "speedup"] < table.loc["p0", "decode_bound"] == pytest.approx(bound)
    assert table.loc["p0", "e2e_bound"] == pytest.approx((3.0 + 4.0) / (3.0 + 4.0 / bound))
    assert table.loc["p0", "flagged"] and table.loc["p0", "flag_reason"] == "end to end above bound"
    assert table.loc["p1", "e2e_bound"] == pytest.approx((0.2 + 4.0) / (0.2 + 4.0 / bound))
    assert not table.loc["p1", "flagged"]


def test_a_time_to_first_token_ratio_beyond_the_a_a_scatter_is_flagged_once_the_a_a_control_ran():
    # the baseline's prefill 0.5 s against the candidate's 0.2 s (2.5x), end to end still within its bound
    rows = pd.DataFrame(_with_prefill(_pair("p0", 0, spec_decode_s=2.5), 0.5) + _pair("p1", 1, spec_decode_s=2.5))
    unjudged = evaluate.pair_table(rows, _baseline(), K).set_index("prompt_id")
    assert unjudged.loc["p0", "ttft_speedup"] == pytest.approx(2.5) and not unjudged["flagged"].any()
    armed = _baseline()
    armed.ttft_noise = 1.5  # two identical servers strayed by at most 1.5x
    assert not evaluate.pair_table(rows, armed, K)["flagged"].any()  # an allowance only, as 05-07 take 04's
    armed.judge_ttft = True  # the A/A control ran next to these pairs (04)
    table = evaluate.pair_table(rows, armed, K).set_index("prompt_id")
    assert table.loc["p0", "flagged"] and table.loc["p0", "flag_reason"] == "time to first token above the A/A scatter"
    assert not table.loc["p1", "flagged"]


def test_the_a_a_control_widens_both_bounds_by_how_far_two_identical_servers_differed():
    # 40 tokens in 10 drafted steps: the bound is 4 / v_low(k + 1); this pair's decode speedup is 10% above it
    bound = 4.0 / VERIFY_LOW(K + 1)
    rows = pd.DataFrame(_pair("p0", 0, spec_decode_s=4.0 / (bound * 1.1)))
    assert evaluate.pair_table(rows, _baseline(), K).iloc[0]["flagged"]  # no A/A control: no allowance
    armed = _baseline()
    armed.decode_noise, armed.ttft_noise = 1.25, 1.2  # two identical servers' worst decode and prefill ratios
    r = evaluate.pair_table(rows, armed, K).iloc[0]
    assert r["decode_bound"] == pytest.approx(bound * 1.25) and not r["flagged"]
    prefill, decode_s = 0.2, 4.0  # the baseline request's time to first token and decode time
    assert r["e2e_bound"] == pytest.approx((prefill + decode_s) / (prefill / 1.2 + decode_s / (bound * 1.25)))


def test_notebooks_after_04_take_its_a_a_control_from_the_same_run_and_target(tmp_path):
    import json

    from specdec_helpers.report.record import records_file

    baseline = _baseline()
    assert "allows no noise" in evaluate.noise_from_04(baseline, tmp_path, "t")  # 04 has not run here
    assert math.isnan(baseline.decode_noise) and math.isnan(baseline.ttft_noise)
    path = records_file(tmp_path, "04_choosing_a_draft")
    path.parent.mkdir(parents=True)
    aa = [{"ratio": "decode (engine)", "min": 0.8, "max": 1.1}, {"ratio": "end to end", "min": 0.5, "max": 2.0},
          {"ratio": "time to first token", "min": 0.9, "max": 1.3}]
    path.write_text(json.dumps({"records": {"aa_control": aa, "recommendation": {"candidate": None, "target_model": "t"}}}))
    assert "not measured on other" in evaluate.noise_from_04(baseline, tmp_path, "other")
    assert math.isnan(baseline.decode_noise)
    line = evaluate.noise_from_04(baseline, tmp_path, "t")
    assert baseline.decode_noise == pytest.approx(1.25) and baseline.ttft_noise == pytest.approx(1.3)
    assert not baseline.judge_ttft  # allowances on the bounds, not a time-to-first-token check of their own
    assert "decode 1.25x" in line and "time to first token 1.30x" in line


def test_a_measured_request_waits_while_another_servers_worker_is_still_busy(monkeypatch):
    """vLLM's worker keeps a core for WORKER_BUSY_LOOP_S after its last answer: a measurement on another CPU server
    waits out the rest of it and then notes its own end; one on the same server, one long after and one on a GPU
    server wait nothing."""
    from types import SimpleNamespace

    from specdec_helpers.measure import requests

    slept: list[float] = []
    monkeypatch.setattr(requests.time, "sleep", slept.append)
    now = requests.time.monotonic()
    monkeypatch.setattr(requests, "_last_answer", {"127.0.0.1:8002": now - 5.0})

    def measure(port: int, on_cpu: bool = True) -> float:
        with requests.alone_on_cpu(SimpleNamespace(on_cpu=on_cpu, base_url=f"http://127.0.0.1:{port}")) as waited:
            return waited

    assert measure(8001) == 0.0 and not slept  # the other server answered long ago
    waited = measure(8002)  # 8001's worker has just finished: wait out its busy loop
    assert slept == [waited] and requests.WORKER_BUSY_LOOP_S - 0.05 < waited <= requests.WORKER_BUSY_LOOP_S
    assert requests._last_answer["127.0.0.1:8002"] >= now  # noted: the next measurement elsewhere waits for it
    assert measure(8001, on_cpu=False) == 0.0 and len(slept) == 1  # a GPU server's host has cores to spare
    requests._last_answer = {"127.0.0.1:8001": requests.time.monotonic()}
    assert measure(8001) == 0.0 and len(slept) == 1  # the last answer was its own
