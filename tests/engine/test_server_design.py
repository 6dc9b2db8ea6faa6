"""Notebook 06's one server design (measure.paired.measure_servers) on real vLLM engines, for the memory fallbacks
the default profile does not take (06's notebook test runs all three servers up at once): two servers at a time,
each candidate in turn next to the baseline; one at a time, a sandwich per candidate. Whatever memory holds, the load
test runs with only its servers up, the baseline is up when the call returns, and no candidate is left running."""

from __future__ import annotations

import pytest

from specdec_helpers.engine.serving import VLLMServer
from specdec_helpers.engine.spec_config import draft_model_config, ngram_config
from specdec_helpers.measure import paired
from specdec_helpers.measure.load import run_concurrent
from specdec_helpers.measure.prompts import load_prompt_sets, select


@pytest.mark.parametrize("fit, design", [(2, paired.INTERLEAVED), (1, "sandwich")])
def test_every_fallback_pairs_each_candidate_and_loads_only_the_servers_that_fit(target_dir, log_dir, fit, design):
    options = dict(log_dir=log_dir, max_model_len=1024, dtype="float32")
    baseline = VLLMServer(target_dir, name="baseline", **options)
    candidates = {"draft": VLLMServer(target_dir, name="draft", speculative_config=draft_model_config(target_dir, 2),
                                      **options),
                  "ngram": VLLMServer(target_dir, name="ngram", speculative_config=ngram_config(2, 4), **options)}
    everyone = [baseline, *candidates.values()]
    prompts = select(load_prompt_sets(["structured"]), limit_per_class=1)
    up_during_load = []

    def load(servers):
        up_during_load.append(sorted(s.name for s in everyone if s.running))
        return [run_concurrent(s, prompts, 1, 1, max_tokens=8) for s in servers]

    try:
        baseline.start()
        measured = paired.measure_servers(baseline, candidates, prompts, fit=fit, load=load, load_with="draft",
                                          temperature=0.0, max_tokens=8, progress=False)
        assert baseline.running and not any(c.running for c in candidates.values())
    finally:
        for server in everyone:
            server.stop()
    assert set(measured.passes) == {"draft", "ngram"}
    for name, rows in measured.passes.items():  # each candidate paired with baseline requests on the same prompt
        assert set(rows["server"]) == {"baseline", name} and (rows["design"] == design).all()
    assert set(measured.requests["paired_with"]) == {"draft", "ngram"}
    assert [row["server"] for row in measured.load_rows] == (["baseline", "draft"] if fit == 2 else ["draft", "baseline"])
    # the load never runs with more servers up than memory holds, and with the draft up where it is measured
    assert up_during_load == ([["baseline", "draft"]] if fit == 2 else [["draft"], ["baseline"]])
