"""The decision rules the notebooks define in plain sight (so a learner can read and change them). Each is marked
``#@save`` in its notebook cell and exported by ``make rules`` to :mod:`specdec_helpers.costmodel.rules`, which the
tests here call: a rule edited in a notebook (and exported, tests/unit/test_rules_export.py) is the rule tested."""

from __future__ import annotations

import ast
import json
import math
import re
from pathlib import Path

import nbformat
import numpy as np
import pytest

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"


@pytest.mark.parametrize("point, lo, hi, n, reading", [
    (1.4, 1.2, 1.5, 8, "faster"), (0.8, 0.7, 0.9, 8, "slower"), (1.1, 0.9, 1.3, 12, "not distinguishable from 1x"),
    (1.08, 1.02, 1.12, 8, "faster, but by less than min_gain"),
    (1.6, 1.3, 1.9, 4, "no verdict: 4 prompt(s), an interval needs 8"),        # too few: never "faster"
    (1.2, float("nan"), float("nan"), 1, "no verdict: 1 prompt(s), an interval needs 8"),
    (float("nan"), 0, 0, 8, "not measured")])
def test_the_series_verdict_rule(point, lo, hi, n, reading):
    from specdec_helpers.costmodel.rules import speedup_reading

    assert speedup_reading(point, lo, hi, n, min_gain=0.05) == reading


def test_04_05_07_apply_the_series_rule_with_their_min_gain_parameter():
    for notebook in ("04_choosing_a_draft.ipynb", "05_structured_vs_creative.ipynb", "07_is_it_worth_it.ipynb"):
        nb = nbformat.read(NOTEBOOKS / notebook, as_version=4)
        code = "\n".join(c.source for c in nb.cells if c.cell_type == "code")
        assert "min_gain: float = 0.05" in code, notebook
        defines = code.count("def speedup_reading")  # 04 defines the rule; the others call the helper
        assert defines == (notebook.startswith("04")), f"{notebook} defines the verdict rule {defines} time(s)"
    assert "speedup_reading(" in "\n".join(c.source for c in nbformat.read(
        NOTEBOOKS / "05_structured_vs_creative.ipynb", as_version=4).cells)


def test_06_reads_its_levels_by_the_series_rule_not_by_its_own_threshold():
    """06 has one throughput per level, no interval: it reads each level's side of the shared rule
    (verdict.decision_side with its min_gain) and compares no speedup with a threshold of its own."""
    nb = nbformat.read(NOTEBOOKS / "06_context_and_concurrency.ipynb", as_version=4)
    code = "\n".join(c.source for c in nb.cells if c.cell_type == "code")
    assert "min_gain: float = 0.05" in code and "decision_side(" in code
    own = re.compile(r"(speedup|end_to_end)[\w\"'\][.()-]*\s*(<|>|<=|>=)\s*1(\.0)?\b")
    for notebook in ("04_choosing_a_draft.ipynb", "05_structured_vs_creative.ipynb", "06_context_and_concurrency.ipynb",
                     "07_is_it_worth_it.ipynb"):
        cells = nbformat.read(NOTEBOOKS / notebook, as_version=4).cells
        lines = [line for c in cells if c.cell_type == "code" for line in c.source.splitlines() if own.search(line)]
        assert all("MIN_GAIN" in line or "min_gain" in line for line in lines), (notebook, lines)


def test_no_interval_is_computed_from_fewer_than_eight_prompts():
    from specdec_helpers.stats import MIN_VALUES_FOR_INTERVAL, bootstrap_ci

    assert MIN_VALUES_FOR_INTERVAL == 8
    _, lo, hi = bootstrap_ci([1.1, 1.5, 1.3, 1.2, 1.4, 1.6, 1.35], min_n=MIN_VALUES_FOR_INTERVAL)
    assert math.isnan(lo) and math.isnan(hi)
    _, lo, hi = bootstrap_ci([1.1, 1.5, 1.3, 1.2, 1.4, 1.6, 1.35, 1.25], min_n=MIN_VALUES_FOR_INTERVAL)
    assert 1.1 <= lo <= hi <= 1.6


