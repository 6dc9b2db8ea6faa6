"""The talk's live demo: a baseline and a speculative server, side by side, on the same prompt. Every number says
how the two shared the machine (``ServerPair.comparison``): ``split_cpu_cores`` gives each half the CPU cores."""

from __future__ import annotations

import html
import math
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import pandas as pd

from specdec_helpers.costmodel.acceptance import SpecCounters
from specdec_helpers.engine.cpu import core_share, cores_spec, usable_core_ids
from specdec_helpers.engine.serving import VLLMServer
from specdec_helpers.measure.metrics import read_spec_counters
from specdec_helpers.measure.paired import measure_paired
from specdec_helpers.measure.requests import decode_rate, measure_request, stream_chat

MAX_TOKENS_LIMIT = 512  # the panel's max-tokens slider stops here (the demo's preflight checks this length)


def split_cores(n_parts: int = 2) -> list[str]:
    """Disjoint thread-bind ranges of the cores this process may use; with too few cores, parts share the last."""
    return [cores_spec(core_share(usable_core_ids(), i, n_parts)) for i in range(n_parts)]


class ServerPair:
    """Baseline and speculative servers of one target, up across notebook cells; ``split_cpu_cores``: CPU only."""

    def __init__(self, target_dir, speculative_config: dict[str, Any], split_cpu_cores: bool = True,
                 **server_options: Any):
        self.baseline = VLLMServer(target_dir, name="baseline", **server_options)
        self.speculative = VLLMServer(target_dir, name="speculative", speculative_config=speculative_config,
                                      **server_options)
        if split_cpu_cores and self.baseline.install.platform == "cpu":
            self.baseline.cpu_threads_bind, self.speculative.cpu_threads_bind = split_cores(2)

    @property
    def servers(self) -> list[VLLMServer]:
        return [self.baseline, self.speculative]

    @property
    def own_cores(self) -> bool:
        """True when each server runs on its own CPU cores, so answering at once is fair."""
        b, s = self.baseline.cpu_threads_bind, self.speculative.cpu_threads_bind
        return bool(b and s and b != s)

    def comparison(self, at_once: bool) -> str:
        """What a side-by-side number compares, in words (printed next to every speedup)."""
        if at_once and self.own_cores:
            return (f"both at the same moment, each on its own CPU cores ({self.baseline.cpu_threads_bind} and "
                    f"{self.speculative.cpu_threads_bind}): no interference, but each has part of the machine")
        if at_once:
            return "both at the same moment on shared hardware: each slowed the other, the speedup is confounded"
        own = " (each pinned to its own cores)" if self.own_cores else ", each with the whole machine"
        return f"one after the other{own}"

    def start(self) -> "ServerPair":
        try:
            for server in self.servers:
                server.start()
        except BaseException:
            self.stop()
            raise
        return self

    @property
    def running(self) -> bool:
        return self.baseline.running and self.speculative.running

    def measure(self, prompts: Sequence, temperatures: Sequence[float], **options: Any) -> pd.DataFrame:
        """Every prompt at every temperature on both, paired in time (:func:`measure.paired.measure_paired`): in ABBA
        blocks when started (both stay up for the demo), else as a sandwich for machines that cannot hold both."""
        return measure_paired(self.baseline, [self.speculative], prompts, together=self.running,
                              temperature=temperatures, **options)

    def stop(self) -> None:
        for server in self.servers:
            server.stop()

    def run_both(self, messages: Sequence[dict], *, temperature: float, max_tokens: int) -> pd.DataFrame:
        """The same request to both (at the same moment only on own cores); ``compared`` says how."""
        measured = race(self, messages, at_once=self.own_cores, work=measure_request, temperature=temperature,
                        max_tokens=max_tokens, seed=0)
        fields = ("text", "ttft_s", "e2e_s", "completion_tokens", "decode_tokens_per_s")
        base = measured["baseline"].result.decode_tokens_per_s
        return pd.DataFrame([{"server": name, **{f: getattr(m.result, f) for f in fields},
                              "acceptance_rate": m.counters.acceptance_rate if name == "speculative" else float("nan"),
                              "speedup_tokens_per_s": m.result.decode_tokens_per_s / base,
                              "compared": self.comparison(self.own_cores)} for name, m in measured.items()])


