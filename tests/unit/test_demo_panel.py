"""The demo's streaming logic against a fake OpenAI-compatible server (fast, no engine, no browser).

The fake streams a fixed answer in chunks with vLLM's continuous usage and serves vLLM-style
speculative counters on /metrics, so the tests check what the panes show: text arriving in pieces,
TTFT and tokens/s, acceptance from counter deltas, the speedup line, and the panel's button.
The real thing in a real browser is tests/engine/test_demo_browser.py.
"""

from __future__ import annotations

import json
import re
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from specdec_helpers import demo
from specdec_helpers.measure.prompts import Prompt

WORDS = ["{", '"name"', ": ", '"Ada"', ", ", '"age"', ": ", "36", "}"]


def _handler(state: dict):
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):  # keep pytest's output clean
            pass

        def do_GET(self):
            if self.path != "/metrics":
                self.send_error(404)
                return
            body = (f"vllm:spec_decode_num_drafts_total {state['drafts']}\n"
                    f"vllm:spec_decode_num_draft_tokens_total {state['drafts'] * 4}\n"
                    f"vllm:spec_decode_num_accepted_tokens_total {state['accepted']}\n").encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.end_headers()
            self.wfile.write(body)

        def do_POST(self):
            request = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            state["requests"].append(request)
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.end_headers()
            for i, word in enumerate(WORDS):
                time.sleep(state["delay_s"])
                chunk = {"id": "x", "object": "chat.completion.chunk", "created": 0, "model": request["model"],
                         "choices": [{"index": 0, "delta": {"content": word}, "finish_reason": None}],
                         "usage": {"prompt_tokens": 5, "completion_tokens": 2 * (i + 1), "total_tokens": 0}}
                self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
                self.wfile.flush()
            state["drafts"] += 3
            state["accepted"] += 9
            self.wfile.write(b"data: [DONE]\n\n")

    return Handler


@dataclass(eq=False)
class FakeServer:
    name: str
    delay_s: float
    speculative_config: dict | None = None
    cpu_threads_bind: str | None = None
    state: dict = field(default_factory=lambda: {"drafts": 0, "accepted": 0, "requests": []})

    def __post_init__(self):
        self.state["delay_s"] = self.delay_s
        self.http = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self.state))
        threading.Thread(target=self.http.serve_forever, daemon=True).start()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.http.server_address[1]}"

    @property
    def served_model_name(self) -> str:
        return self.name

    def client(self):
        from openai import OpenAI

        return OpenAI(base_url=f"{self.base_url}/v1", api_key="x", max_retries=0)


class FakePair:
    def __init__(self):
        self.baseline = FakeServer("baseline", 0.02, cpu_threads_bind="0")
        self.speculative = FakeServer("speculative", 0.01, {"method": "draft_model"}, cpu_threads_bind="1")
        self.servers = [self.baseline, self.speculative]
        self.own_cores = True

    def comparison(self, at_once: bool) -> str:
        return "at once on own cores" if at_once else "one after the other"

    def close(self):
        for s in self.servers:
            s.http.shutdown()


@pytest.fixture
def pair():
    p = FakePair()
    yield p
    p.close()


def test_stream_live_shows_text_as_it_arrives_and_counts_server_tokens(pair):
    seen = []
    answer = demo.stream_live(pair.speculative, [{"role": "user", "content": "hi"}], temperature=0.0,
                              max_tokens=32, on_update=lambda a: seen.append(a.text), min_interval_s=0.0)
    assert answer.text == "".join(WORDS) and answer.done and answer.error is None
    assert len(seen) >= len(WORDS) and seen[0] == WORDS[0]  # piece by piece, not all at the end
    assert answer.completion_tokens == 2 * len(WORDS)  # the server's count, not the chunk count
    assert answer.ttft_s > 0 and answer.decode_tokens_per_s > 0
    assert answer.counters.acceptance_rate == pytest.approx(9 / 12)
    sent = pair.speculative.state["requests"][0]
    assert sent["stream"] is True and sent["stream_options"]["continuous_usage_stats"] is True
    assert "acceptance 75%" in answer.stats_html()


