"""What the CPU gives a server: the cores it may use, how its threads are bound, and the format its weights are
served in (float32, bf16 or int8, by what the CPU multiplies natively): a CPU server's speed depends on all three."""

from __future__ import annotations

import contextlib
import os
import platform
from pathlib import Path

from specdec_helpers.models.model_cache import read_json


def usable_core_ids() -> list[int]:
    """The ids of the cores this process may run on (``taskset``, a container's cpuset), sorted."""
    try:
        return sorted(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return list(range(os.cpu_count() or 1))


def cpu_threads_default() -> str:
    """Every usable core as a ``VLLM_CPU_OMP_THREADS_BIND`` range ("0-1"), unless the environment sets one: vLLM's
    "auto" keeps a core back (on 2 cores, Qwen2.5-Coder-1.5B decoded 1.85 tokens/s with "auto", 2.9 with "0-1")."""
    return os.environ.get("VLLM_CPU_OMP_THREADS_BIND") or cores_spec(usable_core_ids())


def core_share(cores: list[int], index: int, parts: int) -> list[int]:
    """Part ``index`` of ``parts`` contiguous, equal shares of ``cores`` (too few: later parts share the last)."""
    size = max(len(cores) // parts, 1)
    first = min(index * size, len(cores) - 1)
    return cores[first:first + size]


def cores_spec(cores: list[int]) -> str:
    """Core ids as ``VLLM_CPU_OMP_THREADS_BIND`` writes them: "0-1", "3", or "0,2,5"."""
    if cores == list(range(cores[0], cores[-1] + 1)):
        return str(cores[0]) if len(cores) == 1 else f"{cores[0]}-{cores[-1]}"
    return ",".join(str(c) for c in cores)


def cpu_has_fast_bf16() -> bool:
    """True where the CPU multiplies bf16 natively (AVX-512 BF16 / AMX on x86, BF16 on Arm)."""
    import torch

    if is_x86():
        return bool(torch.cpu._is_avx512_bf16_supported() or torch.cpu._is_amx_tile_supported())
    return bool(torch.cpu.get_capabilities().get("bf16", False)) if hasattr(torch.cpu, "get_capabilities") else False


def cpu_has_int8_dot() -> bool:
    """True where an x86 CPU has the int8 dot products (VNNI, AMX-INT8) vLLM's CPU int8 kernel needs to be fast."""
    return is_x86() and bool({"avx512_vnni", "avx_vnni", "amx_int8"} & set(cpu_speed_flags()))


#: the /proc/cpuinfo (lscpu) flags that decide a CPU server's format and speed, in the order they build on each other
SPEED_FLAGS = ("avx2", "avx512f", "avx512_bf16", "avx_vnni", "avx512_vnni", "amx_bf16", "amx_int8")


def cpu_speed_flags() -> list[str]:
    """Which of :data:`SPEED_FLAGS` this CPU has: two machines with the same model name can differ here (a
    hypervisor hides AMX, say), and the same pair decodes ~2 tokens/s on AVX2 alone and ~10 with VNNI int8, so a
    number's hardware line names them."""
    flags = set(cpuinfo_field("flags").split())
    return [f for f in SPEED_FLAGS if f in flags]


def cpuinfo_field(prefix: str) -> str:
    """The value of /proc/cpuinfo's first line that starts with ``prefix`` ("" without one, or without the file)."""
    with contextlib.suppress(OSError), open("/proc/cpuinfo") as handle:
        return next((line.partition(":")[2].strip() for line in handle if line.startswith(prefix)), "")
    return ""


def is_x86() -> bool:
    return platform.machine().lower() in ("x86_64", "amd64", "i686")


#: what a CPU server can be served as (``served_format`` in the profiles); "auto": :func:`cpu_serving_format`
CPU_FORMATS = ("auto", "float32", "bf16", "int8")


def cpu_serving_format(requested: str = "auto") -> str:
    """"float32", "bf16" or "int8" (W8A8, ``models.quantize``); "auto" picks by the CPU: int8 with int8 dot products
    (float32 decoded ~2.7x slower), else bf16 where native, else float32 (docs/measuring.md, "The served format")."""
    requested = {"bfloat16": "bf16", "w8a8": "int8", "fp32": "float32"}.get(requested, requested)
    if requested not in CPU_FORMATS:
        raise ValueError(f"Unknown served format '{requested}': use one of {', '.join(CPU_FORMATS)} (on a GPU, "
                          "vLLM's --dtype values).")
    if requested != "auto":
        return requested
    return "int8" if cpu_has_int8_dot() else "bf16" if cpu_has_fast_bf16() else "float32"


def cpu_serving_dtype(requested: str = "auto") -> str:
    """The ``--dtype`` of a CPU server served as ``requested`` (an int8 checkpoint computes the rest in bf16 where
    that is native, else in float32)."""
    served = cpu_serving_format(requested)
    if served == "int8":
        return "bfloat16" if cpu_has_fast_bf16() else "float32"
    return {"float32": "float32", "bf16": "bfloat16"}[served]


#: what a CPU server holds besides weights and KV cache (API server, engine core, worker's torch): measured PSS
CPU_SERVER_OVERHEAD_BYTES = 3 * 2**30


def server_ram_bytes(weight_bytes: float, kv_cache_bytes: float, servers: int = 1) -> int:
    """RAM that ``servers`` CPU servers hold together: ``weight_bytes`` of weights in the served format (all of them),
    each one's KV cache and each one's processes. The one estimate of the series: the pool makes room by it, the
    preflight plans by it (Qwen2.5-Coder 1.5B with 0.5 GiB of KV: 5.6 GiB estimated int8, 5.9 GiB measured by
    notebook 02; 6.8 both in bf16)."""
    return int(weight_bytes + servers * (kv_cache_bytes + CPU_SERVER_OVERHEAD_BYTES))


def served_weight_bytes(model_dir: Path, served_dtype: str) -> float:
    """The checkpoint's size on disk, scaled from its dtype to the served one (an int8 checkpoint as it is)."""
    size = float(sum(f.stat().st_size for f in model_dir.glob("*.safetensors")))
    config = read_json(model_dir / "config.json")
    if not config or "quantization_config" in config:
        return size
    stored = config.get("torch_dtype") or config.get("dtype") or "bfloat16"
    width = {"float32": 4, "float": 4, "float16": 2, "bfloat16": 2, "half": 2}
    return size * width.get(served_dtype, 2) / width.get(str(stored), 2)