@dataclass
class LiveAnswer:
    """One server's answer while it streams, and its numbers once done (what a pane shows)."""

    server: str
    started: float = field(default_factory=time.perf_counter)
    text: str = ""
    completion_tokens: int = 0
    first_token_at: float | None = None
    last_token_at: float | None = None
    ended: float | None = None
    counters: SpecCounters | None = None  # speculative servers only, after the request
    error: str | None = None

    @property
    def done(self) -> bool:
        return self.ended is not None

    @property
    def ttft_s(self) -> float:
        return float("nan") if self.first_token_at is None else self.first_token_at - self.started

    @property
    def decode_tokens_per_s(self) -> float:  # as every measurement's (decode_rate), live while it streams
        if self.first_token_at is None:
            return float("nan")
        return decode_rate(self.completion_tokens, (self.last_token_at if self.done else time.perf_counter())
                           - self.first_token_at)

    @property
    def e2e_tokens_per_s(self) -> float:  # all tokens per second of the request, prefill included (what users wait for)
        span = self.ended - self.started if self.done else 0.0
        return self.completion_tokens / span if span > 0 else float("nan")

    def stats_html(self) -> str:
        rate, c = self.decode_tokens_per_s, self.counters
        parts = ["" if self.first_token_at is None else f"TTFT {self.ttft_s * 1000:.0f} ms",
                 f"{rate:.1f} tokens/s" if math.isfinite(rate) else "", f"{self.completion_tokens} tokens",
                 f"acceptance {c.acceptance_rate:.0%} · {c.mean_acceptance_length:.2f} tokens per target pass"
                 if c is not None and c.draft_tokens else "", f"<i>{'done' if self.done else 'streaming...'}</i>"]
        return f"<small>{' · '.join(p for p in parts if p)}</small>"


def stream_live(server: VLLMServer, messages: Sequence[dict], *, temperature: float, max_tokens: int,
                on_update: Callable[[LiveAnswer], None] = lambda _: None, min_interval_s: float = 0.1) -> LiveAnswer:
    """Stream one chat completion, calling ``on_update`` as tokens arrive (at most every ``min_interval_s``: more would
    flood the browser) and at the end. Token counts are the server's: one speculative chunk can carry several."""
    answer, shown = LiveAnswer(server=server.name), [0.0]

    def seen(piece: str, tokens: int | None, now: float) -> None:
        if piece:
            answer.first_token_at = answer.first_token_at or now
            answer.last_token_at = now
            answer.text += piece
        if tokens is not None:
            answer.completion_tokens = tokens
        elif piece:  # a server without continuous usage: at least one token per chunk
            answer.completion_tokens += 1
        if piece and now - shown[0] >= min_interval_s:
            shown[0] = now
            on_update(answer)

    try:
        before = read_spec_counters(server.base_url) if server.speculative_config else None
        answer.started = time.perf_counter()
        stream_chat(server.client(), server.served_model_name, messages, max_tokens=max_tokens,
                    temperature=temperature, seed=0, on_chunk=seen)
        answer.ended = time.perf_counter()
        if before is not None:
            answer.counters = read_spec_counters(server.base_url) - before
    except Exception as exc:  # shown in the pane; the other server's answer goes on
        answer.error = f"{type(exc).__name__}: {exc}"
        answer.ended = answer.ended or time.perf_counter()
    on_update(answer)
    return answer


def race(pair: ServerPair, messages: Sequence[dict], *, at_once: bool = True,
         work: Callable[..., Any] = stream_live, **request: Any) -> dict[str, Any]:
    """``work(server, messages, **request)`` on both (by default the live race): at once, or one after the other."""
    if not at_once:
        return {s.name: work(s, messages, **request) for s in pair.servers}
    with ThreadPoolExecutor(max_workers=2) as pool:
        futures = {s.name: pool.submit(work, s, messages, **request) for s in pair.servers}
    return {name: future.result() for name, future in futures.items()}


def race_summary(answers: dict[str, LiveAnswer], compared: str) -> str:
    """One line under the panes: the speedup, and what exactly was compared (``ServerPair.comparison``)."""
    base, spec = answers["baseline"], answers["speculative"]
    if base.error or spec.error:
        return "<b style='color:#b00'>A server failed; see its pane.</b>"
    acceptance = f", acceptance {c.acceptance_rate:.0%}" if (c := spec.counters) and c.draft_tokens else ""
    return (f"<b>Speedup: {spec.decode_tokens_per_s / base.decode_tokens_per_s:.2f}x decode tokens/s, "
            f"{spec.e2e_tokens_per_s / base.e2e_tokens_per_s:.2f}x end-to-end tokens/s</b>{acceptance} "
            f"<small>(speculative / baseline on this one prompt: one draw, which a slow first token or a busy "
            f"moment can tip either way; notebook 05's table over many prompts is the measurement; "
            f"{html.escape(compared)})</small>")


