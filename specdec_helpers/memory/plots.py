"""Tables, figures and the interactive explorer for the memory budget (notebook 03).

The arithmetic lives in :mod:`specdec_helpers.memory`; this module only turns its
:class:`~specdec_helpers.memory.Budget` objects into tidy tables, seaborn figures whose title
states the finding and whose caption states the hardware and models, and an ipywidgets panel
that re-plans the budget as the learner changes the target, draft, GPU, utilization, dtypes,
context or tensor parallelism.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Callable

import pandas as pd

from specdec_helpers import memory
from specdec_helpers.memory.budget import Budget

__all__ = [
    "COMPONENT_COLORS",
    "short_name",
    "budget_rows",
    "budget_record",
    "concurrency_by_context",
    "plot_budgets",
    "plot_concurrency",
    "plot_kv_check",
    "plot_pairs",
    "BudgetExplorer",
]

#: One colour per budget component, the same in every figure: blues for the target, oranges
#: for the draft, grey for the reserve, white-ish for memory the engine was not given.
COMPONENT_COLORS: dict[str, str] = {
    "target weights": "#1f4e79",
    "KV cache (target)": "#6fa8dc",
    "draft weights": "#c55a11",
    "KV cache (draft)": "#f4b183",
    "activations & overhead": "#8c8c8c",
    "not given to vLLM": "#eeeeee",
}

CONTEXT_CHOICES = (1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072)


def short_name(model: str | None, drop_suffix: bool = False) -> str:
    """``"meta-llama/Llama-3.1-8B-Instruct"`` -> ``"Llama-3.1-8B-Instruct"`` (for labels);
    with ``drop_suffix`` also without ``-Instruct`` (``"Llama-3.1-8B"``)."""
    if not model:
        return "no draft"
    name = str(model).rstrip("/").split("/")[-1]
    return name.removesuffix("-Instruct") if drop_suffix else name


def _tokens(n: int) -> str:
    return f"{n // 1024}K" if n >= 1024 and n % 1024 == 0 else f"{n:,}"


def budget_rows(budgets: Mapping[str, Budget]) -> pd.DataFrame:
    """Long table (setup, component, gb) of several budgets, in stacking order."""
    rows = []
    for setup, budget in budgets.items():
        for row in budget.as_rows():
            rows.append({"setup": setup, **row})
    return pd.DataFrame(rows)


def budget_record(budget: Budget) -> dict[str, Any]:
    """The numbers of one budget worth recording, rounded for reading (GB, tokens, sequences)."""
    return {
        "gpu": budget.gpu.name,
        "gpu_memory_utilization": budget.gpu_memory_utilization,
        "tensor_parallel": budget.tensor_parallel,
        "target": budget.target,
        "draft": budget.draft,
        "usable_gb": round(budget.usable_gb, 2),
        "target_weights_gb": round(budget.target_weights_gb, 2),
        "draft_weights_gb": round(budget.draft_weights_gb, 2),
        "overhead_gb": round(budget.overhead_gb, 2),
        "kv_gb": round(budget.kv_pool_gb, 2),
        "kv_bytes_per_token": budget.kv_bytes_per_token,
        "kv_tokens": budget.kv_tokens,
        "context_len": budget.context_len,
        "max_concurrent_seqs": budget.max_concurrent_seqs,
        "kv_tokens_without_draft": budget.kv_tokens_without_draft,
        "max_concurrent_seqs_without_draft": budget.max_concurrent_seqs_without_draft,
    }


def concurrency_by_context(
    target: Any,
    draft: Any,
    contexts: Sequence[int] = CONTEXT_CHOICES,
    kv_dtypes: Sequence[str] = ("bf16",),
    **plan_kwargs: Any,
) -> pd.DataFrame:
    """Concurrent sequences with and without the draft, per context length and KV dtype.

    A context too long for even one sequence counts as 0 (vLLM would refuse to start), not
    as an error, so a curve can run into the wall.
    """

    def plan(draft_or_none: Any, context: int, kv_dtype: str) -> Budget | None:
        try:
            return memory.plan_budget(target, draft_or_none, kv_dtype=kv_dtype, context_len=context,
                                      **plan_kwargs)
        except memory.BudgetError:
            return None

    with_label = f"with draft {short_name(memory.model_shape(draft).name)}"
    rows = []
    for kv_dtype in kv_dtypes:
        for context in contexts:
            both = plan(draft, context, kv_dtype)
            if both is not None:
                alone_seqs, draft_seqs = both.max_concurrent_seqs_without_draft, both.max_concurrent_seqs
            else:
                alone = plan(None, context, kv_dtype)
                alone_seqs, draft_seqs = (alone.max_concurrent_seqs if alone else 0), 0
            for setup, seqs in (("target alone", alone_seqs), (with_label, draft_seqs)):
                rows.append({"kv_dtype": kv_dtype, "context_len": context, "setup": setup,
                             "concurrent_seqs": seqs})
    return pd.DataFrame(rows)


def _finish(fig, caption: str | None) -> None:
    if caption:
        fig.text(0.01, -0.02, caption, ha="left", va="top", fontsize=8, color="#555555", wrap=True)
    fig.tight_layout()


def plot_budgets(
    budgets: Mapping[str, Budget],
    title: str,
    caption: str | None = None,
    ax=None,
    annotate: bool = True,
):
    """Horizontal stacked bars, one per setup: where each engine's share of the GPU goes.

    Each bar adds up to the card's memory (per GPU under tensor parallelism); the label at the
    right end says how many sequences of the budget's context length fit.
    """
    import matplotlib.pyplot as plt
    import seaborn as sns

    table = budget_rows(budgets)
    with sns.axes_style("whitegrid"):
        if ax is None:
            fig, ax = plt.subplots(figsize=(10, 1.1 + 0.75 * len(budgets)))
        else:
            fig = ax.figure
        setups = list(budgets)
        components = [c for c in COMPONENT_COLORS if c in set(table["component"])]
        left = pd.Series(0.0, index=setups)
        for component in components:
            part = table[table["component"] == component].set_index("setup")["gb"].reindex(setups).fillna(0.0)
            ax.barh(setups, part, left=left, color=COMPONENT_COLORS[component], label=component,
                    edgecolor="white", linewidth=0.8)
            for setup, gb in part.items():
                if gb >= 3.5 and component != "not given to vLLM":
                    ax.text(left[setup] + gb / 2, setup, f"{gb:.1f}", ha="center", va="center",
                            fontsize=8, color="white" if "weights" in component else "black")
            left = left + part
        if annotate:
            for setup, budget in budgets.items():
                ax.text(left[setup] * 1.01, setup,
                        f"{budget.kv_tokens:,} KV tokens\n{budget.max_concurrent_seqs} x {_tokens(budget.context_len)} seqs",
                        va="center", fontsize=8, bbox={"facecolor": "white", "edgecolor": "none", "pad": 1})
            ax.set_xlim(0, float(left.max()) * 1.22)
        ax.grid(axis="y", visible=False)
        per_gpu = any(b.tensor_parallel > 1 for b in budgets.values())
        ax.set_xlabel("GPU memory per GPU (GB, 1e9 bytes)" if per_gpu else "GPU memory (GB, 1e9 bytes)")
        ax.set_ylabel("")
        ax.invert_yaxis()
        ax.set_title(title, fontsize=11, loc="left")
        ax.legend(fontsize=8, loc="center left", bbox_to_anchor=(1.01, 0.5), frameon=False)
        _finish(fig, caption)
    return fig


def plot_concurrency(df: pd.DataFrame, title: str, caption: str | None = None):
    """Concurrent sequences against context length (log scale), target alone vs with draft."""
    import matplotlib.pyplot as plt
    import seaborn as sns

    with sns.axes_style("whitegrid"):
        fig, ax = plt.subplots(figsize=(8, 4.2))
        style = "kv_dtype" if df["kv_dtype"].nunique() > 1 else None
        setups = list(dict.fromkeys(df["setup"]))
        palette = dict(zip(setups, ["#1f4e79", "#c55a11", "#6fa8dc", "#f4b183"]))
        sns.lineplot(data=df, x="context_len", y="concurrent_seqs", hue="setup", style=style,
                     marker="o", palette=palette, ax=ax)
        ax.set_xscale("log", base=2)
        ticks = sorted(df["context_len"].unique())
        ax.set_xticks(ticks, [_tokens(int(t)) for t in ticks])
        ax.set_yscale("symlog", linthresh=1)
        ax.set_ylim(bottom=0)
        ax.set_xlabel("context length per sequence (tokens)")
        ax.set_ylabel("concurrent sequences (count, symlog)")
        ax.set_title(title, fontsize=11, loc="left")
        ax.legend(fontsize=8, title=None)
        _finish(fig, caption)
    return fig


def plot_kv_check(df: pd.DataFrame, title: str, caption: str | None = None):
    """Grouped bars: KV tokens predicted by the calculator vs reported by vLLM, per setup.

    ``df`` has columns ``setup``, ``kv_tokens_predicted``, ``kv_tokens_reported``.
    """
    import matplotlib.pyplot as plt
    import seaborn as sns

    long = df.melt(id_vars="setup", value_vars=["kv_tokens_predicted", "kv_tokens_reported"],
                   var_name="source", value_name="kv_tokens")
    long["source"] = long["source"].map({"kv_tokens_predicted": "calculator (from config.json)",
                                         "kv_tokens_reported": "vLLM (start-up log)"})
    with sns.axes_style("whitegrid"):
        fig, ax = plt.subplots(figsize=(7.5, 4))
        sns.barplot(data=long, x="setup", y="kv_tokens", hue="source", ax=ax,
                    palette=["#6fa8dc", "#1f4e79"])
        for container in ax.containers:
            ax.bar_label(container, labels=[f"{v:,.0f}" for v in container.datavalues], fontsize=8)
        ax.set_xlabel("")
        ax.set_ylabel("KV cache capacity (tokens)")
        ax.set_title(title, fontsize=11, loc="left")
        ax.legend(fontsize=8, title=None, loc="upper right")
        ax.set_ylim(0, long["kv_tokens"].max() * 1.18)
        ax.yaxis.set_major_formatter(lambda v, _: f"{v:,.0f}")
        _finish(fig, caption)
    return fig


class BudgetExplorer:
    """An ipywidgets panel: pick target, draft, GPU, utilization, dtypes, context and tensor
    parallelism, and see the stacked bar of one engine's budget and the concurrency it allows.

    The initial state is planned when the panel is built, without any interaction, so
    ``explorer.budget`` (or ``explorer.error``) is there for papermill and for tests.
    A setup that does not fit shows the calculator's message instead of a chart.

    The chart and the sentence below the controls are ordinary cell outputs with a display id,
    updated in place when a control moves (no ``Output`` widget): a batch run (papermill) or a
    static export shows the initial state like any figure, and nothing waits on a frontend.
    Without ipywidgets, :meth:`show` draws the initial state only.
    """

    def __init__(
        self,
        target: str = "meta-llama/Llama-3.1-8B-Instruct",
        draft: str | None = "meta-llama/Llama-3.2-1B-Instruct",
        gpu: str = "RTX PRO 6000 Blackwell",
        gpu_memory_utilization: float = 0.45,
        weight_dtype: str = "bf16",
        kv_dtype: str = "bf16",
        context_len: int = 8192,
        tensor_parallel: int = 1,
        caption: Callable[[Budget], str] | None = None,
    ) -> None:
        self.caption = caption
        self.state: dict[str, Any] = {
            "target": memory.model_shape(target).name,
            "draft": memory.model_shape(draft).name if draft else None,
            "gpu": memory.gpu_spec(gpu).name,
            "gpu_memory_utilization": float(gpu_memory_utilization),
            "weight_dtype": weight_dtype,
            "kv_dtype": kv_dtype,
            "context_len": int(context_len),
            "tensor_parallel": int(tensor_parallel),
        }
        self.budget: Budget | None = None
        self.error: str | None = None
        self.widget = None
        self._chart = None  # display handles, set by show()
        self._words = None
        self._syncing = False
        self._plan()

    # -- the model behind the panel -------------------------------------------------------
    def _plan(self) -> None:
        try:
            self.budget = memory.plan_budget(**self.state)
            self.error = None
        except ValueError as exc:  # every calculator error is a ValueError
            self.budget = None
            self.error = f"{type(exc).__name__}: {exc}"

    def update(self, **changes: Any) -> Budget | None:
        """Change some settings (same names as :func:`memory.plan_budget`) and re-plan."""
        unknown = set(changes) - set(self.state)
        if unknown:
            raise TypeError(f"unknown setting(s) {sorted(unknown)}; known: {sorted(self.state)}")
        self.state.update(changes)
        self._plan()
        if self.widget is not None and not self._syncing:  # called from code: move the controls too
            self._syncing = True
            try:
                for name, value in changes.items():
                    self._controls[name].value = value
            finally:
                self._syncing = False
        self._render()
        return self.budget

    def text(self) -> str:
        """The current budget in words, or the reason it does not fit."""
        return self.budget.summary() if self.budget is not None else self.error or ""

    def figure(self):
        """The stacked bar of the current budget (None when it does not fit)."""
        if self.budget is None:
            return None
        b = self.budget
        label = f"{short_name(b.target)}" + (f" + {short_name(b.draft)}" if b.draft else "")
        gpus = f"{b.tensor_parallel} x {b.gpu.name}" if b.tensor_parallel > 1 else b.gpu.name
        title = (f"{label} on {gpus} at {b.gpu_memory_utilization:g}: "
                 f"{b.max_concurrent_seqs} sequences of {_tokens(b.context_len)} tokens")
        if b.draft:
            title += f" ({b.max_concurrent_seqs_without_draft} without the draft)"
        caption = self.caption(b) if self.caption else None
        return plot_budgets({label: b}, title, caption)

    # -- the widgets ------------------------------------------------------------------------
    def _build(self):
        import ipywidgets as w

        models = memory.known_models()
        s = self.state
        style = {"description_width": "110px"}
        layout = w.Layout(width="380px")
        self._controls = {
            "target": w.Dropdown(options=models, value=s["target"], description="target",
                                 style=style, layout=layout),
            "draft": w.Dropdown(options=[("(no draft)", None)] + [(m, m) for m in models],
                                value=s["draft"], description="draft", style=style, layout=layout),
            "gpu": w.Dropdown(options=memory.known_gpus(), value=s["gpu"], description="GPU",
                              style=style, layout=layout),
            "gpu_memory_utilization": w.FloatSlider(value=s["gpu_memory_utilization"], min=0.05, max=1.0,
                                                    step=0.05, description="utilization",
                                                    style=style, layout=layout, readout_format=".2f"),
            "weight_dtype": w.Dropdown(options=["bf16", "fp8", "int4"], value=s["weight_dtype"],
                                       description="weight dtype", style=style, layout=layout),
            "kv_dtype": w.Dropdown(options=["bf16", "fp8"], value=s["kv_dtype"],
                                   description="KV cache dtype", style=style, layout=layout),
            "context_len": w.SelectionSlider(options=[(_tokens(c), c) for c in CONTEXT_CHOICES],
                                             value=s["context_len"] if s["context_len"] in CONTEXT_CHOICES else 8192,
                                             description="context", style=style, layout=layout),
            "tensor_parallel": w.Dropdown(options=[1, 2, 4, 8], value=s["tensor_parallel"],
                                          description="tensor parallel", style=style, layout=layout),
        }
        for name, control in self._controls.items():
            control.observe(lambda change, name=name: self._changed(name, change["new"]), names="value")
        names = list(self._controls)
        left = w.VBox([self._controls[n] for n in names[:4]])
        right = w.VBox([self._controls[n] for n in names[4:]])
        self.widget = w.HBox([left, right])
        return self.widget

    def _changed(self, name: str, value: Any) -> None:
        if not self._syncing:  # a learner moved a control
            self.update(**{name: value})

    def _outputs(self) -> tuple[Any, Any]:
        """What to show: the figure (or a one-line note when the setup does not fit) and the text."""
        from IPython.display import Markdown

        fig = self.figure()
        if fig is None:
            return Markdown("**This setup does not fit; the calculator says why below.**"), self.text()
        return fig, self.text()

    def _render(self) -> None:
        if self._chart is None:
            return
        import matplotlib.pyplot as plt

        chart, words = self._outputs()
        self._chart.update(chart)
        self._words.update({"text/plain": words}, raw=True)
        if hasattr(chart, "savefig"):
            plt.close(chart)

    def show(self):
        """Display the controls, then the chart and the sentence for the current state."""
        import matplotlib.pyplot as plt
        from IPython.display import display

        try:
            widget = self.widget or self._build()
        except ImportError:
            widget = None
            print("(ipywidgets is not installed: pip install ipywidgets for the interactive panel)")
        else:
            display(widget)
        chart, words = self._outputs()
        self._chart = display(chart, display_id=True)
        self._words = display({"text/plain": words}, raw=True, display_id=True)
        if hasattr(chart, "savefig"):
            plt.close(chart)
        return widget


def plot_pairs(pair_table: pd.DataFrame, title: str, caption: str | None = None,
               context_len: int | None = None):
    """Bars per model pair: the share of concurrent sequences the draft takes away, labelled
    with the sequences before and after ("22 -> 16").

    ``pair_table`` has columns ``pair``, ``draft_kv_share``, ``seqs_without_draft``,
    ``seqs_with_draft`` and ``seqs_lost_pct``.
    """
    import matplotlib.pyplot as plt
    import seaborn as sns

    with sns.axes_style("whitegrid"):
        fig, ax = plt.subplots(figsize=(9, 1.2 + 0.6 * len(pair_table)))
        sns.barplot(data=pair_table, y="pair", x="seqs_lost_pct", color="#c55a11", ax=ax)
        labels = [f"{a} -> {b} seqs (draft = {share:.0%} of KV bytes)" for a, b, share in
                  zip(pair_table["seqs_without_draft"], pair_table["seqs_with_draft"], pair_table["draft_kv_share"])]
        ax.bar_label(ax.containers[0], labels=labels, fontsize=8, padding=3)
        ax.set_xlim(0, 100)
        per = f" of {context_len:,} tokens" if context_len else ""
        ax.set_xlabel(f"concurrent sequences{per} the draft takes away (% of the target alone's)")
        ax.set_ylabel("")
        ax.set_title(title, fontsize=10, loc="left")
        _finish(fig, caption)
    return fig
