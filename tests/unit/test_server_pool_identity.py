"""What makes two servers "the same" in a run's pool, and the per-notebook parameters of a profile (no server)."""

from __future__ import annotations

import json
import os

import pytest

from specdec_helpers.engine import pool
from specdec_helpers.engine.cpu import cpu_serving_format, served_weight_bytes
from specdec_helpers.engine.serving import VLLMServer
from specdec_helpers.engine.spec_config import draft_model_config, ngram_config
from tools import profiles
from tools.run_series import notebook_parameters


def _model(tmp_path, name="m", dtype="bfloat16", size=1000):
    folder = tmp_path / name
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"torch_dtype": dtype}))
    (folder / "model.safetensors").write_bytes(b"\0" * size)
    return folder


def test_port_and_served_name_do_not_make_another_server(tmp_path):
    model = _model(tmp_path)
    a = VLLMServer(model, name="baseline", port=8000, log_dir=tmp_path)
    b = VLLMServer(model, name="phases", port=9000, log_dir=tmp_path / "elsewhere", startup_timeout_s=5)
    assert a.pool_key() == b.pool_key()


#: a format other than the one "auto" serves on this CPU (on an AVX2-only CPU "auto" is float32: the same server)
OTHER_FORMAT = "bf16" if cpu_serving_format("auto") == "float32" else "float32"


@pytest.mark.parametrize("change", [
    {"max_model_len": 1024}, {"dtype": OTHER_FORMAT}, {"cpu_kv_cache_gib": 0.5},
    {"speculative_config": ngram_config(4)}, {"extra_env": {"ONEDNN_MAX_CPU_ISA": "AVX2"}},
    {"cpu_threads_bind": "0,99"}, {"seed": 1}])  # "0,99": never the default (the usable cores)
def test_every_flag_and_variable_that_changes_a_measurement_makes_another_server(tmp_path, change):
    model = _model(tmp_path)
    assert VLLMServer(model, log_dir=tmp_path).pool_key() != VLLMServer(model, log_dir=tmp_path, **change).pool_key()


def test_auto_and_the_format_it_serves_are_one_server(tmp_path):
    """"auto" is resolved before the key: asking for the format auto picks here starts no second server."""
    model = _model(tmp_path)
    served = cpu_serving_format("auto")
    assert VLLMServer(model, log_dir=tmp_path).pool_key() == VLLMServer(model, log_dir=tmp_path, dtype=served).pool_key()


def test_variables_that_change_nothing_are_not_part_of_the_identity():
    command = ["python", "-m", "vllm", "--port", "1", "--served-model-name", "a", "--dtype", "bfloat16"]
    same = ["python", "-m", "vllm", "--port", "2", "--served-model-name", "b", "--dtype", "bfloat16"]
    assert pool.server_key(command, {"TMPDIR": "/a", "HOME": "/x"}) == pool.server_key(same, {"TMPDIR": "/b"})
    assert pool.server_key(command, {}) != pool.server_key(command, {"VLLM_CPU_OMP_THREADS_BIND": "0"})


def test_greedy_draft_sampling_is_vllms_default_and_left_out_of_the_command(tmp_path):
    draft = _model(tmp_path, "d")
    assert draft_model_config(draft, 4, "greedy") == draft_model_config(draft, 4)
    assert draft_model_config(draft, 4, "probabilistic")["draft_sample_method"] == "probabilistic"


def test_weights_scale_from_the_checkpoints_dtype_to_the_served_one(tmp_path):
    model = _model(tmp_path, dtype="bfloat16", size=1000)
    assert served_weight_bytes(model, "float32") == 2000
    assert served_weight_bytes(model, "bfloat16") == 1000


def test_no_pool_outside_a_run_and_none_once_its_owner_is_gone(monkeypatch, tmp_path):
    monkeypatch.delenv(pool.POOL_ENV, raising=False)
    assert pool.active_pool() is None
    monkeypatch.setenv(pool.POOL_ENV, str(tmp_path))
    monkeypatch.setenv(pool.OWNER_ENV, str(os.getpid()))
    assert pool.active_pool() is not None
    monkeypatch.setenv(pool.OWNER_ENV, "999999999")  # no such process
    assert pool.active_pool() is None


def test_per_notebook_parameters_apply_to_their_notebook_only_and_smoke_drops_them():
    params = profiles.load_profile("cpu-coder")
    assert profiles.notebook_overrides(params, "05_structured_vs_creative.ipynb") == {"prompts_per_class": 8,
                                                                                   "max_tokens": 40}
    # the k sweep and the learners' stream: cpu-coder-full
    assert profiles.notebook_overrides(params, "04_choosing_a_draft.ipynb") == {"k_sweep": [], "learning_stream": 0,
                                                                             "max_tokens": 32}
    assert profiles.notebook_overrides(params, "07_is_it_worth_it.ipynb") == {
        "prompts_per_class": 8, "max_tokens": 32, "draft_candidates": ["suffix", "qwen2.5-coder-0.5b-instruct"]}
    assert profiles.notebook_overrides(params, "02_prefill_vs_decode.ipynb") == {"max_tokens": 32}
    assert profiles.notebook_overrides(params, "03_memory_budget.ipynb") == {}
    assert profiles.PER_NOTEBOOK not in profiles.load_profile("cpu-coder", smoke=True)


def test_a_notebook_gets_its_own_values_on_top_of_the_profile(tmp_path):
    from specdec_helpers.report.runs import REPO_ROOT

    params = profiles.load_profile("cpu-coder")
    five = notebook_parameters(REPO_ROOT / "notebooks" / "05_structured_vs_creative.ipynb", params, tmp_path)
    four = notebook_parameters(REPO_ROOT / "notebooks" / "04_choosing_a_draft.ipynb", params, tmp_path)
    assert five["prompts_per_class"] == 8 and four["prompts_per_class"] == params["prompts_per_class"]