@pytest.mark.parametrize("low, predicted, fits, enable", [
    (1.20, 1.30, True, True),
    (1.04, 1.30, True, False),          # interval not clearly above 1 + MIN_GAIN
    (float("nan"), 1.30, True, False),  # no interval: never enable
    (1.20, 1.02, True, False),          # the cost model says the gain is gone at this concurrency
    (1.20, 1.30, False, False),         # the draft does not fit
])
def test_07_enable_rule(low, predicted, fits, enable):
    from specdec_helpers.costmodel import rules

    assert rules.MIN_GAIN == 0.05
    assert rules.enable_rule(low, predicted, fits) is enable


def test_07_verdict_explains_each_condition_with_the_notebooks_rule():
    from specdec_helpers.costmodel import rules

    decide = rules.decide
    best = {"candidate": "draft", "k": 4, "best_k": 4, "measured_speedup": 1.3, "speedup_ci_low": 1.2,
            "speedup_ci_high": 1.4, "acceptance_rate": 0.8, "mean_acceptance_length": 3.0, "c": 0.2,
            "verify_cost_k_plus_1": 1.1, "predicted_decode_speedup": 1.5, "measured_decode_speedup": 1.4,
            "predicted_speedup_at_best_k": 1.5}
    common = dict(rule=rules.enable_rule, min_gain=rules.MIN_GAIN, by_class={}, concurrency=4, memory=None)
    yes = decide(best, predicted_at_concurrency=1.3, **common)
    no = decide(best, predicted_at_concurrency=1.01, **common)
    assert yes.enable and not no.enable
    assert yes.reasons[0].endswith("; clearly above 1 + 5%.") and no.reasons[0].endswith("; clearly above 1 + 5%.")
    assert "verification is no longer free" in no.reasons[2]
    # the k reported is the k measured, yes or no; the cost model's other best k is a reason, not the answer
    other = decide({**best, "best_k": 2, "predicted_speedup_at_best_k": 1.6}, predicted_at_concurrency=1.01, **common)
    assert other.k == 4 and any("best num_speculative_tokens here is 2" in r for r in other.reasons)
    assert "Do not enable" in other.headline() and "Reasons:" in other.as_markdown()


@pytest.mark.parametrize("max_k", [8])
def test_04_and_07_search_best_k_up_to_the_same_max_k(max_k):
    from specdec_helpers.costmodel import rules

    assert rules.MAX_K == max_k  # 04 defines it; 07 imports it (one definition, no second constant)
    code = "\n".join(c.source for c in nbformat.read(NOTEBOOKS / "07_is_it_worth_it.ipynb", as_version=4).cells
                     if c.cell_type == "code")
    assert "import MAX_K" in code and "MAX_K =" not in code


def test_06_steady_state_window_keeps_only_the_gaps_where_all_streams_decode():
    from specdec_helpers.costmodel.rules import steady_state_window as window
    from specdec_helpers.measure.load import steady_state_gaps

    # stream A starts at 0 and steps every 1.0 s; stream B joins at 2.5 (before it, A decoded alone); both
    # end by 6.5. Window [2.5, 6.0]: A's gaps 3-4, 4-5, 5-6 and B's 2.5-3.5, 3.5-4.5, 4.5-5.5
    a = [0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0]
    b = [2.5, 3.5, 4.5, 5.5, 6.5]
    assert sorted(steady_state_gaps([a, b], window)) == [1.0] * 6
    assert steady_state_gaps([[0.0, 1.0, 2.0], [1.5]], window) == []
    assert steady_state_gaps([], window) == []


