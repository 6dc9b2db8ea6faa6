"""The run folder, where a notebook puts its tables, figures and server logs: one per run (``make run``:
``runs/<timestamp>-<profile>/``; ``make lab``: ``runs/<timestamp>-lab/`` for the session; a notebook opened otherwise:
``runs/interactive/``), so that index.html links every artefact."""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import TYPE_CHECKING, Iterable

if TYPE_CHECKING:  # pandas is imported where a table is read: saving a figure does not need it
    import pandas as pd

REPO_ROOT = Path(__file__).resolve().parents[2]
#: ``make lab`` names its session's run folder here, so every notebook of one lab session writes and reads one folder
RUN_DIR_ENV = "SPECDEC_RUN_DIR"


def resolve_run_dir(run_dir: str | Path | None = None) -> Path:
    """The run folder (created): the given one, else this lab session's (``make lab``), else ``runs/interactive``."""
    path = Path(run_dir) if run_dir else Path(os.environ.get(RUN_DIR_ENV) or REPO_ROOT / "runs" / "interactive")
    for sub in ("results", "figures", "logs"):
        (path / sub).mkdir(parents=True, exist_ok=True)
    return path.resolve()


def save_table(df, run_dir: str | Path, name: str) -> Path:  # as CSV under ``results/``
    path = resolve_run_dir(run_dir) / "results" / f"{name}.csv"
    df.to_csv(path, index=False)
    return path


def save_figure(fig, run_dir: str | Path, name: str) -> Path:  # as PNG under ``figures/``
    path = resolve_run_dir(run_dir) / "figures" / f"{name}.png"
    fig.savefig(path, dpi=120, bbox_inches="tight")
    return path


def speedups_in_run(run_dir: str | Path, draft: str | Iterable[str], k: int) -> "pd.DataFrame":
    """Every speedup this run folder holds for ``draft`` at ``k`` (04's section 3 and its k sweep, 05 at temperature
    0, 07), one row per notebook, measurement and class, so a reader sees how far two measurements of one
    configuration in one run lie apart: the paired median end-to-end speedup with its 95% interval (or, with fewer
    than 8 prompts, its range over them), the paired median decode speedup, how many pairs, and ``prompts``: the
    prompt ids and answer cap ("@N tokens") as one key, since rows compare only on one setup. ``draft``: its name,
    or every name it goes by (notebooks 04 and 07 record the candidate's key, 05's provenance its hub id)."""
    import pandas as pd

    names = {draft} if isinstance(draft, str) else set(draft)
    results = resolve_run_dir(run_dir) / "results"

    def read(name: str) -> pd.DataFrame:
        path = results / f"{name}.csv"
        return pd.read_csv(path) if path.exists() else pd.DataFrame()

    def of_draft(name: str) -> list[dict]:  # the table's rows of this draft at this k
        return [r for r in read(name).to_dict(orient="records") if r.get("candidate") in names and int(r["k"]) == k]

    def prompt_ids(requests: pd.DataFrame, cls: str, server: str | None = None) -> str:  # the cap where recorded
        if requests.empty:
            return ""
        mine = requests[(requests["class"] == cls) & ((requests["server"] == server) if server else True)]
        caps = sorted({int(c) for c in mine.get("max_tokens", pd.Series(dtype=float)).dropna()})
        return " ".join(sorted(set(mine["prompt_id"]))) + "".join(f" @{c} tokens" for c in caps)

    rows = []

    def add(notebook: str, what: str, cls: str, r: dict, ids: str, speedup: str = "measured_speedup",
            decode: str = "measured_decode_speedup", n: str = "n_pairs") -> None:
        low, high, kind = r.get("speedup_ci_low"), r.get("speedup_ci_high"), "95% interval"
        if pd.isna(low) or pd.isna(high):
            low, high, kind = r.get("speedup_min"), r.get("speedup_max"), "range over prompts"
        rows.append({"notebook": notebook, "measurement": what, "class": cls, "n_pairs": int(r.get(n) or 0),
                     "speedup": r.get(speedup), "low": low, "high": high, "spread": kind,
                     "decode_speedup": r.get(decode), "prompts": ids})

    requests_04 = read("04_requests")
    for r in of_draft("04_candidates"):
        add("04", "section 3: candidates", "structured", r, prompt_ids(requests_04, "structured", r["candidate"]))
    sweep_requests, pairs = read("04_k_sweep_requests"), read("04_k_sweep_pairs")
    if not sweep_requests.empty:
        sweep_requests = sweep_requests[sweep_requests["num_speculative_tokens"].isin([0, k])]
    for r in of_draft("04_k_sweep"):  # no interval: the range of its unflagged pairs
        kept = pairs[(pairs["k"] == k) & (pairs["class"] == r["class"]) & ~pairs["flagged"].astype(bool)] \
            if len(pairs) else pairs
        r = {**r, "speedup_min": kept["speedup"].min() if len(kept) else math.nan,
             "speedup_max": kept["speedup"].max() if len(kept) else math.nan}
        add("04", "section 6: k sweep", r["class"], r, prompt_ids(sweep_requests, r["class"], r["candidate"]), n="n")
    requests_05 = read("05_requests")
    spec_05 = requests_05[requests_05["server"] != "baseline"] if not requests_05.empty else requests_05
    if not spec_05.empty and spec_05["draft_model"].isin(names).all() \
            and (spec_05["num_speculative_tokens"] == k).all():
        for r in read("05_cells").to_dict(orient="records"):
            if float(r["temperature"]) == 0.0:
                add("05", "structured vs creative, T = 0", r["class"], r, prompt_ids(requests_05, r["class"]),
                    "speedup", "decode_speedup", "n")
    requests_07 = read("07_requests")
    for r in of_draft("07_by_class"):
        add("07", "the verdict", r["class"], r, prompt_ids(requests_07, r["class"], r["candidate"]))
    return pd.DataFrame(rows, columns=["notebook", "measurement", "class", "n_pairs", "speedup", "low", "high",
                                       "spread", "decode_speedup", "prompts"])
