"""Show results to a learner: rich HTML in JupyterLab, a plain table under papermill or a terminal."""

from __future__ import annotations

import html

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
