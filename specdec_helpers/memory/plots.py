"""Notebook 03's memory budgets as tidy tables, seaborn figures (the title states the finding, the caption
the hardware and models) and an ipywidgets panel that re-plans as the learner changes a setting."""
from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, Callable

import matplotlib.pyplot as plt
import pandas as pd
import seaborn as sns
from IPython.display import DisplayHandle, Markdown, display

from specdec_helpers import memory
from specdec_helpers.memory.budget import Budget

# One colour per component in every figure (in stacking order): blues target, oranges draft, grey reserve.
COMPONENT_COLORS: dict[str, str] = {"target weights": "#1f4e79", "KV cache (target)": "#6fa8dc",
                                    "draft weights": "#c55a11", "KV cache (draft)": "#f4b183",
                                    "activations & overhead": "#8c8c8c", "not given to vLLM": "#eeeeee"}
CONTEXT_CHOICES = (1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072)


def short_name(model: str | None, drop_suffix: bool = False) -> str:
    """``"meta-llama/Llama-3.1-8B-Instruct"`` -> ``"Llama-3.1-8B-Instruct"`` (``drop_suffix``: ``"Llama-3.1-8B"``)."""
    name = str(model).rstrip("/").split("/")[-1] if model else "no draft"
    return name.removesuffix("-Instruct") if drop_suffix else name


def _tokens(n: int) -> str:
    return f"{n // 1024}K" if n >= 1024 and n % 1024 == 0 else f"{n:,}"


def budget_record(budget: Budget) -> dict[str, Any]:
    """The numbers of one budget worth recording, rounded for reading (GB, tokens, sequences)."""
    b = budget
    return {"gpu": b.gpu.name, "gpu_memory_utilization": b.gpu_memory_utilization, "tensor_parallel": b.tensor_parallel,
            "target": b.target, "draft": b.draft, "usable_gb": round(b.usable_gb, 2),
            "target_weights_gb": round(b.target_weights_gb, 2), "draft_weights_gb": round(b.draft_weights_gb, 2),
            "overhead_gb": round(b.overhead_gb, 2), "kv_gb": round(b.kv_pool_gb, 2),
            "kv_bytes_per_token": b.kv_bytes_per_token, "kv_tokens": b.kv_tokens, "context_len": b.context_len,
            "max_concurrent_seqs": b.max_concurrent_seqs, "kv_tokens_without_draft": b.kv_tokens_without_draft,
            "max_concurrent_seqs_without_draft": b.max_concurrent_seqs_without_draft}


def concurrency_by_context(target: Any, draft: Any, contexts: Sequence[int] = CONTEXT_CHOICES,
                           kv_dtypes: Sequence[str] = ("bf16",), **plan_kwargs: Any) -> pd.DataFrame:
    """Concurrent sequences with and without the draft, per context length and KV dtype; a context too long for
    one sequence counts as 0 (vLLM would refuse to start), so a curve can run into the wall."""
    def seqs(model: Any, context: int, kv_dtype: str) -> int:
        try:
            plan = memory.plan_budget(target, model, kv_dtype=kv_dtype, context_len=context, **plan_kwargs)
            return plan.max_concurrent_seqs
        except memory.BudgetError:
            return 0

    setups = (("target alone", None), (f"with draft {short_name(memory.model_shape(draft).name)}", draft))
    return pd.DataFrame([{"kv_dtype": kv_dtype, "context_len": context, "setup": setup,
                          "concurrent_seqs": seqs(model, context, kv_dtype)}
                         for kv_dtype in kv_dtypes for context in contexts for setup, model in setups])


@contextmanager
def _figure(figsize: tuple[float, float], title: str, caption: str | None,
            title_size: int = 11) -> Iterator[tuple[Any, Any]]:
    """A whitegrid figure; on exit the left-aligned title and the caption below."""
    with sns.axes_style("whitegrid"):
        fig, ax = plt.subplots(figsize=figsize)
        yield fig, ax
        ax.set_title(title, fontsize=title_size, loc="left")
        if caption:
            fig.text(0.01, -0.02, caption, ha="left", va="top", fontsize=8, color="#555555", wrap=True)
        fig.tight_layout()