def test_07_times_decode_steps_with_the_window_of_06():
    """07 keeps no copy of 06's window: it imports the exported rule and passes it to decode_step_times."""
    from specdec_helpers.costmodel.rules import steady_state_window

    arrivals = [[0.0, 1.0, 2.0, 3.0], [0.5, 1.5, 2.5], [0.2, 4.0]]
    assert steady_state_window(arrivals) == (0.5, 2.5)
    nb = nbformat.read(NOTEBOOKS / "07_is_it_worth_it.ipynb", as_version=4)
    code = "\n".join(c.source for c in nb.cells if c.cell_type == "code")
    assert "def steady_state_window" not in code
    imports = [n for n in ast.walk(ast.parse(code)) if isinstance(n, ast.ImportFrom)
               and n.module == "specdec_helpers.costmodel.rules"]
    assert any(a.name == "steady_state_window" for n in imports for a in n.names)
    assert "window=steady_state_window" in code



# --- No measured figure typed into a notebook's prose ---------------------------------------------------------
#
# A finding the next run could contradict must come from a cell's output, never from markdown. So markdown
# (outside code spans and blocks) may hold no speedup, percentage, speed or run time, except the constants
# below: the talk's own rules, a confidence level, a tolerance the notebook sets, a hypothetical.
FIGURE = re.compile(r"\b\d+(?:\.\d+)?(?:\s?-\s?\d+(?:\.\d+)?)?\s?(?:x\b|%|\s?tok(?:ens)?/s\b|\s?min\b|\s?GiB\b|\s?ms\b)")
NOT_MEASURED = {"10-50x", "10x", "1x", "95%", "5%", "99%"}


def markdown_figures(source: str) -> list[str]:
    prose = re.sub(r"```.*?```", "", source, flags=re.S)
    prose = re.sub(r"`[^`]*`", "", prose)
    return [m.group().replace(" ", "") for m in FIGURE.finditer(prose) if m.group().replace(" ", "") not in NOT_MEASURED]


def test_markdown_states_no_measured_figure():
    found = {}
    for notebook in sorted((Path(__file__).parents[2] / "notebooks").glob("*.ipynb")):
        for cell in json.loads(notebook.read_text())["cells"]:
            if cell["cell_type"] == "markdown":
                figures = markdown_figures("".join(cell["source"]))
                if figures:
                    found[f"{notebook.name} cell {cell.get('id')}"] = figures
    assert not found, f"measured figures typed into markdown (print them from a cell instead): {found}"


def test_the_figure_check_catches_a_typed_speedup():
    assert markdown_figures("Structured output ran 1.33x faster at 91.6% acceptance, 5.9 tok/s, in 44.8 min.") == \
        ["1.33x", "91.6%", "5.9tok/s", "44.8min"]
    assert markdown_figures("The talk's rule: 10-50x smaller; a 95% interval; `print(f'{x:.2f}x')`.") == []


# --- No measured direction typed into a notebook's prose ------------------------------------------------------
#
# A figure is not the only finding: "the table shows speculation is faster" is one too, and the next run could
# contradict it. A sentence of markdown that speaks of what was measured (this run, the table, the plot, what
# we saw) and states a direction (faster, a loss, a crossover, identical, passed) is flagged, unless it is a
# rule's condition ("where this run measured a crossover, keep k"): such sentences belong in a generated cell.
RUN_SUBJECT = re.compile(r"\b(this run|the run|in this run|on this machine|measured|we (saw|found|see)|"
                         r"the (table|plot|figure|chart|numbers?|results?) (shows?|showed|above|below)|"
                         r"(above|below), (the|our))\b", re.I)
DIRECTION = re.compile(r"\b(faster|slower|speed-?up of|gains?|loss|loses|lost|wins?|won|beats?|pays|paid|crossover|"
                       r"identical|flipped|passed|failed|held|holds)\b", re.I)
CONDITION = re.compile(r"\b(where|if|when|whether|unless|until|once|which|what|how|each|every)\b", re.I)


