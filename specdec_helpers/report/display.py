"""Show results to a learner: rich HTML in JupyterLab, a plain table under papermill or a terminal."""

from __future__ import annotations

import html
from collections.abc import Iterator
from contextlib import contextmanager

import pandas as pd


def side_by_side(df: pd.DataFrame, columns: tuple[str, ...] = ("ttft_s", "decode_tokens_per_s",
                                                              "completion_tokens", "acceptance_rate")) -> None:
    """One column per server: its answer and its numbers, for the same prompt."""
    from IPython.display import display

    cells = []
    for _, row in df.iterrows():
        stats = "<br>".join(f"{c}: {row[c]:.3g}" if isinstance(row[c], float) else f"{c}: {row[c]}"
                            for c in columns if c in row and pd.notna(row[c]))
        cells.append(f"<td style='vertical-align:top;width:{100 // max(len(df), 1)}%'>"
                     f"<b>{html.escape(str(row['server']))}</b>"
                     f"<pre style='white-space:pre-wrap'>{html.escape(row['text'])}</pre><small>{stats}</small></td>")
    plain = df[["server", *[c for c in columns if c in df]]].to_string(index=False, na_rep="-")  # "-": not speculating
    display({"text/html": f"<table><tr>{''.join(cells)}</tr></table>", "text/plain": plain}, raw=True)


@contextmanager
def progress_bar(total: int, desc: str, enabled: bool = True) -> Iterator:
    """A tqdm bar whose saved text ends at its last count: GitHub and text dumps show a notebook bar (a widget) as first
    displayed, 0/n, unless that display is updated when it closes, also when the cell fails (how far it got)."""
    from IPython.display import display
    from tqdm.auto import tqdm
    from tqdm.notebook import tqdm as notebook_tqdm
    widget = enabled and issubclass(tqdm, notebook_tqdm)
    bar = tqdm(total=total, desc=desc, disable=not enabled, **({"display": False} if widget else {}))
    shown = display(bar.container, display_id=True) if widget else None
    try:
        yield bar
    finally:
        bar.close()
        if shown is not None:
            shown.update(bar.container)
