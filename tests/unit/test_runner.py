"""The run folder and index.html, built from a real (small) executed notebook."""

from __future__ import annotations

import json
import os
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_notebook

from specdec_helpers.report.record import MIME_TYPE, read_records
from tools import run_series as runner
from tools.profiles import ProfileError, load_profile


@pytest.fixture
def tiny_notebook(tmp_path, monkeypatch):
    nb = new_notebook()
    params = new_code_cell('profile: str = "x"  # profile\nrun_dir: str = ""  # run folder')
    params.metadata["tags"] = ["parameters"]
    nb.cells = [params, new_code_cell(
        "import pandas as pd\nfrom specdec_helpers.report.record import record\n"
        "from specdec_helpers.report.runs import save_table\n"
        "record('profile_seen', profile)\nrecord('answer', 42.0)\n"
        "save_table(pd.DataFrame({'a': [1, 2]}), run_dir, 'tiny')")]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    folder = tmp_path / "nbs"
    folder.mkdir()
    path = folder / "00_tiny.ipynb"
    nbformat.write(nb, path)
    monkeypatch.setattr(runner, "NOTEBOOKS_DIR", folder)
    return path


def test_execute_passes_declared_parameters_and_reads_records(tiny_notebook, tmp_path):
    run_dir = tmp_path / "run"
    run = runner.execute(tiny_notebook, {"profile": "cpu-tiny", "not_declared": 1}, run_dir)
    assert run.ok, run.error
    assert run.records == {"profile_seen": "cpu-tiny", "answer": 42.0}
    assert read_records(run.output) == run.records
    assert (run_dir / "results" / "tiny.csv").exists()


def test_kernels_listen_on_private_sockets_so_the_console_has_no_transport_warning(tiny_notebook, tmp_path, capfd,
                                                                                    monkeypatch):
    import glob
    import tempfile

    # this test's kernels in a folder of its own: another pytest worker's kernels come and go in the shared /tmp
    # (a short path: a socket's path has about 100 bytes at most)
    private = Path(tempfile.mkdtemp(prefix="sk-"))
    monkeypatch.setattr(tempfile, "tempdir", str(private))
    before = set(glob.glob(os.path.join(tempfile.gettempdir(), "specdec-kernel-*")))
    run = runner.execute(tiny_notebook, {"profile": "cpu-tiny"}, tmp_path / "run")
    assert run.ok, run.error
    console = capfd.readouterr()
    assert "eavesdropping" not in console.err + console.out  # ipykernel's warning for kernels on plain TCP
    assert issubclass(runner.kernel_manager_class(), __import__("jupyter_client").AsyncKernelManager)
    assert before == set() and not glob.glob(str(private / "specdec-kernel-*"))  # its sockets' folder removed


@pytest.mark.needs_the_machine  # its preflight checks the free memory for the profile's servers
def test_main_writes_index_with_key_numbers(tiny_notebook, tmp_path, capsys):
    code = runner.main(["--profile", "cpu-tiny", "--smoke", "--out", str(tmp_path / "runs")])
    assert code == 0
    (run_dir,) = list((tmp_path / "runs").iterdir())
    page = (run_dir / "index.html").read_text()
    assert "00_tiny" in page and "answer" in page and "42" in page
    assert (run_dir / "notebooks" / "00_tiny.html").exists()
    assert (run_dir / "results.csv").read_text().startswith("a,table")


@pytest.mark.needs_the_machine  # its preflight checks the free memory for the profile's servers
def test_failing_notebook_is_reported_and_fails_the_run(tiny_notebook, tmp_path):
    nb = nbformat.read(tiny_notebook, as_version=4)
    nb.cells.append(new_code_cell("raise ValueError('boom')"))
    nbformat.write(nb, tiny_notebook)
    code = runner.main(["--profile", "cpu-tiny", "--out", str(tmp_path / "runs")])
    assert code == 1
    (run_dir,) = list((tmp_path / "runs").iterdir())
    assert "FAILED" in (run_dir / "index.html").read_text()


def test_unknown_profile_lists_known_ones():
    with pytest.raises(ProfileError, match="cpu-tiny"):
        load_profile("tpu-giant")


def test_record_mime_output_shape():
    import numpy as np

    from specdec_helpers.report.record import _plain

    assert _plain({"a": np.float64(1.5), "b": [np.int64(2)], "c": float("nan")}) == {"a": 1.5, "b": [2], "c": None}
    json.dumps(_plain(np.arange(3)))
    assert MIME_TYPE.startswith("application/vnd.")