def markdown_directions(source: str) -> list[str]:
    prose = re.sub(r"```.*?```", "", source, flags=re.S)
    prose = re.sub(r"`[^`]*`", "", prose)
    found = []
    for sentence in re.split(r"(?<=[.!?])\s+|\n\s*[-*]\s+|\n\n|\n(?=\|)", prose):
        subject, direction = RUN_SUBJECT.search(sentence), DIRECTION.search(sentence)
        if not (subject and direction):
            continue
        if CONDITION.search(sentence[:max(subject.start(), direction.start())]):
            continue  # a rule's condition or a question, not a finding
        found.append(" ".join(sentence.split())[:160])
    return found


def test_markdown_states_no_measured_direction():
    found = {}
    for notebook in sorted((Path(__file__).parents[2] / "notebooks").glob("*.ipynb")):
        for cell in json.loads(notebook.read_text())["cells"]:
            if cell["cell_type"] == "markdown" and (hits := markdown_directions("".join(cell["source"]))):
                found[f"{notebook.name} cell {cell.get('id')}"] = hits
    assert not found, f"findings typed into markdown (generate them from the run instead): {found}"


def test_the_direction_check_catches_a_typed_finding():
    assert markdown_directions("The table shows that speculation is faster on structured prompts.")
    assert markdown_directions("In this run the crossover came after two streams.")
    assert markdown_directions("We saw identical answers from both servers.")
    assert not markdown_directions("Where this run measured a crossover, keep k below it.")
    assert not markdown_directions("Speculation pays when the draft guesses well. `the run shows 1.3x faster`")
    assert not markdown_directions("If the measured speedup is below 1, the verdict is a loss.")


def crossover_rule():
    """06's crossover rule as the notebook defines it (exported to costmodel.rules), with "pays" above 1 (the
    threshold these cases use); 06's own pays (1 + min_gain, verdict.decision_side) is checked in
    test_06_pays_is_the_series_rule."""
    from functools import partial

    from specdec_helpers.costmodel import rules

    return rules.Crossover, partial(rules.find_crossover, pays=lambda v: v > 1.0)


def test_06_pays_is_the_series_rule():
    """find_crossover takes ``pays`` from its caller (06's reads the notebook's min_gain parameter, so it is not a
    rule of its own): 06 gives it the series' rule, a speedup's side of 1 + min_gain, at every call."""
    from specdec_helpers.costmodel import rules
    from specdec_helpers.costmodel.verdict import MIN_GAIN, decision_side

    def pays(speedup):
        return decision_side(speedup, MIN_GAIN) == "a gain"

    assert not pays(1.0 + MIN_GAIN) and pays(1.0 + MIN_GAIN + 1e-6) and not pays(0.9)
    assert rules.find_crossover({1: 1.0 + 2 * MIN_GAIN, 2: 1.0 + MIN_GAIN}, pays).level == 2
    with pytest.raises(TypeError):
        rules.find_crossover({1: 1.2})  # no default threshold to fall back on
    nb = nbformat.read(NOTEBOOKS / "06_context_and_concurrency.ipynb", as_version=4)
    tree = ast.parse("\n".join(c.source for c in nb.cells if c.cell_type == "code"))
    own = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "pays")
    assert "decision_side(speedup, min_gain)" in ast.unparse(own)
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and getattr(n.func, "id", None) == "find_crossover"]
    given = [[a.id for a in [*n.args, *(k.value for k in n.keywords)] if isinstance(a, ast.Name)] for n in calls]
    assert given and all("pays" in names for names in given), given


def test_crossover_where_speculation_stops_paying():
    Crossover, find_crossover = crossover_rule()
    cross = find_crossover({4: 0.8, 1: 1.3, 2: 1.05})
    assert (cross.status, cross.level, cross.last_paying) == ("stops", 4, 2)
    assert cross.sentence() == ("Speculation stops paying between 2 and 4 concurrent streams "
                                "(it paid at 2, not at 4)")
    assert find_crossover({1: 1.3, 2: 0.9}).sentence() == \
        "Speculation stops paying at 2 concurrent streams (it paid at 1)"


