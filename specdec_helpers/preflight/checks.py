"""The checks of ``RunSettings.check`` and ``make preflight``: each model resolved once, passed to every check."""

from __future__ import annotations

import bisect
import contextlib
import math
import os
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import psutil

from specdec_helpers import memory
from specdec_helpers.engine.cpu import cpu_serving_dtype, cpu_serving_format, server_ram_bytes
from specdec_helpers.engine.install import KV_BLOCK_TOKENS, vllm_install
from specdec_helpers.engine.pool import active_pool
from specdec_helpers.engine.serving import VLLMServer
from specdec_helpers.engine.spec_config import is_draft_model_name
from specdec_helpers.models.resolve import ResolvedModel, resolved_model
from specdec_helpers.models.tokenizer import count_tokens, is_token_ids
from specdec_helpers.models.tokenizer_check import compare_tokenizers
from specdec_helpers.preflight.report import PreflightReport
from specdec_helpers.report import provenance

GIB = memory.GIB


def resolve(name: str) -> ResolvedModel:
    """``name`` followed once, with memory's shape of its config (and catalog config, for an unreachable hub model)."""
    def or_none(call: Callable[[Any], Any]) -> Callable[[Any], Any]:
        def guarded(arg: Any) -> Any:
            with contextlib.suppress(ValueError, OSError):  # memory's unknown model or unusable config: None
                return call(arg)
        return guarded
    return resolved_model(name, catalog=or_none(memory.load_model_config), shape_of=or_none(memory.model_shape))


@dataclass
class Request:
    """One request a notebook will send: its prompt, answer budget, and the knob that sizes it."""

    label: str
    prompt: Any
    max_tokens: int
    group: str = "prompts"  # one report row per group (its longest request)
    parameter: str = ""  # the profile parameter that sets this prompt's size ("fixed": none can)
    largest: Callable[[int], str] | None = None  # room for the prompt -> "largest value that fits"


def _check_prompts(report: PreflightReport, target: ResolvedModel, requests: list[Request], max_model_len: int,
                   chat_template_kwargs: dict | None, memory_max_len: int | None) -> None:
    groups = {g: [r for r in requests if r.group == g] for g in dict.fromkeys(r.group for r in requests)}
    limit = f"<= max_model_len {max_model_len:,}"

    def fix(total: int, n: int, r: Request) -> str:
        options = [f"max_model_len to at least {total:,}"
                   + (f" (the memory plan allows at most {memory_max_len:,})" if memory_max_len else "")]
        if max_model_len - n >= 1:
            options.append(f"max_tokens to at most {max_model_len - n:,}")
        room_for_prompt = max_model_len - r.max_tokens
        if r.parameter and r.largest is not None and room_for_prompt > 0:
            options.append(f"{r.parameter}: {r.largest(room_for_prompt)}")
        elif not r.parameter and room_for_prompt > 0:
            options.append(f"a shorter prompt (at most {room_for_prompt:,} tokens)")
        why = ("the prompt alone is longer than max_model_len, so the server would reject it" if n > max_model_len
               else "vLLM would silently cut the answer short, so the run would measure shorter answers than asked")
        return (f"'{r.label}' has {n:,} prompt tokens (counted with the target's chat template) + max_tokens "
                f"{r.max_tokens:,} = {total:,} > max_model_len {max_model_len:,}: {why}. Change "
                + "; or ".join(options) + ".")

    for group, items in groups.items():
        if target.tokenizer is None and not all(is_token_ids(r.prompt) for r in items):
            report.add(group, f"{len(items)} request(s)", limit, None,
                       f"prompt lengths not checked: {target.problem or 'no tokenizer'}", order=30)
            continue
        measured = []
        for r in items:
            try:
                n = count_tokens(target.tokenizer, r.prompt, chat_template_kwargs)
                measured.append((n + r.max_tokens, n, r))
            except (ValueError, TypeError) as exc:
                report.add(f"{group}: {r.label}", "-", "-", False, str(exc), order=30)
        if not measured:
            continue
        too_long = sorted([m for m in measured if m[0] > max_model_len], key=lambda m: -m[0])
        total, n, worst = max(measured, key=lambda m: m[0])
        fixes = " ".join(fix(*m) for m in too_long[:5])
        report.add(f"{group}: longest of {len(measured)}" if len(measured) > 1 else group,
                   f"{n:,} + {worst.max_tokens:,} = {total:,} tokens", limit, not too_long,
                   fixes + (f" (and {len(too_long) - 5} more)" if len(too_long) > 5 else ""), order=30)