def test_a_malformed_per_notebook_section_is_named(tmp_path, monkeypatch):
    (tmp_path / "bad.yaml").write_text("per_notebook: [1, 2]\n")
    monkeypatch.setattr(profiles, "PARAMS_DIR", tmp_path)
    with pytest.raises(profiles.ProfileError, match="per_notebook must map"):
        profiles.load_profile("bad")


def test_variables_that_importing_vllm_sets_do_not_make_another_server(tmp_path, monkeypatch):
    """A notebook that imported vLLM (for its version, its plugin) has TORCHINDUCTOR_* set; one that did not,
    not: the same flags must still be the same server (an eager server never reads them)."""
    model = _model(tmp_path)
    before = VLLMServer(model, log_dir=tmp_path).pool_key()
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", "/tmp/torchinductor_root")
    monkeypatch.setenv("TORCHINDUCTOR_COMPILE_THREADS", "1")
    assert VLLMServer(model, log_dir=tmp_path).pool_key() == before


@pytest.mark.parametrize("int8_dot, fast_bf16, expected", [
    (True, True, "int8"), (True, False, "int8"), (False, True, "bf16"), (False, False, "float32")])
def test_auto_serves_int8_with_vnni_else_bf16_where_native_else_float32(monkeypatch, int8_dot, fast_bf16, expected):
    from specdec_helpers.engine import cpu

    monkeypatch.setattr(cpu, "cpu_has_int8_dot", lambda: int8_dot)
    monkeypatch.setattr(cpu, "cpu_has_fast_bf16", lambda: fast_bf16)
    assert cpu.cpu_serving_format("auto") == expected
    # int8's activations (and everything not quantized) in bf16 only where the CPU multiplies bf16 natively
    assert cpu.cpu_serving_dtype("int8") == ("bfloat16" if fast_bf16 else "float32")
    assert cpu.cpu_serving_format("float32") == "float32" and cpu.cpu_serving_format("bfloat16") == "bf16"


def test_an_unknown_format_is_refused_with_the_choices(tmp_path):
    from specdec_helpers.engine.serving import ServerError

    with pytest.raises(ServerError, match="auto, float32, bf16, int8"):
        VLLMServer(_model(tmp_path), log_dir=tmp_path, dtype="int4")


def test_an_int8_checkpoint_counts_its_bytes_as_they_are(tmp_path):
    model = _model(tmp_path, size=1000)
    config = {"torch_dtype": "bfloat16", "quantization_config": {"format": "int-quantized"}}
    (model / "config.json").write_text(json.dumps(config))
    assert served_weight_bytes(model, "float32") == 1000


@pytest.mark.parametrize("gpu_profile", ["gpu-llama", "gpu-qwen3"])
def test_every_server_of_a_comparison_runs_the_same_model_runner(tmp_path, gpu_profile):
    """vLLM 0.32 runs V2 by default where Triton exists and falls back to V1 for custom_class and suffix: a comparison
    whose servers picked their own runner would measure two engines. Every server the notebooks build (the baseline,
    n-gram, a proposer class, a draft model: each kind a GPU profile's candidates take) pins one runner."""
    from specdec_helpers.engine.spec_config import PROPOSERS, custom_config

    params = profiles.load_profile(gpu_profile)
    target, draft = _model(tmp_path, "target"), _model(tmp_path, "draft")
    kinds = {"baseline": None, "ngram": ngram_config(4), "custom_class": custom_config(PROPOSERS["traffic"], 4),
             "draft_model": draft_model_config(draft, 4)}
    servers = [VLLMServer(target, name=n, speculative_config=c, log_dir=tmp_path) for n, c in kinds.items()]
    runners = {s.name: s.environment()["VLLM_USE_V2_MODEL_RUNNER"] for s in servers}
    assert set(runners.values()) == {"0"}, runners  # V1 for all: it serves every method measured
    heads = [c for c in params["draft_candidates"] if c.startswith("eagle3:")]  # an EAGLE-3 head per GPU target
    assert len(heads) == 1, params["draft_candidates"]
    from specdec_helpers.measure.evaluate import candidate_server
    head = candidate_server(heads[0], target, 4, {"log_dir": tmp_path}, 4)
    assert head.speculative_config == {"method": "eagle3", "model": heads[0].removeprefix("eagle3:"),
                                       "num_speculative_tokens": 4}
    assert head.environment()["VLLM_USE_V2_MODEL_RUNNER"] == "0"
    with pytest.raises(Exception, match="model_runner"):
        VLLMServer(target, model_runner="v3", log_dir=tmp_path)


def test_every_server_loads_only_the_series_plugin_named_in_pyproject(tmp_path):
    """arctic-inference (installed for suffix decoding) registers a vLLM plugin that patches the engine at start: every
    server, a suffix one too, names only the series' own plugin, the entry point pyproject.toml declares."""
    import tomllib
    from pathlib import Path

    from specdec_helpers.engine.serving import SERIES_PLUGINS
    from specdec_helpers.measure.evaluate import candidate_server

    declared = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text())
    assert SERIES_PLUGINS in declared["project"]["entry-points"]["vllm.general_plugins"]
    target = _model(tmp_path, "target")
    suffix = candidate_server("suffix", target, 4, {"log_dir": tmp_path}, 4)
    assert suffix.speculative_config == {"method": "suffix", "num_speculative_tokens": 4} and suffix.shared is False
    for server in (VLLMServer(target, log_dir=tmp_path), suffix):
        assert server.environment()["VLLM_PLUGINS"] == SERIES_PLUGINS