def test_crossover_never_paid_names_no_crossover():
    Crossover, find_crossover = crossover_rule()
    cross = find_crossover({1: 0.9, 2: 0.8, 4: 0.5})
    assert (cross.status, cross.level) == ("never", None)
    text = cross.sentence()
    assert "never paid at any level" in text and "1-4 concurrent streams" in text
    assert "stops paying" not in text


def test_crossover_always_paid_and_single_level():
    Crossover, find_crossover = crossover_rule()
    cross = find_crossover({1: 1.4, 8: 1.1})
    assert (cross.status, cross.level, cross.last_paying) == ("always", None, 8)
    assert "still paid at every level" in cross.sentence() and "up to 8" in cross.sentence()
    assert find_crossover({1: 0.7}).sentence() == "Speculation never paid at any level measured (1 concurrent stream)"


def test_crossover_mixed_and_threshold():
    Crossover, find_crossover = crossover_rule()
    cross = find_crossover({1: 0.95, 2: 1.1, 4: 0.8})
    assert (cross.status, cross.level, cross.last_paying) == ("mixed", None, 2)
    assert "no clean crossover" in cross.sentence()
    # exactly the threshold does not pay (as verdict.decision_side: 1 + min_gain is "a gain too small");
    # a higher threshold moves the crossover
    assert find_crossover({1: 1.01, 2: 1.0}).level == 2
    assert find_crossover({1: 1.05, 2: 1.2}, pays=lambda v: v > 1.05).status == "mixed"
    assert find_crossover({1: 1.1, 2: 1.03}, pays=lambda v: v > 1.05).level == 2
    with pytest.raises(ValueError):
        find_crossover({})


def test_crossover_first_loss_after_a_gain_even_when_noisy():
    Crossover, find_crossover = crossover_rule()
    # paid at 1, lost at 2, paid again at 4 (noise), lost at 8: the crossover is the first loss
    cross = find_crossover({1: 1.2, 2: 0.97, 4: 1.01, 8: 0.6})
    assert (cross.level, cross.last_paying) == (2, 1)
    assert isinstance(cross, Crossover)


def test_01_builds_the_cost_model_that_theory_reuses():
    """01 defines E(alpha, k), the speedup and the break-even alpha where its derivation is read; the helpers the
    later notebooks call (costmodel.theory) check their inputs and call these rules: the same numbers."""
    from specdec_helpers.costmodel import rules, theory

    ns = vars(rules)  # 01's definitions, exported by `make rules`
    for k in (1, 2, 4, 8):
        for alpha in np.linspace(0, 1, 21):
            assert ns["expected_tokens_per_pass"](float(alpha), k) == pytest.approx(
                theory.expected_tokens_per_pass(float(alpha), k))
            for c, v in ((0.05, 1.0), (0.2, 1.5), (0.4, 1.5), (0.9, 2.0)):
                assert ns["predicted_speedup"](float(alpha), k, c, v) == pytest.approx(
                    theory.predicted_speedup(float(alpha), k, c, v))
        for c, v in ((0.05, 1.0), (0.2, 1.0), (0.2, 1.5), (0.4, 1.5), (0.9, 2.0)):
            ours, theirs = ns["break_even_alpha"](k, c, v), theory.break_even_alpha(k, c, v)
            assert (math.isnan(ours) and math.isnan(theirs)) or ours == pytest.approx(theirs, abs=1e-6), (k, c, v)


