"""The run's ledger beyond servers: every start counted (a notebook's own too), and the order ``make run`` executes notebooks in (no server starts here)."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import nbformat

from specdec_helpers.engine import pool
from specdec_helpers.engine.serving import VLLMServer
from tools.run_series import NOTEBOOKS_DIR, execution_order, find_notebooks, uses_shared_servers
from tools.server_pool import RunPool


def _model(tmp_path: Path, name: str) -> Path:
    folder = tmp_path / name
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"torch_dtype": "bfloat16"}))
    (folder / "model.safetensors").write_bytes(b"\0" * 100)
    return folder


def test_own_starts_count_among_the_runs_starts(tmp_path, monkeypatch):
    monkeypatch.setenv(pool.NOTEBOOK_ENV, "01_how_it_works")
    ledger = RunPool(tmp_path / "pool", os.getpid())
    server = VLLMServer(_model(tmp_path, "m"), name="speculative", log_dir=tmp_path, shared=False)
    ledger.note_own_start(server)
    summary = ledger.summary()
    assert (summary["starts"], summary["shared_starts"], summary["own_starts"]) == (1, 0, 1)
    assert summary["per_notebook"] == {"01_how_it_works": {"start": 0, "own": 1, "reuse": 0}}
    assert not ledger.running()  # counted, not tracked: the notebook stops its own server


def test_notebooks_with_only_servers_of_their_own_run_first_and_say_so_in_their_metadata():
    notebooks = find_notebooks()
    ordered = execution_order(notebooks)
    own_only = [n.stem for n in notebooks if not uses_shared_servers(n)]
    assert own_only == ["01_how_it_works"]
    assert [n.stem for n in ordered] == own_only + [n.stem for n in notebooks if n.stem not in own_only]
    for notebook in notebooks:  # the metadata must tell the truth: every server of such a notebook is its own
        code = "\n".join(c.source for c in nbformat.read(notebook, as_version=4).cells if c.cell_type == "code")
        calls = re.findall(r"VLLMServer\((?:[^()]|\([^()]*\))*\)", code)
        if not uses_shared_servers(notebook):
            assert calls and all("shared=False" in call for call in calls), notebook.name
    assert NOTEBOOKS_DIR.is_dir()


def test_the_reserve_for_other_programs_is_off_by_default_and_counts_their_servers(monkeypatch):
    from specdec_helpers.engine.pool import RESERVE_ENV, reserve_bytes

    monkeypatch.delenv(RESERVE_ENV, raising=False)
    assert reserve_bytes() == 0  # make run: the machine is the run's
    monkeypatch.setenv(RESERVE_ENV, "1.5")
    # vLLM servers outside the pool (another pytest worker's) already hold part of what the reserve is for
    assert 0 <= reserve_bytes() <= 1.5 * 2**30


def test_making_room_stops_idle_servers_least_used_then_least_recently_used_and_never_a_busy_one(tmp_path):
    """The pool's eviction order, on real process groups (a stand-in process per server, no vLLM): idle servers go
    fewest uses first, then the one unused longest; a server a live process holds is never stopped."""
    import subprocess
    import sys

    from specdec_helpers.engine.processes import group_alive

    ledger = RunPool(tmp_path / "ledger", os.getpid())
    entries = {  # name: (uses, last_used, held by a live process)
        "often-old": (5, 100.0, False), "once-recent": (1, 300.0, False), "once-old": (1, 200.0, False),
        "busy": (0, 50.0, True)}
    procs = []
    data = {"entries": {}, "events": []}
    for name, (uses, last_used, busy) in entries.items():
        proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"], start_new_session=True)
        procs.append(proc)
        data["entries"][name] = pool.Entry(key=name, name=name, pgid=proc.pid, port=0, log_path="", startup_s=0.0,
                                           last_used=last_used, uses=uses, users=[os.getpid()] if busy else [])
    try:
        with ledger.lock:
            ledger._write(data)
        assert ledger.stop_idle() == 3  # every idle server, in the pool's order
        stopped = [e["name"] for e in ledger.events() if e["event"] == "stop"]
        assert stopped == ["once-old", "once-recent", "often-old"]  # "busy" stays up
        assert group_alive(data["entries"]["busy"].pgid)
        assert not any(group_alive(data["entries"][n].pgid) for n in stopped)
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()
