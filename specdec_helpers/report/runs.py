"""The run folder, where a notebook puts its tables, figures and server logs: one per run (``make run``:
``runs/<timestamp>-<profile>/``; by hand: ``runs/interactive/``), so that index.html links every artefact."""

from __future__ import annotations

from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]


def resolve_run_dir(run_dir: str | Path | None = None) -> Path:
    """The run folder (created): the given one, or ``runs/interactive`` in the repository."""
    path = Path(run_dir) if run_dir else REPO_ROOT / "runs" / "interactive"
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
