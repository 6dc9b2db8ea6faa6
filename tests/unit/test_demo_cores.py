"""ServerPair's bookkeeping behind notebooks 05 and demo (no servers, no models)."""

from __future__ import annotations

import pytest


def _fake_pair(bind_baseline, bind_spec):
    from types import SimpleNamespace

    from specdec_helpers.demo import ServerPair

    pair = ServerPair.__new__(ServerPair)  # no servers: only the bookkeeping is under test
    pair.baseline = SimpleNamespace(name="baseline", cpu_threads_bind=bind_baseline)
    pair.speculative = SimpleNamespace(name="speculative", cpu_threads_bind=bind_spec)
    return pair


@pytest.mark.parametrize("binds, own", [(("0", "1"), True), ((None, None), False), (("0-1", "0-1"), False)])
def test_own_cores_only_when_the_servers_have_different_cores(binds, own):
    pair = _fake_pair(*binds)
    assert pair.own_cores is own
    assert pair.comparison(False).startswith("one after the other")
    assert ("confounded" in pair.comparison(True)) is (not own)


def test_run_both_asks_one_after_the_other_without_own_cores(monkeypatch):
    import threading
    from types import SimpleNamespace

    from specdec_helpers import demo

    active, overlaps = [], []

    def fake_measure(server, messages, **sampling):
        active.append(server.name)
        overlaps.append(len(active))
        threading.Event().wait(0.05)
        active.remove(server.name)
        result = SimpleNamespace(text="x", ttft_s=0.1, e2e_s=1.0, completion_tokens=10,
                                 decode_tokens_per_s=20.0 if server.name == "speculative" else 10.0)
        return SimpleNamespace(result=result, counters=SimpleNamespace(acceptance_rate=0.5))

    monkeypatch.setattr(demo, "measure_request", fake_measure)
    pair = _fake_pair(None, None)
    df = pair.run_both([{"role": "user", "content": "hi"}], temperature=0.0, max_tokens=8)
    assert max(overlaps) == 1  # never both at once
    assert df.set_index("server").loc["speculative", "speedup_tokens_per_s"] == pytest.approx(2.0)
    assert df["compared"].iloc[0].startswith("one after the other")

