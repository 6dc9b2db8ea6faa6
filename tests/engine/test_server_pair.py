"""ServerPair.measure with real vLLM engines: the path notebook 05 takes when a machine cannot hold
both servers at once (one server at a time, the baseline before and after: a sandwich), and the path it takes when
it can (both up, alternating)."""

from __future__ import annotations

from specdec_helpers.demo import ServerPair
from specdec_helpers.engine.spec_config import draft_model_config
from specdec_helpers.measure.prompts import load_prompt_sets, select


def _pair(target_dir, log_dir) -> ServerPair:
    # float32: the target drafting for itself then gives the baseline's greedy answers exactly
    return ServerPair(target_dir, draft_model_config(target_dir, 2), split_cpu_cores=False, log_dir=log_dir,
                      max_model_len=1024, cpu_kv_cache_gib=1, dtype="float32")


def test_one_server_at_a_time_measures_both_and_leaves_nothing_running(target_dir, log_dir):
    prompts = select(load_prompt_sets(["structured", "creative"]), limit_per_class=1)
    pair = _pair(target_dir, log_dir)
    seen_running = []
    original = pair.baseline.stop

    def stop_and_note(*args, **kwargs):
        # when the baseline stops, the speculative server has not been started yet
        seen_running.append(pair.speculative.running)
        return original(*args, **kwargs)

    pair.baseline.stop = stop_and_note
    results = pair.measure(prompts, [0.0], max_tokens=8, progress=False)
    assert not pair.baseline.running and not pair.speculative.running
    assert seen_running and not any(seen_running)  # never both up at once
    assert sorted(results["server"].unique()) == ["baseline", "speculative"]
    assert len(results) == 3 * len(prompts)  # the baseline before and after the speculative server
    assert (results["design"] == "sandwich").all()
    order = results.sort_values("sent_at")
    assert list(order.drop_duplicates("sandwich")["sandwich"]) == ["before", "", "after"]
    assert list(order.drop_duplicates("server")["server"]) == ["baseline", "speculative"]
    spec = results[results["server"] == "speculative"]
    assert (spec["draft_tokens"] > 0).all()  # the speculative server really drafted
    base = results[results["sandwich"] == "before"].set_index("prompt_id")["text"]
    # temperature 0, the target drafting for itself in float32: the same answers (lossless)
    assert (spec.set_index("prompt_id")["text"] == base).mean() >= 0.5


def test_started_pair_alternates_keeps_both_up_and_drives_the_demo(target_dir, log_dir):
    """The started pair of notebook 05 and the demo page: the paired measurement, then what the live panel does on
    the same two real servers (streaming, counters, the race, the button), then both stopped."""
    import time

    from specdec_helpers import demo
    from specdec_helpers.measure.prompts import Prompt

    prompts = select(load_prompt_sets(["structured"]), limit_per_class=1)
    pair = _pair(target_dir, log_dir).start()
    try:
        results = pair.measure(prompts, [0.0], max_tokens=8, progress=False)
        assert pair.running  # the demo after the measurement still needs both
        assert list(results["server"]) == ["baseline", "speculative"]  # one prompt, alternating
        assert (results["design"] == "interleaved").all()
        messages = prompts[0].messages

        seen = []  # the pane grows as tokens arrive, with the server's own token count
        answer = demo.stream_live(pair.speculative, messages, temperature=0.0, max_tokens=24,
                                  on_update=lambda a: seen.append(a.text), min_interval_s=0.0)
        assert answer.done and answer.error is None and answer.text
        assert len(seen) >= 2 and seen[0] != answer.text and answer.text.startswith(seen[0])
        assert 0 < answer.completion_tokens <= 24 and answer.ttft_s > 0 and answer.decode_tokens_per_s > 0
        c = answer.counters  # vLLM's /metrics, read around this one request
        assert c.drafts > 0 and 0 < c.accepted_tokens <= c.draft_tokens  # the target drafting for itself accepts
        assert "acceptance" in answer.stats_html() and "done" in answer.stats_html()

        for at_once in (True, False):
            answers = demo.race(pair, messages, at_once=at_once, temperature=0.0, max_tokens=16)
            base, spec = answers["baseline"], answers["speculative"]
            assert base.counters is None and spec.counters.drafts > 0
            assert base.text == spec.text  # greedy, the target drafting for itself in float32: lossless
            if at_once:
                assert spec.started < base.ended and base.started < spec.ended  # overlapping in time
            else:
                assert base.ended <= spec.started  # one after the other
        assert "Speedup:" in demo.race_summary(answers, "what was compared")

        table = pair.run_both(messages, temperature=0.0, max_tokens=16)  # the notebook's one-prompt table
        assert list(table["server"]) == ["baseline", "speculative"] and table["speedup_tokens_per_s"].iloc[0] == 1.0
        assert table["compared"].iloc[0] == pair.comparison(pair.own_cores)

        tabs = {"Structured": [prompts[0]],
                "Creative": [Prompt("c1", "creative", "poem", [{"role": "user", "content": "A short poem"}], 16)]}
        panel = demo.ArenaPanel(pair, tabs, {"Structured": 0.0, "Creative": 1.0}, max_tokens=16)
        assert panel.mode.value is pair.own_cores  # side by side only where each server has its own cores
        panel.tabs.selected_index = 1
        assert panel.temperature.value == 1.0  # the Creative tab's temperature
        panel.tabs.selected_index = 0
        panel.free_text.value = "Write the JSON object {\"a\": 1} and nothing else."
        panel._on_click()
        deadline = time.time() + 120
        while "Speedup" not in panel.summary.value and time.time() < deadline:
            time.sleep(0.1)
        assert "Speedup" in panel.summary.value and not panel.button.disabled
        for name in ("baseline", "speculative"):
            stats, text = panel.panes[name]
            assert text.value and "tokens/s" in stats.value and "done" in stats.value
    finally:
        pair.stop()
    assert not pair.baseline.running and not pair.speculative.running
    answers = demo.race(pair, prompts[0].messages, temperature=0.0, max_tokens=8)  # a server gone: said in its pane
    assert answers["baseline"].error and answers["speculative"].error
    assert "failed" in demo.race_summary(answers, "x")
