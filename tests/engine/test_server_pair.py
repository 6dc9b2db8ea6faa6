"""ServerPair.measure with real vLLM engines: the path notebook 05 takes when a machine cannot hold
both servers at once (one server at a time, the baseline before and after: a sandwich), and the path it takes when
it can (both up, alternating)."""

from __future__ import annotations

from specdec_helpers.demo import ServerPair
from specdec_helpers.engine.spec_config import draft_model_config
from specdec_helpers.measure.prompts import load_prompt_sets, select


def _pair(target_dir, log_dir) -> ServerPair:
    return ServerPair(target_dir, draft_model_config(target_dir, 2), split_cpu_cores=False, log_dir=log_dir,
                      max_model_len=1024, cpu_kv_cache_gib=1)


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


def test_started_pair_alternates_and_keeps_both_up(target_dir, log_dir):
    prompts = select(load_prompt_sets(["structured"]), limit_per_class=1)
    pair = _pair(target_dir, log_dir).start()
    try:
        results = pair.measure(prompts, [0.0], max_tokens=8, progress=False)
        assert pair.running  # the demo after the measurement still needs both
        assert list(results["server"]) == ["baseline", "speculative"]  # one prompt, alternating
        assert (results["design"] == "interleaved").all()
    finally:
        pair.stop()
    assert not pair.baseline.running and not pair.speculative.running
