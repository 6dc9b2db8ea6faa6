"""Where and how a number was measured (hardware, vLLM build, models, date): a speedup without its hardware is
not a fact, so every results row and figure title carries this."""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
import sys
from dataclasses import dataclass
from datetime import datetime, timezone
from functools import lru_cache
from typing import Any

from specdec_helpers.engine.cpu import cpu_serving_format, cpu_speed_flags, cpuinfo_field, is_x86, usable_core_ids
from specdec_helpers.engine.install import vllm_install


@dataclass(frozen=True)
class GPUInfo:
    """The first GPU this process may use: its name and memory (MiB, as nvidia-smi reports)."""

    name: str
    memory_total_mib: float
    memory_free_mib: float | None = None


@lru_cache(maxsize=8)
def _query_gpu(visible_env: str | None, smi: str) -> GPUInfo | None:
    """The GPU CUDA_VISIBLE_DEVICES names first, by CUDA's rules (unset: all; empty or "-1": none)."""
    try:
        out = subprocess.run([smi, "--query-gpu=index,uuid,name,memory.total,memory.free",
                              "--format=csv,noheader,nounits"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return None
    first = next((e.strip() for e in (visible_env or "").split(",") if e.strip()), "")
    for line in out.stdout.strip().splitlines() if out.returncode == 0 else []:
        parts = [p.strip() for p in line.split(",")] + [""]  # index, uuid, name, total, free ("" if missing)
        by_uuid = first.startswith(("GPU-", "MIG-")) and parts[1].startswith(first)  # any unique prefix
        if len(parts) >= 5 and (visible_env is None or (parts[0] == first if first.isdigit() else by_uuid)):
            total, free = (float(p) if p.replace(".", "", 1).isdigit() else None for p in parts[3:5])  # or "[N/A]"
            return GPUInfo(name=parts[2], memory_total_mib=total or 0.0, memory_free_mib=free)
    return None


def visible_gpu() -> GPUInfo | None:
    """The first GPU CUDA would give this process, asked of nvidia-smi so that the kernel initialises no CUDA."""
    smi = shutil.which("nvidia-smi")
    return _query_gpu(os.environ.get("CUDA_VISIBLE_DEVICES"), smi) if smi else None


def gpu_name() -> str | None:
    """The first visible GPU's name and memory (``"NVIDIA H100 80GB HBM3, 81559 MiB"``), or None."""
    gpu = visible_gpu()
    return f"{gpu.name}, {gpu.memory_total_mib:.0f} MiB" if gpu else None


def usable_cpus() -> int:
    return len(usable_core_ids())


def hardware() -> str:
    """One line for figure titles: the GPU if there is one, else the CPU, its core count and the lscpu flags that
    set its speed (``engine.cpu.SPEED_FLAGS``): a CPU's model name alone does not say whether it has VNNI or AMX."""
    gpu = gpu_name()
    if gpu:
        return gpu
    flags = cpu_speed_flags() if is_x86() else []
    isa = f"; {' '.join(flags)}" if flags else ("; no AVX2" if is_x86() else "")
    name = cpuinfo_field("model name") or platform.processor() or platform.machine()
    return f"{name} ({usable_cpus()} cores{isa})"


def provenance(profile: str, target_model: str, draft_model: str | None = None, served_format: str = "auto",
               **extra: Any) -> dict[str, Any]:
    """The columns every results row carries; ``served_format`` as asked for (on a CPU "auto" as what it picked)."""
    install = vllm_install()
    served = cpu_serving_format(served_format) if install.platform == "cpu" else served_format
    return {"profile": profile, "target_model": target_model, "draft_model": draft_model or "", "served_format": served,
            "vllm_package": install.distribution, "vllm_version": install.version, "hardware": hardware(),
            "python": sys.version.split()[0], "measured_at": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
            **extra}


def caption(prov: dict[str, Any]) -> str:  # a short provenance line for the bottom of a figure
    pair = prov["target_model"] + (f" + draft {prov['draft_model']}" if prov.get("draft_model") else "")
    served = f" ({prov['served_format']})" if prov.get("served_format") not in (None, "", "auto") else ""
    return (f"{prov['hardware']} | {pair}{served} | {prov['vllm_package']} {prov['vllm_version']} | "
            f"{prov['measured_at'][:10]}")