def plot_budgets(budgets: Mapping[str, Budget], title: str, caption: str | None = None):
    """Horizontal stacked bars, one per setup, each adding up to the card (per GPU), labelled with the sequences
    of the context length that fit."""
    table = pd.DataFrame({setup: {r["component"]: r["gb"] for r in b.as_rows()} for setup, b in budgets.items()})
    table = table.T.fillna(0.0)  # a row per setup, a column per component
    with _figure((10, 1.1 + 0.75 * len(budgets)), title, caption) as (fig, ax):
        left = pd.Series(0.0, index=table.index)
        for component in [c for c in COMPONENT_COLORS if c in table]:
            bars = ax.barh(table.index, table[component], left=left, color=COMPONENT_COLORS[component],
                           label=component, edgecolor="white", linewidth=0.8)
            if component != "not given to vLLM":
                ax.bar_label(bars, [f"{gb:.1f}" if gb >= 3.5 else "" for gb in table[component]], label_type="center",
                             fontsize=8, color="white" if "weights" in component else "black")
            left = left + table[component]
        for setup, b in budgets.items():
            ax.text(left[setup] * 1.01, setup,
                    f"{b.kv_tokens:,} KV tokens\n{b.max_concurrent_seqs} x {_tokens(b.context_len)} seqs",
                    va="center", fontsize=8, bbox={"facecolor": "white", "edgecolor": "none", "pad": 1})
        ax.grid(axis="y", visible=False)
        per = " per GPU" if any(b.tensor_parallel > 1 for b in budgets.values()) else ""
        ax.set(xlim=(0, float(left.max()) * 1.22), xlabel=f"GPU memory{per} (GB, 1e9 bytes)", ylabel="")
        ax.invert_yaxis()
        ax.legend(fontsize=8, loc="center left", bbox_to_anchor=(1.01, 0.5), frameon=False)
    return fig


def plot_concurrency(df: pd.DataFrame, title: str, caption: str | None = None):
    with _figure((8, 4.2), title, caption) as (fig, ax):
        sns.lineplot(data=df, x="context_len", y="concurrent_seqs", hue="setup", marker="o", ax=ax,
                     style="kv_dtype" if df["kv_dtype"].nunique() > 1 else None,
                     palette=dict(zip(dict.fromkeys(df["setup"]), ["#1f4e79", "#c55a11", "#6fa8dc", "#f4b183"])))
        ax.set_xscale("log", base=2)
        ticks = sorted(df["context_len"].unique())
        ax.set_xticks(ticks, [_tokens(int(t)) for t in ticks])
        ax.set_yscale("symlog", linthresh=1)
        ax.set_ylim(bottom=0)
        ax.set(xlabel="context length per sequence (tokens)", ylabel="concurrent sequences (count, symlog)")
        ax.legend(fontsize=8, title=None)
    return fig


def plot_kv_check(df: pd.DataFrame, title: str, caption: str | None = None):
    """Grouped bars per ``setup``: ``kv_tokens_predicted`` by the calculator vs ``kv_tokens_reported`` by vLLM."""
    sources = {"kv_tokens_predicted": "calculator (config shape, served dtype)", "kv_tokens_reported": "vLLM (log)"}
    long = df.rename(columns=sources).melt(id_vars="setup", value_vars=list(sources.values()), var_name="source",
                                           value_name="kv_tokens")
    with _figure((7.5, 4), title, caption) as (fig, ax):
        sns.barplot(data=long, x="setup", y="kv_tokens", hue="source", ax=ax, palette=["#6fa8dc", "#1f4e79"])
        for container in ax.containers:
            ax.bar_label(container, labels=[f"{v:,.0f}" for v in container.datavalues], fontsize=8)
        ax.set(xlabel="", ylabel="KV cache capacity (tokens)", ylim=(0, long["kv_tokens"].max() * 1.18))
        ax.legend(fontsize=8, title=None, loc="upper right")
        ax.yaxis.set_major_formatter(lambda v, _: f"{v:,.0f}")
    return fig


def plot_pairs(pair_table: pd.DataFrame, title: str, caption: str | None = None, context_len: int | None = None):
    """Bars per model ``pair``: ``seqs_lost_pct``, the share of concurrent sequences the draft takes away."""
    with _figure((9, 1.2 + 0.6 * len(pair_table)), title, caption, title_size=10) as (fig, ax):
        sns.barplot(data=pair_table, y="pair", x="seqs_lost_pct", color="#c55a11", ax=ax)
        labels = [f"{a} -> {b} seqs (draft = {share:.0%} of KV bytes)" for a, b, share in
                  zip(pair_table["seqs_without_draft"], pair_table["seqs_with_draft"], pair_table["draft_kv_share"])]
        ax.bar_label(ax.containers[0], labels=labels, fontsize=8, padding=3)
        per = f" of {context_len:,} tokens" if context_len else ""
        ax.set(xlim=(0, 100), ylabel="",
               xlabel=f"concurrent sequences{per} the draft takes away (% of the target alone's)")
    return fig


