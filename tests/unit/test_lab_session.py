"""`make lab`: one run folder per lab session, handed to every kernel, and a server pool stopped when JupyterLab
exits; a recommendation notebook 04 left in ``runs/interactive`` by another session is not used by 05 or 06."""

from __future__ import annotations

import os
import time

import pytest

from specdec_helpers.costmodel.rules import draft_rule
from specdec_helpers.report import recommendation
from specdec_helpers.report.record import keep_records_in, record, records_file
from specdec_helpers.report.runs import RUN_DIR_ENV, resolve_run_dir

DRAFT = {"candidate": "d", "method": "draft_model", "draft_model": "d", "target_model": "t"}


def _recorded(run_dir, age_s: float):
    keep_records_in(run_dir, "04_choosing_a_draft")
    record("recommendation", DRAFT)
    path = records_file(run_dir, "04_choosing_a_draft")
    os.utime(path, (time.time() - age_s, time.time() - age_s))


def test_an_empty_run_dir_is_the_lab_sessions_folder_when_make_lab_names_one(tmp_path, monkeypatch):
    monkeypatch.setenv(RUN_DIR_ENV, str(tmp_path / "20261206-120000-lab"))
    assert resolve_run_dir("") == (tmp_path / "20261206-120000-lab").resolve()
    assert resolve_run_dir(tmp_path / "mine") == (tmp_path / "mine").resolve()  # a given folder wins
    monkeypatch.delenv(RUN_DIR_ENV)
    assert resolve_run_dir("").name == "interactive"


@pytest.mark.parametrize("folder, age_h, used", [("interactive", 0.5, True), ("interactive", 30, False),
                                                 ("20261206-033815-cpu-coder", 30, True)])
def test_a_recommendation_is_used_unless_another_session_left_it_in_runs_interactive(tmp_path, folder, age_h, used):
    run_dir = tmp_path / folder
    _recorded(run_dir, age_h * 3600)
    found, where = recommendation.find_recommendation(run_dir)
    assert (found == DRAFT) is used, where
    assert ("h ago" in where) and (("another session" in where) is not used)
    choice = draft_rule(found, where, "profile-draft", "t")
    assert choice.draft_model == ("d" if used else "profile-draft") and choice.from_recommendation is used


def test_make_lab_hands_its_kernels_one_run_folder_and_the_pool_and_stops_the_pool_at_exit(tmp_path, monkeypatch):
    from tools import lab

    seen = {}

    def jupyter(cmd, env):  # JupyterLab itself is not started here: what it would inherit is what is tested
        seen.update(cmd=cmd, env=env)
        return 0

    monkeypatch.setattr(lab, "lab_run_dir", lambda: tmp_path / "20261206-120000-lab")
    monkeypatch.setattr(lab.subprocess, "call", jupyter)
    stopped = []
    monkeypatch.setattr(lab.RunPool, "stop_all", lambda self: stopped.append(self.folder) or [])
    assert lab.main(["--no-browser"]) == 0
    env = seen["env"]
    assert env[RUN_DIR_ENV] == str(tmp_path / "20261206-120000-lab")
    assert seen["cmd"][:2] == ["jupyter", "lab"] and seen["cmd"][-1] == "--no-browser"
    from specdec_helpers.engine.pool import OWNER_ENV, POOL_ENV

    assert env[POOL_ENV] == str(tmp_path / "20261206-120000-lab" / "servers") and env[OWNER_ENV] == str(os.getpid())
    assert stopped == [tmp_path / "20261206-120000-lab" / "servers"]