def test_overrides_are_yaml_and_existing_paths_become_absolute(tmp_path, monkeypatch):
    prompts = tmp_path / "mine.jsonl"
    prompts.write_text("")
    monkeypatch.chdir(tmp_path)
    assert runner.parse_overrides(["max_tokens=64", "temperatures=[0.0, 0.7]", "prompts_file=mine.jsonl"]) == {
        "max_tokens": 64, "temperatures": [0.0, 0.7], "prompts_file": str(prompts)}
    with pytest.raises(SystemExit, match="NAME=VALUE"):
        runner.parse_overrides(["oops"])


def test_smoke_overrides_fit_each_profile_kind():
    tiny = load_profile("cpu-tiny", smoke=True)
    assert tiny["max_tokens"] == 24 and tiny["prompt_lengths"] == [32, 256, 1024]
    assert tiny["draft_candidates"] == ["ngram", "traffic", "suffix", "smollm2-draft-2l"]
    for gpu in ("gpu-llama", "gpu-qwen3"):
        full, smoke = load_profile(gpu), load_profile(gpu, smoke=True)
        # a GPU profile keeps drafts that share its target's tokenizer, and its own models
        assert smoke["draft_candidates"] == full["draft_candidates"]
        assert smoke["target_model"] == full["target_model"] and smoke["draft_model"] == full["draft_model"]
        assert smoke["max_tokens"] == 24 and smoke["repeats"] == 1
        assert smoke["prompt_lengths"] != tiny["prompt_lengths"]
        assert max(smoke["prompt_lengths"]) < full["max_model_len"]
        assert smoke["server_start_timeout_s"] == 1200
    assert load_profile("gpu-qwen3")["chat_template_kwargs"] == {"enable_thinking": False}


def test_smoke_sections_apply_in_order_and_bad_sections_are_named(tmp_path, monkeypatch):
    from tools import profiles

    (tmp_path / "gpu-x.yaml").write_text("a: 1\nb: 1\nc: 1\nd: 1\n")
    (tmp_path / "cpu-x.yaml").write_text("a: 1\nb: 1\nc: 1\nd: 1\n")
    (tmp_path / "smoke.yaml").write_text(
        "all: {b: 2, c: 2, d: 2}\ngpu: {c: 3, d: 3}\nprofiles: {gpu-x: {d: 4}}\n")
    monkeypatch.setattr(profiles, "PARAMS_DIR", tmp_path)
    assert profiles.load_profile("gpu-x", smoke=True) == {"a": 1, "b": 2, "c": 3, "d": 4}
    assert profiles.load_profile("cpu-x", smoke=True) == {"a": 1, "b": 2, "c": 2, "d": 2}
    assert profiles.load_profile("cpu-x") == {"a": 1, "b": 1, "c": 1, "d": 1}
    assert profiles.known_profiles() == ["cpu-x", "gpu-x"]
    (tmp_path / "smoke.yaml").write_text("max_tokens: 3\n")
    with pytest.raises(ProfileError, match="unknown section.*max_tokens"):
        profiles.load_profile("cpu-x", smoke=True)


def test_a_run_that_cannot_start_stops_at_the_preflight_before_any_notebook(tiny_notebook, tmp_path, capsys,
                                                                            monkeypatch):
    """The chat prompts do not fit a 64-token context: the run refuses at once, says why and what to
    change, and executes no notebook (as `make smoke PROFILE=gpu-llama` does on a machine without a GPU)."""
    executed = []
    monkeypatch.setattr(runner, "execute", lambda *a, **k: executed.append(a) or None)
    code = runner.main(["--profile", "cpu-tiny", "--smoke", "--set", "max_model_len=64",
                        "--out", str(tmp_path / "runs")])
    err = capsys.readouterr().err
    assert code == 2 and not executed
    assert "No notebook was started" in err and "max_model_len" in err
    assert not (tmp_path / "runs").exists()


def test_a_users_prompts_file_is_announced_with_what_is_left_out(tmp_path):
    """A user's file is never cut without a word: the console names how many prompts 07 measures, how many
    prompts_per_class leaves out and the setting that measures them all, with the expected time."""
    lines = [json.dumps({"id": f"{cls[0]}{i}", "class": cls, "subcategory": f"sub{i % 2}",
                         "messages": [{"role": "user", "content": f"prompt {i}"}], "max_tokens": 32})
             for cls in ("structured", "creative") for i in range(6)]
    path = tmp_path / "mine.jsonl"
    path.write_text("\n".join(lines) + "\n")
    notebook = [runner.NOTEBOOKS_DIR / "07_is_it_worth_it.ipynb"]
    params = load_profile("cpu-coder") | {"prompts_file": str(path), "prompts_per_class": 2,
                                           "per_notebook": {}}
    notice = runner.prompts_file_notice(params, notebook)
    assert "12 prompts" in notice and "measures 4 of them" in notice
    assert "8 left out by prompts_per_class=2" in notice and 'SET="prompts_per_class=6"' in notice
    assert " min at 2-10 tokens/s" in notice
    whole = runner.prompts_file_notice(params | {"prompts_per_class": 8}, notebook)
    assert "measures 12 of them" in whole and "left out" not in whole
    assert runner.prompts_file_notice(params | {"prompts_file": ""}, notebook) is None


