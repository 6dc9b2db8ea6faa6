"""The preflight refuses each kind of run that cannot work, with the number to change, and passes
a run that fits. Expected numbers are computed here independently (tokenizer, config arithmetic,
memory.plan_budget), so a preflight that miscounts fails."""

from __future__ import annotations

import json
import math
import os
import re
import stat
from pathlib import Path

import pytest

from specdec_helpers import memory, preflight
from specdec_helpers.measure.prompts import (
    Prompt,
    load_prompt_sets,
    long_document_prompt,
    select,
)
from specdec_helpers.models import resolve
from specdec_helpers.report import provenance
from tools import preflight as preflight_cli

TARGET = "smollm2-135m-instruct"
NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"
LLAMA_8B, LLAMA_1B = "meta-llama/Llama-3.1-8B-Instruct", "meta-llama/Llama-3.2-1B-Instruct"
REAL_VISIBLE_GPU = provenance.visible_gpu


@pytest.fixture(autouse=True)
def no_gpu_no_hub(monkeypatch):
    """This machine's view by default: no GPU, no Hugging Face hub (and no waiting for it)."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    resolve.hub_reachable.cache_clear()
    monkeypatch.setattr(provenance, "visible_gpu", lambda: None)
    yield
    resolve.hub_reachable.cache_clear()


@pytest.fixture(scope="module")
def tokenizer(target_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(target_dir))


def chat_tokens(tokenizer, messages) -> int:
    """vLLM's count: the chat template with the generation prompt, tokenized as rendered."""
    text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    return len(tokenizer(text, add_special_tokens=False)["input_ids"])


def doc_prompt(n_records: int) -> Prompt:
    messages, _ = long_document_prompt(n_records)
    return Prompt(id=f"doc-{n_records}", cls="long", subcategory="document", messages=messages, max_tokens=32)


def run(*, prompts, max_tokens=32, servers=1, **settings):
    settings = {"profile": "cpu-tiny", "target_model": TARGET, "max_model_len": 2048, **settings}
    return preflight.RunSettings(**settings).check(prompts, max_tokens, servers=servers)


# ----------------------------------------------------------------------------- prompts
def test_prompt_too_long_names_prompt_count_and_fixes(tokenizer):
    prompt = doc_prompt(64)
    n = chat_tokens(tokenizer, prompt.messages)
    assert n > 2048  # the premise: 64 records do not fit SmolLM2's 2048-token window
    with pytest.raises(preflight.PreflightError) as info:
        run(prompts=[prompt])
    message = str(info.value)
    assert "'doc-64'" in message and f"{n:,} prompt tokens" in message
    assert f"max_model_len to at least {n + 32:,}" in message
    assert f"at most {2048 - 32:,} tokens" in message  # room for the prompt with 32 answer tokens
    assert "max_tokens to at most" not in message  # no answer budget can make it fit
    (failed,) = info.value.report.failures
    assert failed.ok is False and "prompts" in failed.what


def test_max_tokens_pushing_over_names_largest_max_tokens(tokenizer):
    prompt = doc_prompt(16)
    n = chat_tokens(tokenizer, prompt.messages)
    limit = n + 40
    with pytest.raises(preflight.PreflightError) as info:
        run(prompts=[prompt.messages], max_tokens=41, max_model_len=limit)
    message = str(info.value)
    assert f"{n:,} prompt tokens" in message and "max_tokens 41" in message
    assert "max_tokens to at most 40" in message and "cut the answer short" in message
    # exactly at the limit it fits, and the report shows the count
    report = run(prompts=[prompt.messages], max_tokens=40, max_model_len=limit)
    assert report.ok
    (row,) = [c for c in report.checks if c.what.startswith("prompts")]
    assert row.value == f"{n:,} + 40 = {limit:,} tokens"


def test_token_id_and_text_prompts_are_counted(tokenizer):
    text = "Hello there, general inventory."
    report = run(prompts=[[1] * 100, text], max_tokens=10, max_model_len=256)
    (row,) = [c for c in report.checks if c.what.startswith("prompts")]
    assert row.value == "100 + 10 = 110 tokens"
    with pytest.raises(preflight.PreflightError, match="max_tokens to at most 156"):
        run(prompts=[[1] * 100], max_tokens=157, max_model_len=256)


