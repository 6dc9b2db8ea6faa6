"""preflight.RunSettings: one object for a notebook's server settings, so a check plans what the servers get."""

from __future__ import annotations

import json

import pytest

from specdec_helpers import preflight
from specdec_helpers.engine.serving import VLLMServer
from specdec_helpers.preflight import RunSettings
from tools.profiles import load_profile

PARAMS = {"profile": "cpu-tiny", "target_model": "smollm2-135m-instruct", "draft_model": "smollm2-draft-4l",
          "max_model_len": 1024, "served_format": "bf16", "cpu_kv_cache_gib": 0.75, "server_start_timeout_s": 90,
          "chat_template_kwargs": {"enable_thinking": False}, "prompts_per_class": 3, "gpu_name": "L4"}


def test_built_from_the_notebook_parameters_by_the_profile_names(tmp_path):
    settings = RunSettings.from_parameters({**PARAMS, "unrelated": 1}, log_dir=tmp_path)
    assert (settings.max_model_len, settings.served_format, settings.cpu_kv_cache_gib) == (1024, "bf16", 0.75)
    with pytest.raises(ValueError, match="max_model_len"):
        RunSettings.from_parameters({"profile": "p", "target_model": "t"})
    every_profile = load_profile("cpu-coder")  # a profile file's names are the settings' names
    assert RunSettings.from_parameters({"profile": "cpu-coder", **every_profile}).cpu_kv_cache_gib == float(
        every_profile["cpu_kv_cache_gib"])


def test_every_server_setting_reaches_the_command_line(tmp_path):
    model = tmp_path / "m"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"torch_dtype": "bfloat16"}))
    settings = RunSettings.from_parameters(PARAMS, log_dir=tmp_path / "logs")
    server = VLLMServer(model, name="baseline", **settings.server_options())
    command = server.command()
    assert command[command.index("--max-model-len") + 1] == "1024"
    assert json.loads(command[command.index("--default-chat-template-kwargs") + 1]) == {"enable_thinking": False}
    assert server.startup_timeout_s == 90 and server.log_dir == tmp_path / "logs"
    assert server.kv_cache_bytes == int(0.75 * 2**30) and server.dtype == "bf16"
    assert settings.server_options(dtype="float32")["dtype"] == "float32"  # a change for one server only


def test_a_check_plans_the_settings_format_and_draft(tmp_path):
    settings = RunSettings.from_parameters({**PARAMS, "served_format": "float32"}, log_dir=tmp_path)

    def ram_row(report):
        return next(r["value"] for r in report.rows() if r["check"].startswith("CPU RAM"))
    assert "weights (float32)" in ram_row(settings.check([], 1))
    assert "weights (int8)" in ram_row(settings.with_changes(served_format="int8").check([], 1))
    alone, with_draft = settings.check([], 1, draft_model=None), settings.check([], 1)
    assert not any("vocabulary" in r["check"] for r in alone.rows())
    assert any("vocabulary" in r["check"] for r in with_draft.rows())
    assert settings.fits([], 1, servers=1) and not settings.with_changes(cpu_kv_cache_gib=4000).fits([], 1, servers=1)


def test_the_planned_gpu_is_the_profiles_without_a_gpu():
    card, why = preflight.planned_gpu("L4")
    assert card == "L4" and "the profile's gpu_name" in why