def test_make_worth_it_passes_set_through():
    """07's cut notice tells the user to add SET="prompts_per_class=N" to make worth-it: it must reach the run."""
    import subprocess

    out = subprocess.run(["make", "-n", "worth-it", "PROMPTS=x.jsonl", "SET=prompts_per_class=12"],
                         cwd=runner.REPO_ROOT, capture_output=True, text=True, check=True).stdout
    assert "--set prompts_file=" in out and "--set prompts_per_class=12" in out


def test_kernels_import_this_clones_package_whatever_the_shared_environment_points_at(monkeypatch):
    """Two clones share one environment, whose editable install follows the clone that last called with_env.sh: the
    run puts its own clone first on PYTHONPATH, for the kernels and every server they start."""
    import subprocess
    import sys

    monkeypatch.setenv("PYTHONPATH", "/somewhere/else")
    runner.use_this_clone()
    runner.use_this_clone()  # once is enough
    paths = os.environ["PYTHONPATH"].split(os.pathsep)
    assert paths == [str(runner.REPO_ROOT), "/somewhere/else"]
    found = subprocess.run([sys.executable, "-c", "import specdec_helpers; print(specdec_helpers.__file__)"],
                           capture_output=True, text=True, check=True, cwd="/", env=dict(os.environ)).stdout
    assert found.strip().startswith(str(runner.REPO_ROOT))


@pytest.mark.needs_the_machine  # its preflight checks the free memory for the profile's servers
@pytest.mark.parametrize("fmt", ["openai-batch", "openai-chat"])
def test_make_worth_it_takes_openai_files_as_they_come_and_names_a_bad_line(tmp_path, capsys, fmt):
    """`make worth-it PROMPTS=...` with an OpenAI batch or chat file, no edits: the run's preflight reads it (and the
    console says what 07 will measure); a malformed line stops the run before any notebook, with file, line, problem."""
    def line(i, content):
        messages = [{"role": "user", "content": content}]
        return json.dumps({"custom_id": f"r{i}", "method": "POST", "url": "/v1/chat/completions",
                           "body": {"model": "m", "messages": messages, "max_tokens": 32}} if fmt == "openai-batch"
                          else {"model": "m", "messages": messages})
    good = tmp_path / "requests.jsonl"
    good.write_text("\n".join(line(i, f"Return JSON for item {i}.") for i in range(5)) + "\n")
    assert runner.preflight_refusal("cpu-tiny", True, {"prompts_file": str(good)}) is None
    notice = runner.prompts_file_notice(load_profile("cpu-tiny", smoke=True) | {"prompts_file": str(good)},
                                        [runner.NOTEBOOKS_DIR / "07_is_it_worth_it.ipynb"])
    assert "5 prompts" in notice
    bad = tmp_path / "broken.jsonl"
    bad.write_text(line(1, "fine") + "\n" + line(2, "") + "\n")  # an empty message on line 2
    code = runner.main(["--profile", "cpu-tiny", "--smoke", "--notebooks", "07", "--set", f"prompts_file={bad}"])
    err = capsys.readouterr().err
    assert code == 2 and f"{bad}, line 2: messages[0] content must be a non-empty string" in err


def test_each_notebook_is_announced_with_its_expected_time_and_ends_with_its_measured_one(tiny_notebook, tmp_path,
                                                                                          capsys):
    runs, _ = runner.run_notebooks([tiny_notebook], {"profile": "cpu-tiny"}, tmp_path / "run", share_servers=False,
                                   expected=({"00_tiny": 90.0}, "reference x"))
    out = capsys.readouterr().out
    assert runs[0].ok and "expected: 1.5 min in all (reference x)" in out
    assert "00_tiny: running, expected 1.5 min" in out
    assert f"00_tiny: ok in {runs[0].seconds / 60:.1f} min (expected 1.5 min)" in out
    times, where = runner.expected_times("cpu-coder", smoke=False)  # from the reference of this machine's class
    assert set(times) >= {"00_setup_check", "07_is_it_worth_it"} and "reference cpu-coder-" in where
    assert runner.expected_times("cpu-coder", smoke=True) == ({}, "no reference for the smoke parameters")
    # your prompts file (or any --set) changes the work: the reference's 07 time is not announced for it
    assert runner.expected_times("cpu-coder", smoke=False, overrides={"prompts_file": "mine.jsonl"}) == (
        {}, "no reference run with prompts_file set")
