"""The talk's live demo: a baseline and a speculative server, side by side, on the same prompt.

``ServerPair`` keeps both servers running across notebook cells (the interactive panel needs them
after its cell has finished), so it cannot live in one ``with`` block. It is stopped by its
``stop()`` in the notebook's last cell, at kernel exit (atexit), and when the kernel dies
(PR_SET_PDEATHSIG); nothing else holds it.

On a CPU the two servers get separate cores so they do not slow each other down when both answer
at once; on a GPU they split the card's memory (``gpu_memory_utilization`` 0.45 each, as in the
talk).
"""

from __future__ import annotations

import html
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Sequence

import pandas as pd

from .measure import measure_request
from .provenance import usable_cpus
from .serving import ServerGroup, VLLMServer


def split_cores(n_parts: int = 2) -> list[str]:
    """Disjoint core ranges for ``VLLM_CPU_OMP_THREADS_BIND``: '0' and '1' on a 2-core machine."""
    cores = usable_cpus()
    size = max(cores // n_parts, 1)
    ranges = []
    for i in range(n_parts):
        first = min(i * size, cores - 1)
        last = min(first + size - 1, cores - 1)
        ranges.append(str(first) if first == last else f"{first}-{last}")
    return ranges


class ServerPair:
    """Baseline and speculative servers of one target, started together."""

    def __init__(self, target_dir, speculative_config: dict[str, Any], **server_options: Any):
        self.baseline = VLLMServer(target_dir, name="baseline", **server_options)
        self.speculative = VLLMServer(target_dir, name="speculative", speculative_config=speculative_config,
                                      **server_options)
        if self.baseline.install.platform == "cpu":
            self.baseline.cpu_threads_bind, self.speculative.cpu_threads_bind = split_cores(2)
        self._group = ServerGroup([self.baseline, self.speculative])

    @property
    def servers(self) -> list[VLLMServer]:
        return [self.baseline, self.speculative]

    def start(self) -> "ServerPair":
        self._group.__enter__()
        return self

    def stop(self) -> None:
        self._group.__exit__(None, None, None)

    def run_both(self, messages: Sequence[dict], *, temperature: float, max_tokens: int,
                 seed: int = 0) -> pd.DataFrame:
        """The same request to both servers at the same moment, as in the talk's demo."""
        with ThreadPoolExecutor(max_workers=2) as pool:
            futures = {s.name: pool.submit(measure_request, s, messages, temperature=temperature,
                                           max_tokens=max_tokens, seed=seed) for s in self.servers}
        rows = []
        for name, future in futures.items():
            m = future.result()
            rows.append({"server": name, "text": m.result.text, "ttft_s": m.result.ttft_s,
                         "e2e_s": m.result.e2e_s, "completion_tokens": m.result.completion_tokens,
                         "decode_tokens_per_s": m.result.decode_tokens_per_s,
                         "acceptance_rate": m.counters.acceptance_rate if name == "speculative" else float("nan")})
        df = pd.DataFrame(rows)
        base = df.set_index("server")
        df["speedup_tokens_per_s"] = df["decode_tokens_per_s"] / base.loc["baseline", "decode_tokens_per_s"]
        return df


def _result_html(df: pd.DataFrame) -> str:
    cells = []
    for _, row in df.iterrows():
        accept = "" if pd.isna(row["acceptance_rate"]) else f" · acceptance {row['acceptance_rate']:.0%}"
        speed = "" if row["server"] == "baseline" else f" · {row['speedup_tokens_per_s']:.2f}x tokens/s"
        cells.append(
            f"<td style='vertical-align:top;width:50%;padding:4px'><b>{row['server']}</b><br>"
            f"<small>TTFT {row['ttft_s'] * 1000:.0f} ms · {row['decode_tokens_per_s']:.1f} tokens/s{accept}{speed}</small>"
            f"<pre style='white-space:pre-wrap;font-size:85%'>{html.escape(row['text'])}</pre></td>")
    return f"<table style='width:100%'><tr>{''.join(cells)}</tr></table>"


def demo_panel(pair: ServerPair, prompts_by_tab: dict[str, list], default_temperature: dict[str, float],
               max_tokens: int = 128):
    """Tabs (e.g. Structured, Creative), a prompt picker, temperature and max-token controls, and a
    Run button that sends the prompt to both servers at once and shows both answers side by side."""
    import ipywidgets as w

    tabs = []
    for title, prompts in prompts_by_tab.items():
        picker = w.Dropdown(options=[(f"{p.subcategory}: {p.user_text[:60]}", p) for p in prompts],
                            description="prompt", layout=w.Layout(width="95%"))
        temperature = w.FloatSlider(value=default_temperature.get(title, 0.0), min=0.0, max=1.5, step=0.1,
                                    description="temperature")
        tokens = w.IntSlider(value=max_tokens, min=16, max=512, step=16, description="max tokens")
        button = w.Button(description="Run both", button_style="primary")
        output = w.HTML()

        def on_click(_, picker=picker, temperature=temperature, tokens=tokens, output=output, button=button):
            button.disabled = True
            output.value = "<i>running on both servers...</i>"

            def work():
                try:
                    df = pair.run_both(picker.value.messages, temperature=temperature.value, max_tokens=tokens.value)
                    output.value = _result_html(df)
                except Exception as exc:  # show it in the panel, keep the panel usable
                    output.value = f"<pre style='color:#b00'>{html.escape(repr(exc))}</pre>"
                finally:
                    button.disabled = False

            threading.Thread(target=work, daemon=True).start()

        button.on_click(on_click)
        tabs.append(w.VBox([picker, w.HBox([temperature, tokens, button]), output]))
    panel = w.Tab(children=tabs)
    for i, title in enumerate(prompts_by_tab):
        panel.set_title(i, title)
    return panel