def test_04_defines_coverage_as_the_summaries_compute_it():
    import pandas as pd

    from specdec_helpers.costmodel import rules
    from specdec_helpers.measure import evaluate

    assert evaluate.draft_coverage is rules.draft_coverage  # the summaries use 04's rule itself
    # f = drafts / (drafts + plain steps), plain = decoded tokens after the first, less drafted steps and accepted
    # tokens; a second row (5 drafts, 5 accepted, 30 tokens) in every frame
    expected = {(10, 30, 41): 15 / 34, (6, 18, 41): 11 / 46, (0, 0, 41): 5 / 64, (12, 40, 41): 17 / 24,
                (3, 2, 1): 8 / 22}
    for (drafts, accepted, tokens), f in expected.items():
        rows = pd.DataFrame({"drafts": [drafts, 5], "accepted_tokens": [accepted, 5], "completion_tokens": [tokens, 30]})
        assert rules.draft_coverage(rows) == pytest.approx(f)
    none = pd.DataFrame({"drafts": [0], "accepted_tokens": [0], "completion_tokens": [1]})
    assert rules.draft_coverage(none) == 0.0


def test_05_defines_the_draft_rule_that_06_reuses():
    from specdec_helpers.costmodel import rules

    for stem in ("05_structured_vs_creative", "06_context_and_concurrency"):  # both call 05's rule, no copy
        notebook = json.loads((Path(__file__).resolve().parents[2] / "notebooks" / f"{stem}.ipynb").read_text())
        code = "".join("".join(c["source"]) for c in notebook["cells"] if c["cell_type"] == "code")
        assert "choice = draft_rule(*find_recommendation(run), draft_model, target_model)" in code, stem
    where = "recorded by notebook 04 in this run (x)"
    draft = {"candidate": "d-small", "method": "draft_model", "draft_model": "d-small", "target_model": "t"}
    cases = [(None, "no recommendation recorded by notebook 04 in runs/x"),
             ({"candidate": "ngram", "method": "ngram", "draft_model": None, "target_model": "t"}, where),
             ({"candidate": "my-lookup", "method": "custom_class", "draft_model": None, "target_model": "t"}, where),
             ({"candidate": "my-lookup", "target_model": "t"}, where),  # a record without its configuration
             ({"candidate": None, "target_model": "t", "reason": "nothing measured reliably"}, where),
             ({**draft, "target_model": "other"}, where), (draft, where),
             ({"candidate": "d-profile", "method": "draft_model", "draft_model": "d-profile"}, where)]
    chosen = [(c.draft_model, c.from_recommendation) for c in
              (rules.draft_rule(found, at, "d-profile", "t") for found, at in cases)]
    assert chosen == [("d-profile", False)] * 6 + [("d-small", True), ("d-profile", True)]
    for (found, at), choice in zip(cases, (rules.draft_rule(f, a, "d-profile", "t") for f, a in cases)):
        assert isinstance(choice, rules.DraftChoice) and at in choice.reason
    assert rules.draft_rule(draft, "x", "d-profile", "t").draft_model == "d-small"
    for found, _ in cases[1:6]:  # no draft model (or no recommendation, or another target): the profile's draft
        assert rules.draft_rule(found, "x", "d-profile", "t").draft_model == "d-profile"


def test_04_defines_the_reliability_rule_07_applies():
    from specdec_helpers.costmodel import rules

    assert rules.C_FLOOR == -0.1
    for kept in range(0, 10):
        for flagged in range(0, 10):
            for minimum in (1, 2, 3, 6):
                for c in (math.nan, None, -0.5, -0.1, -0.05, 0.0, 0.4):
                    below_floor = c is not None and c < rules.C_FLOOR  # NaN or None: nothing drafted, no floor
                    assert rules.measured_reliably(kept, flagged, minimum, c) is (
                        kept >= minimum and flagged < kept and not below_floor), (kept, flagged, minimum, c)
    # the my-lookup: 4 clean pairs would not make a server whose steps beat the baseline's (c = -0.23) a pick
    assert not rules.measured_reliably(4, 0, 3, -0.23) and rules.measured_reliably(4, 0, 3, -0.02)
    # the case: 1 pair kept of 4, 3 flagged, is not a basis for a pick; 4 clean pairs are
    assert not rules.measured_reliably(1, 3, 3) and rules.measured_reliably(4, 0, 3)
    assert not rules.measured_reliably(3, 3, 3)  # a flagged half is not fewer flagged than kept


