"""``make lab``: JupyterLab on the series, with what ``make run`` gives its notebooks. One run folder for this lab
session (``runs/<timestamp>-lab/``, handed to every kernel through ``SPECDEC_RUN_DIR``), so 05 and 06 read the
recommendation 04 made in this session and never one an earlier session left behind; and one pool of vLLM
servers shared by the notebooks (one start per configuration), every server stopped when JupyterLab exits."""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from specdec_helpers.report.runs import REPO_ROOT, RUN_DIR_ENV
from tools.server_pool import RunPool


def lab_run_dir(root: Path = REPO_ROOT / "runs") -> Path:
    """A new run folder for one lab session."""
    path = root / f"{time.strftime('%Y%m%d-%H%M%S')}-lab"
    path.mkdir(parents=True, exist_ok=False)
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    jupyter_args = parser.parse_known_args(argv)[1]  # everything is passed to `jupyter lab` (e.g. --no-browser)
    run_dir = lab_run_dir()
    pool = RunPool(run_dir / "servers", os.getpid())
    env = {**os.environ, **pool.environment(), RUN_DIR_ENV: str(run_dir)}
    print(f"this session's run folder: {run_dir} (a notebook's empty run_dir means it); "
          "the notebooks share their vLLM servers, and every server stops when JupyterLab exits", flush=True)
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    try:
        return subprocess.call(["jupyter", "lab", str(REPO_ROOT / "notebooks"), *jupyter_args], env=env)
    except KeyboardInterrupt:
        return 130
    finally:
        still = pool.stop_all()  # (and if this failed, each server's guard stops it once this process exits)
        print(f"vLLM servers of this session stopped{'; still alive: ' + str(still) if still else ''}", flush=True)


def _exit_on_sigterm(signum, frame) -> None:  # so that the finally block above stops the servers
    raise SystemExit(128 + signum)


if __name__ == "__main__":
    sys.exit(main())