def test_race_runs_both_at_once_and_summarises_what_was_compared(pair):
    answers = demo.race(pair, [{"role": "user", "content": "hi"}], temperature=0.0, max_tokens=32)
    assert set(answers) == {"baseline", "speculative"}
    assert answers["baseline"].counters is None  # a baseline has no speculative counters
    base, spec = answers["baseline"], answers["speculative"]
    assert spec.started < base.ended and base.started < spec.ended  # at the same time, overlapping
    apart = demo.race(pair, [{"role": "user", "content": "hi"}], temperature=0.0, max_tokens=32, at_once=False)
    assert apart["baseline"].ended <= apart["speculative"].started  # one after the other
    line = demo.race_summary(answers, "what was compared")
    assert re.search(r"Speedup: \d+\.\d\dx decode tokens/s, \d+\.\d\dx end-to-end", line)
    assert "acceptance 75%" in line and "what was compared" in line


def test_a_failing_server_is_shown_in_its_pane_not_raised(pair):
    pair.baseline.http.shutdown()
    pair.baseline.http.server_close()
    answers = demo.race(pair, [{"role": "user", "content": "hi"}], temperature=0.0, max_tokens=32)
    assert answers["baseline"].error and answers["speculative"].text
    assert "failed" in demo.race_summary(answers, "x")


def test_panel_button_streams_into_both_panes(pair):
    prompts = {"Structured": [Prompt("s1", "structured", "json", [{"role": "user", "content": "JSON please"}], 32)],
               "Creative": [Prompt("c1", "creative", "poem", [{"role": "user", "content": "A poem"}], 32)]}
    panel = demo.ArenaPanel(pair, prompts, {"Structured": 0.0, "Creative": 1.0}, max_tokens=32)
    assert panel.temperature.style.description_width == "initial"  # the label fits
    assert panel.mode.value is True  # own cores: side by side by default
    panel.tabs.selected_index = 1
    assert panel.temperature.value == 1.0  # the Creative tab's temperature
    panel.tabs.selected_index = 0
    assert panel.messages()[0]["content"] == "JSON please"
    panel.free_text.value = "my own prompt"
    assert panel.messages() == [{"role": "user", "content": "my own prompt"}]
    panel._on_click()
    deadline = time.time() + 10
    while "Speedup" not in panel.summary.value and time.time() < deadline:
        time.sleep(0.05)
    assert "Speedup" in panel.summary.value and "at once on own cores" in panel.summary.value
    assert not panel.button.disabled
    for name in ("baseline", "speculative"):
        stats, text = panel.panes[name]
        assert "Ada" in text.value and "tokens/s" in stats.value and "done" in stats.value
    assert pair.baseline.state["requests"][-1]["messages"][0]["content"] == "my own prompt"


def test_demo_notebook_follows_the_conventions_and_defaults_to_the_default_profile():
    import nbformat
    import papermill

    from tools.demo_page import DEMO_NOTEBOOK
    from tools.profiles import load_profile

    nb = nbformat.read(DEMO_NOTEBOOK, as_version=4)
    tagged = [c for c in nb.cells if "parameters" in c.metadata.get("tags", [])]
    assert len(tagged) == 1
    assert not any(c.get("outputs") for c in nb.cells if c.cell_type == "code")
    assert "../docs/glossary.md" in nb.cells[0].source
    assert "pair.stop()" not in "".join(c.source for c in nb.cells if c.cell_type == "code"), \
        "a stop cell would stop the servers as soon as Voila has run the page"
    declared = papermill.inspect_notebook(str(DEMO_NOTEBOOK))
    profile = load_profile("cpu-coder")
    for name, spec in declared.items():
        if name in profile:
            assert eval(spec["default"]) == profile[name], f"{name}: {spec['default']} vs cpu-coder's {profile[name]}"


def test_page_copy_gets_the_profile_parameters(tmp_path):
    import nbformat

    from tools import demo_page

    path = demo_page.prepare("cpu-tiny", smoke=True, run_dir=tmp_path / "demo")
    nb = nbformat.read(path, as_version=4)
    injected = [c for c in nb.cells if "injected-parameters" in c.metadata.get("tags", [])]
    assert len(injected) == 1 and 'target_model = "smollm2-135m-instruct"' in injected[0].source
    assert f'run_dir = "{tmp_path / "demo"}"' in injected[0].source
    cmd = demo_page.voila_command(path, 8999)
    assert "--Voila.ip=127.0.0.1" in cmd and "--port=8999" in cmd and "--Voila.port_retries=0" in cmd