def test_04_defines_the_paired_speedup_and_the_verdict_rule_the_helpers_apply():
    """04's cells are the series' rule from paired ratios to a word; 05 and 07 call the helpers, which apply it."""
    from specdec_helpers.costmodel import analysis, rules, verdict
    from specdec_helpers.measure import evaluate
    from specdec_helpers.stats import MIN_VALUES_FOR_INTERVAL, bootstrap_ci

    assert analysis.paired_speedup is rules.paired_speedup and evaluate.paired_speedup is rules.paired_speedup
    rng = np.random.default_rng(3)
    for n in (0, 1, 5, 8, 12, 30):
        ratios = rng.lognormal(0.2, 0.3, n)
        ratios = np.append(ratios, [np.nan, np.inf]) if n else ratios
        point, lo, hi = rules.paired_speedup(ratios)
        assert np.allclose(rules.paired_speedup(ratios), (point, lo, hi), equal_nan=True)  # a seeded bootstrap
        if n == 0:
            assert all(math.isnan(v) for v in (point, lo, hi))
            continue
        finite = ratios[np.isfinite(ratios)]
        assert point == pytest.approx(np.median(finite))
        # the helpers' former copy (seed 0): the same numbers
        assert np.allclose((point, lo, hi), bootstrap_ci(finite, np.median, seed=0, min_n=MIN_VALUES_FOR_INTERVAL),
                           equal_nan=True)
        assert (math.isnan(lo) and math.isnan(hi)) if n < MIN_VALUES_FOR_INTERVAL else lo <= point <= hi, (n, lo, hi)
    grid = [(p, lo, hi, n) for p in (0.8, 1.02, 1.1, 1.5, math.nan) for lo in (0.7, 0.98, 1.02, 1.08, math.nan)
            for hi in (0.95, 1.04, 1.3) for n in (4, 8, 20) if not lo > hi]
    for point, lo, hi, n in grid:
        for min_gain in (0.0, 0.05, 0.1):
            reading = rules.speedup_reading(point, lo, hi, n, min_gain)
            if math.isnan(point):
                assert reading == "not measured"
            elif n < MIN_VALUES_FOR_INTERVAL or math.isnan(lo):
                assert reading.startswith("no verdict")
            else:
                assert reading == (verdict.FASTER if lo > 1.0 + min_gain else verdict.SLOWER if hi < 1.0 else
                                   verdict.SMALL_GAIN if lo > 1.0 else verdict.NOT_DISTINGUISHABLE), (point, lo, hi, n)
    # and the words are the rule's: an interval above 1 + min_gain is "faster", one below 1 "slower"
    assert rules.speedup_reading(1.5, 1.2, 1.8, 8, 0.05) == verdict.FASTER
    assert rules.speedup_reading(0.8, 0.7, 0.9, 8, 0.05) == verdict.SLOWER


def test_04_best_measured_k_and_the_ks_it_cannot_tell_apart():
    """04's rule (and tools/compare_runs'): the highest median per class; a k whose range over the prompts reaches
    the best one's lowest prompt is not told apart; a k the guard left no pair of (NaN) is no candidate."""
    import pandas as pd

    from specdec_helpers.costmodel.rules import best_measured_k

    sweep = pd.DataFrame(
        [("structured", 2, 1.40, 1.25, 1.70), ("structured", 4, 1.67, 1.38, 1.83), ("structured", 6, 1.69, 1.36, 1.85),
         ("structured", 8, float("nan"), float("nan"), float("nan")), ("creative", 1, 1.07, 0.93, 1.18),
         ("creative", 4, 0.83, 0.70, 0.90)],
        columns=["class", "k", "measured_decode_speedup", "decode_speedup_min", "decode_speedup_max"])
    assert best_measured_k(sweep) == {"structured": (6, [2, 4]), "creative": (1, [])}