def _check_gpu_memory(report: PreflightReport, target: ResolvedModel, drafts: list[ResolvedModel], *,
                      servers: int, utilization: float, max_model_len: int, gpu_name: str | None) -> int | None:
    """Plan every server for the GPU this process sees, else the catalog's ``gpu_name`` (a laptop can check a GPU
    plan); returns the largest max_model_len that fits."""
    gpu, spec = provenance.visible_gpu(), None
    if gpu is not None:
        catalog = memory.match_gpu(gpu.name)
        spec = memory.GPUSpec(name=gpu.name, memory_gb=gpu.memory_total_mib * 2**20 / memory.GB,
                              bandwidth_gb_s=catalog.bandwidth_gb_s if catalog else 0.0)
        if gpu_name and catalog is not None and catalog.name != memory.gpu_spec(gpu_name).name:
            report.notes.append(f"the profile names {gpu_name}; this machine has {gpu.name}: planned for the real card")
    else:
        try:
            spec = memory.gpu_spec(gpu_name) if gpu_name else None
        except memory.UnknownGPUError as exc:
            report.notes.append(f"gpu_name: {exc}")
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        report.add("GPU", "none visible" + (f" (CUDA_VISIBLE_DEVICES={visible!r})" if visible is not None else ""),
                   "one CUDA GPU", False, "this profile runs vLLM's CUDA build on an NVIDIA GPU and none is visible "
                   "here (nvidia-smi finds none, or CUDA_VISIBLE_DEVICES hides them). Run it on a GPU machine, or use "
                   "a CPU profile (make run PROFILE=cpu-coder)"
                   + (f"; the memory rows of the report plan for the profile's {spec.name} ({spec.memory_gb:g} GB)."
                      if spec else "."), order=1)
    if spec is None:
        report.add("GPU memory plan", "-", "-", None, "no GPU visible and no gpu_name given: memory not planned",
                   order=60)
        return None
    share = servers * utilization
    report.add("GPU share", f"{servers} servers x {utilization:g} = {share:.2f}", "<= 1.0", share <= 1.0 + 1e-9,
               f"{servers} servers at gpu_memory_utilization={utilization:g} ask for more than the whole card; the "
               f"largest gpu_memory_utilization that fits is {math.floor(100 / servers) / 100:g}.", order=40)
    if gpu is not None and gpu.memory_free_mib is not None:
        free_share = gpu.memory_free_mib / gpu.memory_total_mib if gpu.memory_total_mib else 0.0
        report.add("GPU memory free now", f"{gpu.memory_free_mib / 1024:.1f} of {gpu.memory_total_mib / 1024:.1f} GiB",
                   f">= {share:.2f} of the card", share <= free_share + 1e-9,
                   f"other processes hold {(gpu.memory_total_mib - gpu.memory_free_mib) / 1024:.1f} GiB of the GPU "
                   "(nvidia-smi lists them); stop them, or lower gpu_memory_utilization to at most "
                   f"{math.floor(free_share / servers * 100) / 100:g}.", order=40)
    if target.shape is None:
        report.add("GPU memory plan", "-", "-", None, f"no config for {target.name}: memory not planned", order=60)
        return None
    for d in (d for d in drafts if d.shape is None):
        report.add(f"GPU memory: target + {d.name}", "-", "-", None, f"no config for {d.name}: not planned", order=60)
    configs = [("target alone", None)] + [(f"target + {d.name}", d.shape) for d in drafts if d.shape is not None]

    def first_fit(values: range, plan: Callable[[int], Any]) -> int:
        """Index of the first value (``len(values)``: none) whose ``plan`` fits, for a plan monotone in it."""
        def fits(value: int) -> bool:
            with contextlib.suppress(memory.BudgetError, ValueError):
                plan(value)
                return True
            return False
        return bisect.bisect_left(values, True, key=fits)

    largest_overall: int | None = max_model_len
    where = f"on {spec.name} ({spec.memory_gb:.0f} GB) at gpu_memory_utilization={utilization:g}"
    limit = f">= 1 sequence of max_model_len {max_model_len:,}"
    for label, draft in configs:
        def plan(length: int, util: float = utilization, card: memory.GPUSpec = spec, draft: Any = draft):
            return memory.plan_budget(target.shape, draft, gpu=card, gpu_memory_utilization=util, context_len=length)
        try:
            budget = plan(max_model_len)
        except memory.BudgetError as exc:
            # the reserve does not depend on the length: what the KV pool holds is the largest that fits
            largest = (exc.max_context_len if isinstance(exc, memory.ContextTooLongError) else 0) or None
            largest_overall = min(largest_overall or 0, largest or 0) or None
            fix = (f"{where} the KV cache holds less than one sequence of max_model_len={max_model_len:,}, so vLLM "
                   f"would refuse to start. The largest max_model_len that fits is {largest:,}" if largest else
                   f"{where}: {exc}. No max_model_len fits")
            percent = first_fit(range(1, 101), lambda u: plan(max_model_len, u / 100))
            if 0 < percent < 100:  # some share fits, and not the smallest: name the one needed
                needed = (percent + 1) / 100
                fix += (f"; keeping max_model_len={max_model_len:,} needs gpu_memory_utilization >= {needed:g}"
                        + (f" (with {servers} servers on one card that is {servers * needed:.2f} of it: too much; "
                           "run fewer servers at once or use a bigger card)" if servers * needed > 1 else ""))
            gb = 1 + first_fit(range(1, 2001), lambda n: plan(max_model_len, card=memory.GPUSpec("any", n, 1.0)))
            if gb <= 2000:
                fix += f"; or a card of at least {gb:.0f} GB at {utilization:g}"
            report.add(f"GPU memory: {label}", "does not fit", limit, False, fix + ".", order=45)
            continue
        report.add(f"GPU memory: {label}", f"KV cache {budget.kv_tokens:,} tokens = "
                   f"{budget.max_concurrent_seqs} x {max_model_len:,}", limit, True, order=45)
    if gpu is None:
        report.notes.append(f"memory planned for {spec.name} from the catalog (data/models/gpus.json), "
                            "with memory.plan_budget's estimated overhead")
    return largest_overall


