"""Turn measured numbers into a decision, with its reasons in plain words. The rule is notebook 07's (where a
reader can change it): ``decide`` calls it once per condition to say which held, and once for the verdict."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable

from specdec_helpers.stats import MIN_VALUES_FOR_INTERVAL

#: rule(speedup_ci_low, predicted_at_concurrency, fits) -> enable?
Rule = Callable[[float, float, bool], bool]

#: a gain smaller than this is not worth a second model, its memory and its start-up (notebooks' ``min_gain``)
MIN_GAIN = 0.05
FASTER, SMALL_GAIN, NOT_DISTINGUISHABLE, SLOWER = ("faster", "faster, but by less than min_gain",
                                                  "not distinguishable from 1x", "slower")


def speedup_reading(point: float, low: float, high: float, n: int, min_gain: float = MIN_GAIN) -> str:
    """The series' one rule from a measured speedup (the median over n prompts, with its 95% interval) to words.
    Notebook 04 shows it; 05 and 07 apply it. Only FASTER means "enable it".

    - no interval (fewer than ``stats.MIN_VALUES_FOR_INTERVAL`` prompts): no verdict, only the range;
    - the whole interval above 1 + min_gain: FASTER;
    - the whole interval below 1: SLOWER;
    - above 1 but not by min_gain: SMALL_GAIN (real, yet not worth a second model);
    - otherwise the run cannot tell it from 1x: NOT_DISTINGUISHABLE."""
    if not math.isfinite(point):
        return "not measured"
    if n < MIN_VALUES_FOR_INTERVAL or not (math.isfinite(low) and math.isfinite(high)):
        return f"no verdict: {n} prompt(s), an interval needs {MIN_VALUES_FOR_INTERVAL}"
    if low > 1.0 + min_gain:
        return FASTER
    if high < 1.0:
        return SLOWER
    if low > 1.0:
        return SMALL_GAIN
    return NOT_DISTINGUISHABLE


def decision_side(speedup: float, min_gain: float = MIN_GAIN) -> str:
    """The side of the rule's thresholds a speedup lies on, without its interval (a run's point vs a reference's)."""
    return "a loss" if speedup < 1.0 else "a gain too small" if speedup <= 1.0 + min_gain else "a gain"


def interval_text(point: float, low: float, high: float, n: int, lowest: float, highest: float) -> str:
    """How a speedup is written: with its 95% interval where there is one, else as the range of its n values."""
    if math.isfinite(low) and math.isfinite(high):
        return f"{point:.2f}x (95% interval {low:.2f}-{high:.2f}, {n} prompts)"
    return f"{point:.2f}x (range of {n} prompt(s): {lowest:.2f}-{highest:.2f}; too few for an interval)"


@dataclass
class Verdict:
    enable: bool
    candidate: str
    k: int
    expected_gain: float
    reasons: list[str] = field(default_factory=list)
    questions: dict[str, str] = field(default_factory=dict)

    def headline(self) -> str:
        if self.enable:
            return (f"Enable speculative decoding with {self.candidate}, num_speculative_tokens={self.k}: "
                    f"expect about {self.expected_gain:.2f}x end to end on this workload and hardware.")
        return (f"Do not enable speculative decoding for this workload on this hardware: the best candidate "
                f"({self.candidate}) measured {self.expected_gain:.2f}x.")

    def as_markdown(self) -> str:
        lines = [f"**{self.headline()}**", "", "Reasons:"] + [f"- {r}" for r in self.reasons]
        lines += ["", "The talk's four questions, answered from the measurements:"]
        lines += [f"- *{q}* {a}" for q, a in self.questions.items()]
        return "\n".join(lines)


def decide(best: dict[str, Any], *, rule: Rule, min_gain: float, by_class: dict[str, dict[str, Any]],
           concurrency: int, predicted_at_concurrency: float, memory: dict[str, Any] | None) -> Verdict:
    """``best``: the best candidate's ``evaluate.summarize_candidate`` on all prompts, ``by_class`` per prompt class;
    ``memory``: the draft's budget cost (None on a CPU); ``min_gain``: the margin ``rule`` uses, for the words."""
    gain, low = best["measured_speedup"], best["speedup_ci_low"]
    fits = memory.get("fits", True) if memory else True
    clear_gain = bool(rule(low, math.inf, True))  # each condition alone: the others set to pass
    measured = interval_text(gain, low, best["speedup_ci_high"], best.get("n_pairs", 0),
                             best.get("speedup_min", math.nan), best.get("speedup_max", math.nan))
    reasons = [f"Measured end-to-end speedup {measured}; "
               + ("clearly above 1." if clear_gain else
                  f"not clearly above 1 + {min_gain:.0%}." if math.isfinite(low) else "so no verdict from it.")]
    coverage = best.get("coverage", 1.0)
    coverage_text = (f", a draft on {coverage:.0%} of decode steps (coverage f; the other steps are plain decode steps)"
                     if coverage == coverage and coverage < 0.995 else "")
    reasons.append(
        f"Acceptance {best['acceptance_rate']:.0%} (mean {best['mean_acceptance_length']:.2f} tokens per target pass), "
        f"draft cost c = {best['c']:.2f} of a target step, verifying k = {best['k']} drafted tokens costs "
        f"{best['verify_cost_k_plus_1']:.2f} steps{coverage_text}: the cost model predicts "
        f"{best['predicted_decode_speedup']:.2f}x decode speed (measured {best['measured_decode_speedup']:.2f}x).")
    busy_ok = bool(rule(math.inf, predicted_at_concurrency, True))
    busy_text = ("." if busy_ok else ": with that many sequences in flight, verification is no longer free."
                 if concurrency > 1 else
                 ": even a single request gains nothing with this draft's acceptance and cost here.")
    reasons.append(f"At the expected concurrency ({concurrency}) the cost model predicts "
                   f"{predicted_at_concurrency:.2f}x{busy_text}")
    if memory:
        reasons.append(memory["text"])
    if best["best_k"] != best["k"]:
        at_coverage = f" at the measured coverage of {coverage:.0%}" if coverage_text else ""
        reasons.append(f"The cost model's best num_speculative_tokens here is {best['best_k']} (predicted "
                       f"{best['predicted_speedup_at_best_k']:.2f}x decode{at_coverage}) rather than {best['k']}.")
    enable = bool(rule(low, predicted_at_concurrency, fits))

    questions = {}
    structured, creative = by_class.get("structured"), by_class.get("creative")
    if structured:
        questions["Is it highly structured?"] = (
            f"On the structured prompts acceptance is {structured['acceptance_rate']:.0%} and the speedup "
            f"{structured['measured_speedup']:.2f}x.")
    if creative:
        questions["Are you doing more creative scenarios?"] = (
            f"On the creative prompts acceptance is {creative['acceptance_rate']:.0%} and the speedup "
            f"{creative['measured_speedup']:.2f}x"
            + (f" (vs {structured['measured_speedup']:.2f}x structured)." if structured else "."))
    questions["Do you have enough VRAM space to even consider it?"] = (
        memory["text"] if memory else "On a CPU the draft lives in system memory; see notebook 03 for GPU budgets.")
    questions["Are you running a lot of concurrency?"] = (
        f"At {concurrency} concurrent request(s) the model predicts {predicted_at_concurrency:.2f}x; notebook 06 "
        "measures where the gain disappears on this hardware.")
    return Verdict(enable=enable, candidate=best["candidate"], k=best["k"] if enable else best["best_k"],
                   expected_gain=gain, reasons=reasons, questions=questions)