# ----------------------------------------------------------------------------- memory
def largest_fitting_len(target, draft, gpu, utilization, upper):
    """Walk down block by block until memory.plan_budget accepts: the slow, obvious way."""
    for length in range(upper, 0, -16):
        try:
            memory.plan_budget(target, draft, gpu=gpu, gpu_memory_utilization=utilization, context_len=length)
            return length
        except memory.BudgetError:
            continue
    return None


def test_gpu_budget_that_does_not_fit_names_largest_max_model_len():
    expected_spec = largest_fitting_len(LLAMA_8B, LLAMA_1B, "L40S", 0.45, 32768)
    expected_alone = largest_fitting_len(LLAMA_8B, None, "L40S", 0.45, 32768)
    assert expected_spec and expected_spec < expected_alone < 32768
    with pytest.raises(preflight.PreflightError) as info:
        run(profile="gpu-llama", target_model=LLAMA_8B, draft_model=LLAMA_1B, max_model_len=32768,
            servers=2, gpu_name="L40S", prompts=[[{"role": "user", "content": "Hi"}]])
    message = str(info.value)
    assert f"The largest max_model_len that fits is {expected_spec:,}" in message
    assert f"The largest max_model_len that fits is {expected_alone:,}" in message
    assert "L40S (48 GB)" in message
    # no GPU here and no hub: said clearly, not as a traceback
    assert "none is visible here" in message and "hf auth login" in message
    rows = {c.what: c for c in info.value.report.checks}
    assert rows["GPU memory: target alone"].ok is False
    assert rows["prompts"].ok is None and "not checked" in rows["prompts"].fix


def test_gpu_budget_that_fits_passes_its_memory_rows():
    with pytest.raises(preflight.PreflightError) as info:  # still no GPU and no hub here
        run(profile="gpu-llama", target_model=LLAMA_8B, draft_model=LLAMA_1B, max_model_len=32768,
            servers=2, gpu_name="H100", prompts=[[{"role": "user", "content": "Hi"}]])
    rows = {c.what: c for c in info.value.report.checks}
    assert rows["GPU memory: target alone"].ok is True
    assert rows[f"GPU memory: target + {LLAMA_1B}"].ok is True
    assert rows["GPU share"].ok is True
    budget = memory.plan_budget(LLAMA_8B, LLAMA_1B, gpu="H100", gpu_memory_utilization=0.45, context_len=32768)
    assert f"{budget.kv_tokens:,} tokens" in rows[f"GPU memory: target + {LLAMA_1B}"].value
    assert "GPU memory" not in str(info.value)


def test_two_servers_cannot_share_more_than_the_card():
    with pytest.raises(preflight.PreflightError, match="largest gpu_memory_utilization that fits is 0.33"):
        run(profile="gpu-llama", target_model=LLAMA_8B, draft_model=None, max_model_len=4096, servers=3,
            gpu_memory_utilization=0.45, gpu_name="B200", prompts=[[1] * 10])