class ArenaPanel:
    """The widgets of the side-by-side demo; every control carries a ``specdec-...`` CSS class for browser tests."""

    def __init__(self, pair: ServerPair, prompts_by_tab: dict[str, list], default_temperature: dict[str, float],
                 max_tokens: int = 128):
        import ipywidgets as w
        self.pair, self.default_temperature, self.tab_titles = pair, default_temperature, list(prompts_by_tab)
        wide = {"description_width": "initial"}  # labels in full, never "temperat..."
        self.pickers = [w.Dropdown(options=[(f"{p.subcategory}: {p.user_text[:70]}", p) for p in prompts],
                                   description="prompt", layout=w.Layout(width="98%"), style=wide
                                   ).add_class(f"specdec-picker-{title.lower()}")
                        for title, prompts in prompts_by_tab.items()]
        self.tabs = w.Tab(children=[w.VBox([p]) for p in self.pickers], titles=self.tab_titles)
        self.free_text = w.Textarea(placeholder="...or type your own prompt (used instead of the picked one when not "
                                    "empty)", layout=w.Layout(width="98%", height="3.5em"))
        self.temperature = w.FloatSlider(value=default_temperature.get(next(iter(prompts_by_tab), ""), 0.0), min=0.0,
                                         max=1.5, step=0.1, description="temperature", style=wide)
        self.max_tokens = w.IntSlider(value=max_tokens, min=8, max=MAX_TOKENS_LIMIT, step=8,
                                      description="max tokens", style=wide)
        self.mode = w.ToggleButtons(options=[("side by side", True), ("one after the other", False)],
                                    value=bool(pair.own_cores), style={"button_width": "auto"})
        self.button = w.Button(description="Send to both", button_style="primary", icon="play")
        self.panes = {s.name: (w.HTML().add_class(f"specdec-stats-{s.name}"),
                               w.HTML().add_class(f"specdec-answer-{s.name}")) for s in pair.servers}
        columns = [w.VBox([w.HTML(f"<b>{html.escape(name)}</b>"), *pane],
                          layout=w.Layout(width="50%", padding="0 6px")) for name, pane in self.panes.items()]
        self.summary = w.HTML().add_class("specdec-summary")
        self.widget = w.VBox([self.tabs, self.free_text, w.HBox([self.temperature, self.max_tokens]),
                              w.HBox([self.mode, self.button]), w.HBox(columns), self.summary])
        for widget, css in ((self.tabs, "tabs"), (self.free_text, "free-text"), (self.mode, "mode"),
                            (self.button, "send"), (self.widget, "arena")):
            widget.add_class(f"specdec-{css}")  # what the browser tests look for
        self.tabs.observe(self._on_tab, names="selected_index")
        self.button.on_click(self._on_click)

    def _on_tab(self, change) -> None:
        self.temperature.value = self.default_temperature.get(self.tab_titles[change["new"]], self.temperature.value)

    def messages(self) -> list[dict]:
        if typed := self.free_text.value.strip():
            return [{"role": "user", "content": typed}]
        return self.pickers[self.tabs.selected_index or 0].value.messages

    def _show(self, answer: LiveAnswer) -> None:
        stats, text = self.panes[answer.server]
        stats.value = answer.stats_html()
        error = f"\n<span style='color:#b00'>{html.escape(answer.error)}</span>" if answer.error else ""
        text.value = f"<pre style='white-space:pre-wrap;font-size:85%;margin:0'>{html.escape(answer.text)}{error}</pre>"

    def _on_click(self, _=None) -> None:
        self.button.disabled = True
        self.summary.value = "<i>streaming from both servers...</i>"
        for stats, text in self.panes.values():
            stats.value, text.value = "<small><i>waiting for the first token...</i></small>", ""
        messages, at_once = self.messages(), self.mode.value
        sampling = {"temperature": self.temperature.value, "max_tokens": self.max_tokens.value}

        def work() -> None:
            try:
                answers = race(self.pair, messages, at_once=at_once, on_update=self._show, **sampling)
                self.summary.value = race_summary(answers, self.pair.comparison(at_once))
            except Exception as exc:  # keep the panel usable and say what went wrong
                self.summary.value = f"<pre style='color:#b00'>{html.escape(repr(exc))}</pre>"
            finally:
                self.button.disabled = False
        threading.Thread(target=work, daemon=True).start()
