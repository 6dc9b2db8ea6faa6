"""Server lifecycle on real vLLM engines: clear errors, and nothing left running."""

from __future__ import annotations

import os
import time

import pytest
from conftest import our_children

from specdec_helpers.engine import cpu, serving
from specdec_helpers.engine.install import InstallError, check_python
from specdec_helpers.engine.serving import ServerError, VLLMServer


def test_missing_model_directory_fails_before_starting_anything(tmp_path):
    before = len(our_children())
    with pytest.raises(ServerError, match="holds no config.json"):
        VLLMServer(tmp_path / "missing")
    assert len(our_children()) == before


def test_old_python_is_refused_with_the_requirement():
    with pytest.raises(InstallError, match=r"Python >= 3\.11.*3\.10\.12"):
        check_python((3, 10, 12))
    check_python((3, 11, 0))


def test_core_halves_come_from_the_cores_this_process_may_use(monkeypatch):
    """Under taskset (or a pinned test worker) the halves are the allowed cores, not 0 and 1."""
    from specdec_helpers import demo

    monkeypatch.setattr(demo, "usable_core_ids", lambda: [2, 3, 6, 7])
    assert demo.split_cores(2) == ["2-3", "6-7"]
    monkeypatch.setattr(demo, "usable_core_ids", lambda: [5])
    assert demo.split_cores(2) == ["5", "5"]  # one core: shared, so the pair is not "own cores"
    assert cpu.cores_spec([0, 2, 5]) == "0,2,5" and cpu.cores_spec([4]) == "4"


def test_test_workers_get_disjoint_cores():
    """make test's two pinned workers (tests/conftest.py) split the cores without overlap."""
    from conftest import _cores_of_this_worker

    assert _cores_of_this_worker("gw0", 2, [0, 1]) == [0] and _cores_of_this_worker("gw1", 2, [0, 1]) == [1]
    assert _cores_of_this_worker("gw1", 2, [0, 1, 2, 3, 4]) == [2, 3]


def test_temp_folders_of_dead_owners_are_removed_and_live_ones_kept(tmp_path, monkeypatch):
    """A kernel killed outright never runs stop(); the next server start clears its folder."""
    import subprocess
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    finished = subprocess.Popen(["true"])
    finished.wait()  # a process id that no longer exists
    dead = tmp_path / f"{serving.TEMP_PREFIX}{finished.pid}-baseline-abc123"
    live = tmp_path / f"{serving.TEMP_PREFIX}{os.getpid()}-speculative-def456"
    other = tmp_path / "specdec-vllm-notes"  # not ours by name: left alone
    for folder in (dead, live, other):
        folder.mkdir()
        (folder / "socket-file").write_text("")
    assert serving.remove_orphaned_temp_dirs() == [dead]
    assert not dead.exists() and live.exists() and other.exists()


def test_the_suite_also_runs_without_xdist_workers():
    """`python -m pytest tests/test_x.py` (one process, no -n) must work: a learner reruns one test
    like that. The conftest's grouping check reads an option only xdist's workers have."""
    import subprocess
    import sys

    tests = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--collect-only", "-q",
                           os.path.join(tests, "engine", "test_spec_decode.py")], capture_output=True, text=True,
                          cwd=os.path.dirname(tests), timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "INTERNALERROR" not in done.stdout and "test_spec_decode.py::" in done.stdout


def test_a_child_started_with_exit_with_parent_dies_with_its_killed_parent(tmp_path):
    """Voila, JupyterLab (browser test) and servers must not outlive a SIGKILLed parent (a CI timeout)."""
    import signal
    import subprocess
    import sys

    import psutil

    script = ("import subprocess, sys, time\n"
              "from specdec_helpers.engine.pool_guard import exit_with_parent\n"
              "child = subprocess.Popen(['sleep', '120'], preexec_fn=exit_with_parent)\n"
              "print(child.pid, flush=True)\n"
              "time.sleep(120)\n")
    parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    child = psutil.Process(int(parent.stdout.readline()))
    assert child.is_running()
    parent.send_signal(signal.SIGKILL)
    parent.wait()
    deadline = time.time() + 10
    while time.time() < deadline and child.is_running() and child.status() != psutil.STATUS_ZOMBIE:
        time.sleep(0.2)
    assert not child.is_running() or child.status() == psutil.STATUS_ZOMBIE