class BudgetExplorer:
    """An ipywidgets panel: pick the settings, see one engine's stacked bar (or why it does not fit). Chart and
    sentence are outputs updated in place by display id, not an ``Output`` widget (``ipywidgets.interact``'s):
    a static export shows them."""

    def __init__(self, target: str = "meta-llama/Llama-3.1-8B-Instruct",
                 draft: str | None = "meta-llama/Llama-3.2-1B-Instruct", gpu: str = "RTX PRO 6000 Blackwell",
                 gpu_memory_utilization: float = 0.45, weight_dtype: str = "bf16", kv_dtype: str = "bf16",
                 context_len: int = 8192, tensor_parallel: int = 1,
                 caption: Callable[[Budget], str] | None = None) -> None:
        self.caption = caption
        self.state: dict[str, Any] = {
            "target": memory.model_shape(target).name, "draft": memory.model_shape(draft).name if draft else None,
            "gpu": memory.gpu_spec(gpu).name, "gpu_memory_utilization": float(gpu_memory_utilization),
            "weight_dtype": weight_dtype, "kv_dtype": kv_dtype, "context_len": int(context_len),
            "tensor_parallel": int(tensor_parallel)}
        self._controls: dict[str, Any] = {}  # the controls and the outputs' display handles, set by show()
        self._outputs: tuple[DisplayHandle, DisplayHandle] | None = None
        self._plan()

    def _plan(self) -> None:  # sets ``budget``, or ``error`` when it does not fit
        try:
            self.budget, self.error = memory.plan_budget(**self.state), None
        except ValueError as exc:  # every calculator error is a ValueError
            self.budget, self.error = None, f"{type(exc).__name__}: {exc}"

    def update(self, **changes: Any) -> Budget | None:
        """Re-plan with settings named as memory.plan_budget's; called from code, it moves the controls too (their
        observers then find the state already changed)."""
        if unknown := set(changes) - set(self.state):
            raise TypeError(f"unknown setting(s) {sorted(unknown)}; known: {sorted(self.state)}")
        self.state.update(changes)
        self._plan()
        for name, value in changes.items():
            if name in self._controls:
                self._controls[name].value = value
        self._render()
        return self.budget

    def _moved(self, name: str, value: Any) -> None:  # a control's observer
        if self.state[name] != value:
            self.update(**{name: value})

    def figure(self):  # the stacked bar of the current budget (None when it does not fit)
        if (b := self.budget) is None:
            return None
        label = f"{short_name(b.target)}" + (f" + {short_name(b.draft)}" if b.draft else "")
        gpus = f"{b.tensor_parallel} x {b.gpu.name}" if b.tensor_parallel > 1 else b.gpu.name
        title = (f"{label} on {gpus} at {b.gpu_memory_utilization:g}: "
                 f"{b.max_concurrent_seqs} sequences of {_tokens(b.context_len)} tokens")
        if b.draft:
            title += f" ({b.max_concurrent_seqs_without_draft} without the draft)"
        return plot_budgets({label: b}, title, self.caption(b) if self.caption else None)

    def _build(self):
        import ipywidgets as w

        models, contexts = memory.known_models(), sorted({*CONTEXT_CHOICES, self.state["context_len"]})
        self._controls = {
            "target": w.Dropdown(options=models, description="target"),
            "draft": w.Dropdown(options=[("(no draft)", None)] + [(m, m) for m in models], description="draft"),
            "gpu": w.Dropdown(options=memory.known_gpus(), description="GPU"),
            "gpu_memory_utilization": w.FloatSlider(min=0.05, max=1.0, step=0.05, description="utilization"),
            "weight_dtype": w.Dropdown(options=["bf16", "fp8", "int4"], description="weight dtype"),
            "kv_dtype": w.Dropdown(options=["bf16", "fp8"], description="KV cache dtype"),
            "context_len": w.SelectionSlider(options=[(_tokens(c), c) for c in contexts], description="context"),
            "tensor_parallel": w.Dropdown(options=[1, 2, 4, 8], description="tensor parallel"),
        }
        for name, control in self._controls.items():
            control.value, control.style.description_width, control.layout.width = self.state[name], "110px", "380px"
            control.observe(lambda change, name=name: self._moved(name, change["new"]), names="value")
        controls = list(self._controls.values())
        return w.HBox([w.VBox(controls[:4]), w.VBox(controls[4:])])

    def _render(self, first: bool = False) -> None:
        """Draw chart (or a note when it does not fit) and sentence: new outputs ``first``, else in place."""
        if self._outputs is None:
            return
        chart = self.figure() or Markdown("**This setup does not fit; the calculator says why below.**")
        words = {"text/plain": self.budget.summary() if self.budget is not None else self.error or ""}
        for handle, content, raw in zip(self._outputs, (chart, words), (False, True)):
            (handle.display if first else handle.update)(content, raw=raw)
        if hasattr(chart, "savefig"):
            plt.close(chart)

    def show(self):
        """Display the controls, then the chart and the sentence."""
        widget = self._build()
        display(widget)
        self._outputs = (DisplayHandle(), DisplayHandle())
        self._render(first=True)
        return widget