def available_ram_bytes() -> int:
    """Memory free for new servers now; inside ``make run`` with the idle shared ones (the pool stops them first)."""
    pool = active_pool()
    return int(psutil.virtual_memory().available) + (pool.reclaimable_bytes() if pool else 0)


def _check_cpu_memory(report: PreflightReport, target: ResolvedModel, drafts: list[ResolvedModel], *,
                      servers: int, cpu_kv_cache_gib: float, max_model_len: int, served_format: str) -> int | None:
    if target.shape is None:
        report.add("CPU memory", "-", "-", None, f"no config for {target.name}: not planned", order=60)
        return None
    # weights and KV in the dtype the server will run (float32 on CPUs without fast bf16: serving.py)
    served, draft_shapes = cpu_serving_dtype(served_format), [d.shape for d in drafts if d.shape is not None]
    # KV space: each server's KV cache (--kv-cache-memory-bytes) must hold one sequence of max_model_len.
    per_token = memory.kv_bytes_per_token(target.shape, served)
    per_token += max((memory.kv_bytes_per_token(s, served) for s in draft_shapes), default=0)
    space, need = cpu_kv_cache_gib * GIB, per_token * max_model_len
    block = KV_BLOCK_TOKENS["cpu"]
    largest = int(space // per_token) // block * block
    report.add("CPU KV cache: one sequence" + (" (target + draft)" if draft_shapes else ""),
               f"{max_model_len:,} tokens x {per_token / 1024:.0f} KiB = {need / GIB:.2f} GiB",
               f"<= cpu_kv_cache_gib {cpu_kv_cache_gib:g} GiB", need <= space,
               f"vLLM would refuse to start. The largest max_model_len that fits is {largest:,}; "
               f"or raise cpu_kv_cache_gib to at least {math.ceil(need / GIB)}.", order=45)
    # RAM: every server's weights (and the biggest draft's, in one of them), KV space and overhead, in what is free
    stored = "int8" if cpu_serving_format(served_format) == "int8" else served  # int8: the layers' weights only
    weights = servers * memory.weight_bytes(target.shape, stored)
    weights += max((memory.weight_bytes(s, stored) for s in draft_shapes), default=0)
    total, available = server_ram_bytes(weights, cpu_kv_cache_gib * GIB, servers), available_ram_bytes()
    overhead = total - weights - servers * cpu_kv_cache_gib * GIB  # the processes' own, every server
    largest_kv = max(0, math.floor((available - weights - overhead) / servers / GIB * 10) / 10)
    report.add(f"CPU RAM: {servers} server(s)", f"weights ({stored}) {weights / GIB:.1f} + KV "
               f"{servers} x {cpu_kv_cache_gib:g} + overhead {overhead / GIB:.1f} = {total / GIB:.1f} GiB",
               f"<= {available / GIB:.1f} GiB available", total <= available,
               f"Not enough free memory for the servers ({total / GIB:.1f} GiB needed, {available / GIB:.1f} GiB "
               "free). "
               + (f"The largest cpu_kv_cache_gib that fits is {largest_kv:g} (it must still hold max_model_len: "
                  f"{need / GIB:.2f} GiB); or close other programs, " if largest_kv * GIB >= need else
                  "Close other programs, ") + "run fewer servers at once, or use a smaller model pair.", order=45)
    return largest if largest >= block else None


def _check_vocab(report: PreflightReport, target: ResolvedModel, draft: ResolvedModel) -> None:
    what, tv, dv = f"vocabulary: {draft.name} vs target", target.vocab_size, draft.vocab_size
    if tv is None or dv is None:
        report.add(what, "-", "same vocab_size", None, "config.json not available for both models: not checked")
    elif tv != dv:
        report.add(what, f"vocab_size {dv:,} vs {tv:,}", "equal", False,
                   f"the draft {draft.name} has vocab_size {dv:,}, the target {target.name} {tv:,}: vLLM refuses a "
                   "draft model with another vocabulary (its token ids would mean other tokens). Choose a draft of "
                   "the target's family (same tokenizer), or n-gram lookup ('ngram').")
        return
    else:
        report.add(what, f"vocab_size {dv:,}", f"= target {tv:,}", True)
    what = f"tokenizer: {draft.name} vs target"
    if target.tokenizer is None or draft.tokenizer is None:
        if target.tokenizer is not draft.tokenizer:
            report.add(what, "-", "same ids", None, "tokenizers not available for both models: not compared")
        return
    result = compare_tokenizers(target.tokenizer, draft.tokenizer, target_name=target.name, draft_name=draft.name)
    ok = all(result.checks.get(name, True) for name in ("vocabulary", "same ids on sample texts"))
    failed = ", ".join(n for n, passed in result.checks.items() if not passed)
    report.add(what, "same" if result.compatible else failed + " differ", "same vocabulary and ids", ok,
               "the draft's tokenizer maps text to other ids than the target's: every proposal would be a different "
               "token and acceptance would collapse. " + "; ".join(result.differences[:2])
               + ". Choose a draft of the target's family, or 'ngram'.")
    if ok and not result.compatible:
        report.notes.append(f"{draft.name}: {'; '.join(result.differences)} (harmless for speculation: "
                            "the vocabulary and ids agree)")


def run_checks(*, profile: str, target_model: str, drafts: Sequence[str], requests: list[Request],
               max_model_len: int, servers: int, gpu_memory_utilization: float, cpu_kv_cache_gib: float,
               gpu_name: str | None, chat_template_kwargs: dict | None, served_format: str = "auto") -> PreflightReport:
    """Every check for ``requests``, each model resolved once; returns the report, even when it refuses."""
    for name, value in (("max_model_len", max_model_len), ("servers", servers)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a whole number >= 1, got {value!r}")
    if not 0 < float(gpu_memory_utilization) <= 1:
        raise ValueError(f"gpu_memory_utilization is a share of the card: 0 < u <= 1, got {gpu_memory_utilization!r}")
    if not float(cpu_kv_cache_gib) > 0:
        raise ValueError(f"cpu_kv_cache_gib must be positive, got {cpu_kv_cache_gib!r}")
    try:  # GPU for the gpu-* profiles (as in the Makefile), else what the installed vLLM build runs on
        platform = "gpu" if profile.startswith("gpu") else vllm_install().platform
    except Exception:
        platform = "cpu"
    draft_names = [d for d in dict.fromkeys(drafts) if d and is_draft_model_name(d)]
    report = PreflightReport(profile, target_model, draft_names, platform, provenance.hardware())
    target, *drafts_ = models = [resolve(name) for name in [target_model, *draft_names]]
    missing_hub = [m.name for m in models if not m.available and m.is_hub]
    for m in models:
        hint = "" if not missing_hub or m.name != missing_hub[0] else (  # said once, for every missing hub model
            " Accept the licence on the hub if a model is gated, then `hf auth login` (or set HF_TOKEN); or fetch "
            "ahead with " + ", ".join(f"`hf download {n}`" for n in missing_hub) + " and set HF_HUB_OFFLINE=1.")
        report.add(f"{'target' if m is target else 'draft'} model files: {m.name}", m.source if m.available else
                   "not available", "loadable by the server", m.available, f"{m.unavailable_because}.{hint}", order=10)
        if m.problem and m.available:
            report.notes.append(f"{m.name}: {m.problem}")
        if m.is_hub and m.tokenizer is None and m.config is not None and m.source == "catalog":
            report.notes.append(f"{m.name}: sizes and vocab_size from the catalog config (data/models/configs)")
    if platform == "gpu":
        memory_max_len = _check_gpu_memory(report, target, drafts_, servers=servers, max_model_len=max_model_len,
                                           utilization=float(gpu_memory_utilization), gpu_name=gpu_name)
    else:
        memory_max_len = _check_cpu_memory(report, target, drafts_, servers=servers, max_model_len=max_model_len,
                                           cpu_kv_cache_gib=float(cpu_kv_cache_gib), served_format=served_format)
    _check_prompts(report, target, requests, max_model_len, chat_template_kwargs,
                   memory_max_len if memory_max_len and memory_max_len != max_model_len else None)
    for d in drafts_:
        _check_vocab(report, target, d)
    # one model runner for every server of a comparison (engine.serving.VLLMServer.model_runner pins it)
    runner = VLLMServer.__dataclass_fields__["model_runner"].default
    report.add("model runner", f"{runner.upper()} for every server (VLLM_USE_V2_MODEL_RUNNER="
               f"{'1' if runner == 'v2' else '0'})",
               "the same for baseline and candidates", True, order=5)
    return report

