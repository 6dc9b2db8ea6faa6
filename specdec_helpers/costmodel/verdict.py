"""Turn measured numbers into a decision, with its reasons in plain words.

The rules are deliberately few and visible, so a reader can disagree with one and change it:

* enable only if the measured end-to-end speedup's 95% interval lies above 1 + ``min_gain``
  (a gain you cannot distinguish from noise is not worth a second model);
* and only if the cost model, at the expected concurrency, still predicts a gain;
* and only if the draft and its KV cache fit (the memory budget leaves at least one sequence).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


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


def decide(best: dict[str, Any], *, by_class: dict[str, dict[str, Any]], concurrency: int,
           predicted_at_concurrency: float, memory: dict[str, Any] | None, min_gain: float = 0.05) -> Verdict:
    """``best``: the summary (``evaluate.summarize_candidate``) of the best candidate on all prompts;
    ``by_class``: the same per prompt class; ``memory``: the draft's budget cost (or None on a CPU)."""
    gain, low = best["measured_speedup"], best["speedup_ci_low"]
    reasons = []
    clear_gain = low == low and low > 1.0 + min_gain  # NaN-safe: NaN never passes
    reasons.append(
        f"Measured end-to-end speedup {gain:.2f}x (95% interval {best['speedup_ci_low']:.2f}-{best['speedup_ci_high']:.2f}); "
        + ("clearly above 1." if clear_gain else f"not clearly above 1 + {min_gain:.0%}."))
    coverage = best.get("coverage", 1.0)
    coverage_text = (f", a draft on {coverage:.0%} of decode steps (coverage f; the other steps are plain decode steps)"
                     if coverage == coverage and coverage < 0.995 else "")
    reasons.append(
        f"Acceptance {best['acceptance_rate']:.0%} (mean {best['mean_acceptance_length']:.2f} tokens per target pass), "
        f"draft cost c = {best['c']:.2f} of a target step, verifying k = {best['k']} drafted tokens costs "
        f"{best['verify_cost_k_plus_1']:.2f} steps{coverage_text}: the cost model predicts "
        f"{best['predicted_decode_speedup']:.2f}x decode speed (measured {best['measured_decode_speedup']:.2f}x).")
    busy_ok = predicted_at_concurrency > 1.0 + min_gain
    if busy_ok:
        busy_text = "."
    elif concurrency > 1:
        busy_text = ": with that many sequences in flight, verification is no longer free."
    else:
        busy_text = ": even a single request gains nothing with this draft's acceptance and cost here."
    reasons.append(f"At the expected concurrency ({concurrency}) the cost model predicts "
                   f"{predicted_at_concurrency:.2f}x{busy_text}")
    fits = True
    if memory:
        fits = memory.get("fits", True)
        reasons.append(memory["text"])
    if best["best_k"] != best["k"]:
        at_coverage = f" at the measured coverage of {coverage:.0%}" if coverage_text else ""
        reasons.append(f"The cost model's best num_speculative_tokens here is {best['best_k']} "
                       f"(predicted {best['predicted_speedup_at_best_k']:.2f}x decode{at_coverage}) rather than {best['k']}.")
    enable = bool(clear_gain and busy_ok and fits)

    questions = {}
    structured, creative = by_class.get("structured"), by_class.get("creative")
    if structured:
        questions["Is it highly structured?"] = (
            f"On the structured prompts acceptance is {structured['acceptance_rate']:.0%} and the speedup "
            f"{structured['measured_speedup']:.2f}x.")
    if creative:
        questions["Are you doing more creative scenarios?"] = (
            f"On the creative prompts acceptance is {creative['acceptance_rate']:.0%} and the speedup "
            f"{creative['measured_speedup']:.2f}x" + (f" (vs {structured['measured_speedup']:.2f}x structured)." if structured else "."))
    questions["Do you have enough VRAM space to even consider it?"] = (
        memory["text"] if memory else "On a CPU the draft lives in system memory; see notebook 03 for GPU budgets.")
    questions["Are you running a lot of concurrency?"] = (
        f"At {concurrency} concurrent request(s) the model predicts {predicted_at_concurrency:.2f}x; notebook 06 "
        "measures where the gain disappears on this hardware.")
    k = best["k"] if enable else best["best_k"]
    return Verdict(enable=enable, candidate=best["candidate"], k=k, expected_gain=gain, reasons=reasons,
                   questions=questions)
