"""A notebook's server settings as one object: the profile parameters that every server it starts and every preflight
check it makes share. A cell then shows what it starts and what it checks (the prompts, the answer length, how many
servers at once), not the wiring, and a check cannot plan for other settings than the servers it guards."""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any, Mapping, Sequence

from specdec_helpers import memory
from specdec_helpers.engine.install import vllm_install
from specdec_helpers.models.tokenizer import chat_messages
from specdec_helpers.preflight.checks import Request, run_checks
from specdec_helpers.preflight.report import PreflightError, PreflightReport
from specdec_helpers.report.provenance import gpu_name as detected_gpu_name

_SAME = object()  # check(): "the settings' own draft"


def planned_gpu(profile_gpu: str | None) -> tuple[str | None, str]:
    """``(card, why)``: the GPU this kernel sees when the catalog knows it, else the profile's ``gpu_name`` (the
    preflight plans for the visible card itself, with its real memory)."""
    label = detected_gpu_name() if vllm_install().platform == "gpu" else None
    found = memory.match_gpu(label)
    if found:
        return found.name, f"detected: {label}"
    why = f"{label!r} is not in data/models/gpus.json" if label else "no GPU detected"
    return profile_gpu, f"the profile's gpu_name ({why})"


def _request(i: int, prompt: Any, max_tokens: int) -> Request:
    messages = chat_messages(prompt)
    label = (str(prompt.id) if getattr(prompt, "id", None) else f"text prompt {i + 1}" if isinstance(prompt, str)
             else f"prompt {i + 1} (token ids)" if messages is None
             else f"prompt {i + 1} ({str(messages[-1].get('content', ''))[:30].replace(chr(10), ' ')!r})")
    budget = max_tokens or getattr(prompt, "max_tokens", None)
    if not budget:
        raise ValueError(f"{label}: no max_tokens given and the prompt carries none")
    return Request(label=label, prompt=prompt, max_tokens=int(budget))


@dataclass(frozen=True)
class RunSettings:
    """The parameters of ``params/<profile>.yaml`` that shape a server (names as there)."""

    profile: str
    target_model: str
    max_model_len: int
    draft_model: str | None = None  # None: the target alone
    served_format: str = "auto"
    cpu_kv_cache_gib: float = 1.0
    gpu_memory_utilization: float = 0.45
    gpu_name: str | None = None  # the profile's card: what a GPU plan uses when this machine's is not in the catalog
    server_start_timeout_s: float = 300.0
    chat_template_kwargs: dict | None = None
    log_dir: Path | None = None

    @classmethod
    def from_parameters(cls, parameters: Mapping[str, Any], log_dir: str | Path | None = None) -> "RunSettings":
        """From a notebook's parameters (``globals()``: papermill injects them there), by the profile's names."""
        names = [f.name for f in fields(cls) if f.name != "log_dir"]
        missing = [n for n in ("profile", "target_model", "max_model_len") if n not in parameters]
        if missing:
            raise ValueError(f"the notebook's parameters lack {missing}: run its parameters cell first")
        return cls(**{n: parameters[n] for n in names if n in parameters},
                   log_dir=Path(log_dir) if log_dir is not None else None)

    def with_changes(self, **changes: Any) -> "RunSettings":
        return replace(self, **changes)

    def server_options(self, **changes: Any) -> dict[str, Any]:
        """Keyword arguments for ``VLLMServer`` (beside the model, name and speculative config)."""
        return {"log_dir": self.log_dir, "max_model_len": self.max_model_len, "cpu_kv_cache_gib": self.cpu_kv_cache_gib,
                "dtype": self.served_format, "gpu_memory_utilization": self.gpu_memory_utilization,
                "startup_timeout_s": self.server_start_timeout_s,
                "chat_template_kwargs": self.chat_template_kwargs or None, **changes}

    def check(self, prompts: Sequence, max_tokens: int, *, servers: int = 1, draft_model: Any = _SAME,
              ) -> PreflightReport:
        """The preflight of ``servers`` servers of these settings up at once, each answering ``prompts`` (messages,
        ``Prompt`` s, strings or token ids) with up to ``max_tokens`` (a Prompt's own when 0/None); ``draft_model``:
        another draft, or None for the target alone. :class:`PreflightError` names each fix: parameter, largest fit."""
        draft = self.draft_model if draft_model is _SAME else draft_model
        report = run_checks(profile=self.profile, target_model=self.target_model, drafts=[draft] if draft else [],
                            requests=[_request(i, prompt, max_tokens) for i, prompt in enumerate(prompts)],
                            max_model_len=self.max_model_len, servers=servers,
                            gpu_memory_utilization=self.gpu_memory_utilization, cpu_kv_cache_gib=self.cpu_kv_cache_gib,
                            gpu_name=self.gpu_name, chat_template_kwargs=self.chat_template_kwargs or None,
                            served_format=self.served_format)
        if not report.ok:
            raise PreflightError(report.message(), report)
        return report

    def fits(self, prompts: Sequence, max_tokens: int, *, servers: int, draft_model: Any = _SAME) -> bool:
        """Does :meth:`check` pass (for choosing between servers side by side and one at a time)?"""
        try:
            self.check(prompts, max_tokens, servers=servers, draft_model=draft_model)
        except PreflightError:
            return False
        return True
