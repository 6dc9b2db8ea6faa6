"""Proposer classes served by vLLM (``method: "custom_class"``) on real cpu-tiny engines: the greedy answers stay the
target's, vLLM counts their drafts like any other method's, and the traffic proposer drafts more as it sees requests
that share structure (measured on a stream, against the same stream on a proposer without memory)."""

from __future__ import annotations

import pandas as pd

from specdec_helpers.engine.serving import VLLMServer
from specdec_helpers.engine.spec_config import PROPOSERS, custom_config
from specdec_helpers.measure.metrics import read_spec_counters
from specdec_helpers.measure.prompts import Prompt
from specdec_helpers.measure.requests import measure_prompts
from specdec_helpers.report.runs import REPO_ROOT as PACKAGE_ROOT

K = 4
PEOPLE = [("Maria Lopez", 34, "Porto"), ("Jon Berg", 51, "Oslo"), ("Aiko Tanaka", 27, "Osaka"),
          ("Samuel Okafor", 42, "Lagos"), ("Elena Rossi", 39, "Turin"), ("Omar Haddad", 23, "Amman"),
          ("Lena Vogel", 61, "Graz"), ("Tomas Novak", 30, "Brno")]
# one schema, other people: requests that share structure, as a service's traffic does
STREAM = [Prompt(f"person-{i}", "structured", "json_schema",
                 [{"role": "system", "content": "You reply with valid JSON only."},
                  {"role": "user", "content": 'Return only JSON matching this schema: {"name": string, "age": integer, '
                                              f'"city": string, "greeting": string}}\nPerson: {n} is {a} years old '
                                              f"and lives in {c}."}], 40)
          for i, (n, a, c) in enumerate(PEOPLE)]


def _proposer_server(target_dir, log_dir, name, class_path):
    return VLLMServer(target_dir, name=name, speculative_config=custom_config(class_path, K), log_dir=log_dir,
                      max_model_len=1024, dtype="float32", python_path=[str(PACKAGE_ROOT)], shared=False)


def test_proposer_classes_keep_the_answers_draft_and_the_traffic_one_learns(baseline_server, target_dir, log_dir):
    base = measure_prompts([baseline_server], STREAM, temperature=0.0, progress=False).set_index("prompt_id")
    streams = {}
    for name, class_path in (("lookup", "tests.lookup_proposer.LookupProposer"),
                             ("traffic", PROPOSERS["traffic"])):
        with _proposer_server(target_dir, log_dir, name, class_path) as server:
            before = read_spec_counters(server.base_url)
            rows = measure_prompts([server], STREAM, temperature=0.0, progress=False)
            counted = read_spec_counters(server.base_url) - before
        rows = rows.set_index("prompt_id")
        # lossless: a proposer only proposes; the target's greedy answer is unchanged (float32)
        assert (rows["text"] == base.loc[rows.index, "text"]).all(), name
        # vLLM's counters count the class's drafts, and the per-request numbers add up to them
        assert counted.drafts > 0 and 0 < counted.accepted_tokens <= counted.draft_tokens
        assert rows["draft_tokens"].sum() == counted.draft_tokens and rows["accepted_tokens"].sum() == counted.accepted_tokens
        streams[name] = rows.assign(share=rows["accepted_tokens"] / rows["completion_tokens"].clip(lower=1))
    first, later = STREAM[0].id, [p.id for p in STREAM[len(STREAM) // 2:]]
    traffic, lookup = streams["traffic"], streams["lookup"]
    # the first request has nothing earlier to learn from: the traffic proposer drafts as the lookup does
    assert traffic.loc[first, "accepted_tokens"] == lookup.loc[first, "accepted_tokens"]
    # later requests of the same schema: it drafts from earlier answers, and more of each answer comes from drafts
    assert traffic.loc[later, "share"].mean() > traffic.loc[first, "share"]
    assert traffic.loc[later, "accepted_tokens"].sum() > lookup.loc[later, "accepted_tokens"].sum()
    print(pd.DataFrame({"lookup": lookup["share"], "traffic": traffic["share"]}).round(2))


def test_suffix_decoding_keeps_the_answers_and_a_repeated_prompt_would_measure_its_cache(baseline_server, target_dir,
                                                                                           log_dir):
    """vLLM's suffix decoding (arctic-inference, built by `make env`): lossless and counted like every method; it drafts
    from the answers the server finished before, so the same prompt a second time is drafted from its own first answer
    (a cache, which is why the notebooks measure it on a fresh server, once per prompt), while one-token priming leaves
    it nothing to continue. arctic-inference's own vLLM plugin is never loaded (VLLM_PLUGINS)."""
    from specdec_helpers.engine.serving import SERIES_PLUGINS
    from specdec_helpers.engine.spec_config import suffix_config
    from specdec_helpers.measure.requests import prime

    base = measure_prompts([baseline_server], STREAM, temperature=0.0, progress=False).set_index("prompt_id")
    with VLLMServer(target_dir, name="suffix", speculative_config=suffix_config(K), log_dir=log_dir,
                    max_model_len=1024, dtype="float32", shared=False) as server:
        prime(server, STREAM)
        before = read_spec_counters(server.base_url)
        rows = measure_prompts([server], STREAM, temperature=0.0, progress=False)
        counted = read_spec_counters(server.base_url) - before
        again = measure_prompts([server], STREAM[:1], temperature=0.0, progress=False)
        plugins = server.environment()["VLLM_PLUGINS"]
    rows = rows.set_index("prompt_id")
    assert (rows["text"] == base.loc[rows.index, "text"]).all()  # lossless (float32, greedy)
    assert counted.drafts > 0 and 0 < counted.accepted_tokens <= counted.draft_tokens
    assert rows["accepted_tokens"].sum() == counted.accepted_tokens
    share = rows["accepted_tokens"] / rows["completion_tokens"].clip(lower=1)
    repeat_share = float(again["accepted_tokens"].iloc[0] / max(again["completion_tokens"].iloc[0], 1))
    assert again["text"].iloc[0] == rows.loc[STREAM[0].id, "text"]
    assert repeat_share > max(share.loc[STREAM[0].id], 0.5), (repeat_share, share.loc[STREAM[0].id])
    assert plugins == SERIES_PLUGINS  # the series' own plugin only: arctic-inference's would patch vLLM
    print(pd.DataFrame({"suffix": share}).round(2), "\nthe first prompt again:", round(repeat_share, 2))