def test_cpu_kv_cache_too_small_names_largest_max_model_len(target_dir):
    config = json.loads((target_dir / "config.json").read_text())
    from specdec_helpers.engine.cpu import cpu_serving_dtype

    dtype_bytes = 4 if cpu_serving_dtype("auto") == "float32" else 2  # the KV cache is in the served dtype
    per_token = (2 * config["num_hidden_layers"] * config["num_key_value_heads"]
                 * (config.get("head_dim") or config["hidden_size"] // config["num_attention_heads"]) * dtype_bytes)
    space = 0.02 * 2**30
    from specdec_helpers.engine.install import KV_BLOCK_TOKENS

    block = KV_BLOCK_TOKENS["cpu"]  # vLLM cuts a CPU cache in blocks of 128 tokens
    largest = int(space // per_token) // block * block
    assert largest < 2048
    with pytest.raises(preflight.PreflightError) as info:
        run(prompts=[[1] * 10], cpu_kv_cache_gib=0.02)
    message = str(info.value)
    assert f"The largest max_model_len that fits is {largest:,}" in message
    assert f"cpu_kv_cache_gib to at least {math.ceil(per_token * 2048 / 2**30)}" in message


# ----------------------------------------------------------------------------- vocabulary
@pytest.fixture(scope="module")
def toy_drafts(target_dir, tmp_path_factory):
    """Two 'drafts' of another family: one with another vocab_size, one with the target's size
    but another tokenizer (the dangerous case vLLM does not catch)."""
    from specdec_helpers.models.tokenizer_check import SAMPLE_TEXTS, train_toy_tokenizer

    toy = train_toy_tokenizer(list(SAMPLE_TEXTS) * 20, vocab_size=300)
    config = json.loads((target_dir / "config.json").read_text())
    folders = {}
    for name, vocab in (("other-size", 2000), ("same-size", config["vocab_size"])):
        folder = tmp_path_factory.mktemp(name)
        (folder / "config.json").write_text(json.dumps(dict(config, vocab_size=vocab, num_hidden_layers=1)))
        toy.save_pretrained(folder)
        folders[name] = folder
    return folders


def test_draft_with_another_vocab_size_is_refused(toy_drafts):
    with pytest.raises(preflight.PreflightError) as info:
        run(draft_model=str(toy_drafts["other-size"]), prompts=[[1] * 10])
    message = str(info.value)
    assert "vocab_size 2,000" in message and "49,152" in message and "ngram" in message


def test_draft_with_same_size_but_other_tokenizer_is_refused(toy_drafts):
    with pytest.raises(preflight.PreflightError) as info:
        run(draft_model=str(toy_drafts["same-size"]), prompts=[[1] * 10])
    rows = {c.what.split(":")[0]: c for c in info.value.report.checks if ":" in c.what}
    assert rows["vocabulary"].ok is True and rows["tokenizer"].ok is False
    assert "other ids" in str(info.value)


# ----------------------------------------------------------------------------- happy path
@pytest.mark.needs_the_machine  # it checks the free memory of this machine for two servers
def test_a_run_that_fits_passes_and_prints_its_table(tokenizer):
    prompts = select(load_prompt_sets(["structured", "creative"]), limit_per_class=2)
    report = run(draft_model="smollm2-draft-4l", prompts=prompts, max_tokens=24, servers=2)
    assert report.ok and not report.failures
    longest = max(chat_tokens(tokenizer, p.messages) for p in prompts)
    rows = {c.what: c for c in report.checks}
    assert rows["prompts: longest of 4"].value == f"{longest:,} + 24 = {longest + 24:,} tokens"
    assert rows["vocabulary: smollm2-draft-4l vs target"].ok is True
    assert rows["tokenizer: smollm2-draft-4l vs target"].ok is True
    assert all(c.ok for c in report.checks)
    text = str(report)
    assert "All checks passed." in text and "CPU RAM: 2 server(s)" in text
    assert report._repr_markdown_().count("| OK |") == len(report.checks)
    # n-gram has no draft model to compare
    assert not [c for c in run(draft_model="ngram", prompts=[[1] * 5]).checks if "vocabulary" in c.what]


# ----------------------------------------------------------------------------- the CLI
def test_cli_refuses_gpu_profile_without_gpu_in_one_message(capsys):
    code = preflight_cli.main(["--profile", "gpu-llama", "--smoke"])
    out = capsys.readouterr()
    assert code == 2
    assert "Preflight refused the run of profile gpu-llama" in out.out
    assert "none is visible here" in out.out
    assert "Traceback" not in out.out + out.err


@pytest.mark.needs_the_machine  # it checks the free memory of this machine for two servers
def test_cli_checks_context_lengths_of_a_profile(capsys):
    assert preflight_cli.main(["--profile", "cpu-tiny", "--smoke"]) == 0
    assert "All checks passed." in capsys.readouterr().out
    code = preflight_cli.main(["--profile", "cpu-tiny", "--smoke", "--set", "context_lengths=[256, 4000]"])
    out = capsys.readouterr().out
    assert code == 2
    answer = 32  # cpu-tiny's context_answer_tokens
    assert f"context_lengths: the largest length that fits is {2048 - answer:,} tokens" in out


# ----------------------------------------------------------------------------- GPU detection
FAKE_SMI = """#!/bin/sh
echo "0, GPU-aaaa1111, NVIDIA L4, 23034, 22000"
echo "1, GPU-bbbb2222, NVIDIA H100 80GB HBM3, 81559, 20000"
"""


@pytest.fixture
def fake_nvidia_smi(tmp_path, monkeypatch):
    smi = tmp_path / "nvidia-smi"
    smi.write_text(FAKE_SMI)
    smi.chmod(smi.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setattr(provenance, "visible_gpu", REAL_VISIBLE_GPU)  # undo the autouse fixture
    return smi


def test_gpu_name_honours_cuda_visible_devices(fake_nvidia_smi, monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert provenance.gpu_name() == "NVIDIA L4, 23034 MiB"
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1,0")
    assert provenance.gpu_name() == "NVIDIA H100 80GB HBM3, 81559 MiB"
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-bbbb")  # a UUID prefix, as CUDA accepts
    assert provenance.gpu_name().startswith("NVIDIA H100")
    for hidden in ("", "-1", "7"):
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", hidden)
        assert provenance.gpu_name() is None
        assert "cores" in provenance.hardware()


def test_a_cpu_hardware_line_names_the_lscpu_flags_that_set_its_speed(monkeypatch):
    """Two CPUs with one model name can serve the same pair at 2 or 10 tokens/s (AVX2 alone vs VNNI int8): the line
    every number carries names the flags, read from /proc/cpuinfo as lscpu does."""
    from specdec_helpers.engine import cpu

    monkeypatch.setattr(provenance, "visible_gpu", lambda: None)
    flags = cpu.cpu_speed_flags()
    assert flags == [f for f in cpu.SPEED_FLAGS if f in flags]  # in their fixed order
    text = Path("/proc/cpuinfo").read_text()
    line = next(ln for ln in text.splitlines() if ln.startswith("flags"))
    assert set(flags) == set(cpu.SPEED_FLAGS) & set(line.split(":", 1)[1].split())
    assert provenance.hardware().endswith(f"cores; {' '.join(flags)})" if flags else "cores; no AVX2)")


def test_visible_gpu_is_planned_with_its_real_memory_and_free_share(fake_nvidia_smi, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")  # the H100 with 20,000 of 81,559 MiB free
    with pytest.raises(preflight.PreflightError) as info:
        run(profile="gpu-llama", target_model=LLAMA_8B, draft_model=LLAMA_1B, max_model_len=32768,
            servers=2, gpu_name="L40S", prompts=[[1] * 10])
    message = str(info.value)
    assert "none is visible" not in message
    assert f"at most {math.floor(20000 / 81559 / 2 * 100) / 100:g}" in message  # 0.12
    rows = {c.what: c for c in info.value.report.checks}
    assert rows["GPU memory free now"].ok is False
    assert rows[f"GPU memory: target + {LLAMA_1B}"].ok is True  # planned for 85.5 GB, not the L40S


def test_make_demo_refuses_at_once_when_two_servers_do_not_fit_in_ram(monkeypatch):
    from specdec_helpers.preflight import checks
    from tools import demo_page

    monkeypatch.setattr(checks, "available_ram_bytes", lambda: 1 * 2**30)
    message = demo_page.memory_refusal("cpu-tiny", True, {})
    assert message and "CPU RAM: 2 server(s)" in message and "PROFILE=cpu-tiny" in message
    monkeypatch.setattr(checks, "available_ram_bytes", lambda: 64 * 2**30)
    assert demo_page.memory_refusal("cpu-tiny", True, {}) is None


def test_make_demo_without_a_profile_falls_back_to_the_small_pair_and_says_why(monkeypatch, capsys):
    from specdec_helpers.preflight import checks
    from tools import demo_page

    monkeypatch.setattr(checks, "available_ram_bytes", lambda: 10 * 2**30)  # cpu-coder's pair needs ~27 GiB
    assert demo_page.choose_profile(None, False, {}) == ("cpu-tiny", None)
    assert "does not fit" in capsys.readouterr().err
    # a profile the user names is refused, never swapped
    profile, refusal = demo_page.choose_profile("cpu-coder", False, {})
    assert profile == "cpu-coder" and refusal and "CPU RAM" in refusal
    monkeypatch.setattr(checks, "available_ram_bytes", lambda: 64 * 2**30)
    assert demo_page.choose_profile(None, False, {}) == ("cpu-coder", None)


@pytest.mark.parametrize("forced, stored", [("float32", "float32"), ("int8", "int8")])
def test_make_preflight_plans_the_served_format_it_is_asked_for(capsys, forced, stored):
    """``make preflight SET="served_format=..."``: the RAM row plans the weights in the format the servers will get
    (float32 is twice bf16 and four times int8's layers), not the one ``auto`` would pick."""
    preflight_cli.main(["--profile", "cpu-tiny", "--smoke", "--set", f"served_format={forced}"])
    forced_out = capsys.readouterr().out
    ram = next(line for line in forced_out.splitlines() if "CPU RAM" in line)
    assert f"weights ({stored})" in ram, ram
    report = preflight_cli.check_profile("cpu-tiny", smoke=True, overrides={"served_format": forced})
    other = preflight_cli.check_profile("cpu-tiny", smoke=True,
                                        overrides={"served_format": "int8" if forced == "float32" else "float32"})

    def weights_gib(rep):
        value = next(r["value"] for r in rep.rows() if r["check"].startswith("CPU RAM"))
        return float(re.search(r"\) ([\d.]+) \+ KV", value).group(1))
    assert (weights_gib(report) > weights_gib(other)) == (forced == "float32")


# Every notebook parameter that sizes a request is either checked by `make preflight` (tools.preflight's
# profile_requests) or named here with why the preflight need not check it: a new one fails the test below.
SIZES_CHECKED = {"max_tokens": 100_000, "prompt_lengths": [100_000], "context_lengths": [100_000],
                 "context_answer_tokens": 100_000, "verify_ns": [100_000]}
SIZES_NOT_SENT = {
    "num_speculative_tokens": "drafts live in the KV cache planned for max_model_len; no prompt grows with k",
    "repeats": "the same requests again",
    "request_shapes": "02 predicts these shapes from its measured phases; it sends none",
    "concurrency_levels": "06's load test sends the structured prompts with max_tokens, which are checked",
    "requests_per_stream": "as concurrency_levels",
    "context_tokens": "07's memory plan for a GPU, not a request",
    "loop_prompts_per_class": "01 sends a subset of the prompt sets (checked), one server at a time",
    "loop_max_tokens": "01's answers, at most max_tokens (asserted below)",
    "aa_prompts_per_class": "04's A/A control sends a subset of the prompt sets (checked) with max_tokens",
}


def test_the_preflight_checks_every_request_size_the_notebooks_take():
    import papermill

    size = re.compile(r"tokens|length|_ks$|shapes|levels|per_stream|repeats|per_class")
    taken = {name: spec for nb in sorted(NOTEBOOKS.glob("*.ipynb"))
             for name, spec in papermill.inspect_notebook(str(nb)).items() if size.search(name)}
    unclassified = set(taken) - set(SIZES_CHECKED) - set(SIZES_NOT_SENT) - {"prompts_per_class"}
    assert not unclassified, f"size parameters neither checked by make preflight nor explained: {unclassified}"
    assert eval(taken["loop_max_tokens"]["default"]) <= eval(taken["max_tokens"]["default"])
    for name, too_big in SIZES_CHECKED.items():  # each one reaches the checks: too big is refused, by name
        report = preflight_cli.check_profile("cpu-tiny", smoke=True, overrides={name: too_big})
        assert not report.ok, f"make preflight SET={name}=... was not checked"
