"""Where and how a number was measured: hardware, vLLM build, models, date.

A speedup without its hardware is not a fact. Every results row and every figure title carries
this, so a table copied out of a notebook still says what produced it.
"""

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


@lru_cache(maxsize=1)
def cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as handle:
            for line in handle:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


@dataclass(frozen=True)
class GPUInfo:
    """The first GPU this process may use: its name and memory (MiB, as nvidia-smi reports)."""

    name: str
    memory_total_mib: float
    memory_free_mib: float | None = None
    uuid: str = ""

    @property
    def label(self) -> str:
        return f"{self.name}, {self.memory_total_mib:.0f} MiB"


def _visible_entries(value: str | None) -> list[str] | None:
    """CUDA_VISIBLE_DEVICES as a list of entries; None means "all GPUs" (the variable is unset).

    CUDA's rules: an empty value hides every GPU, and the list stops at the first entry that is
    not a valid device (so "-1" hides them all too).
    """
    if value is None:
        return None
    return [entry.strip() for entry in value.split(",") if entry.strip()]


def _first_visible(rows: list[dict[str, str]], visible: list[str] | None) -> dict[str, str] | None:
    if visible is None:
        return rows[0] if rows else None
    if not visible:
        return None
    first = visible[0]
    if first.isdigit():
        return next((r for r in rows if r["index"] == first), None)
    if first.startswith(("GPU-", "MIG-")):  # CUDA accepts any unique prefix of a UUID
        return next((r for r in rows if r["uuid"].startswith(first)), None)
    return None  # "-1" or another invalid entry: no GPU is visible


@lru_cache(maxsize=8)
def _query_gpu(visible_env: str | None, smi: str | None) -> GPUInfo | None:
    if smi is None:
        return None
    try:
        out = subprocess.run([smi, "--query-gpu=index,uuid,name,memory.total,memory.free",
                              "--format=csv,noheader,nounits"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if out.returncode != 0:
        return None
    rows = []
    for line in out.stdout.strip().splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) >= 4:
            rows.append({"index": parts[0], "uuid": parts[1], "name": parts[2], "total": parts[3],
                         "free": parts[4] if len(parts) > 4 else ""})
    row = _first_visible(rows, _visible_entries(visible_env))
    if row is None:
        return None

    def number(text: str) -> float | None:
        try:
            return float(text)
        except ValueError:  # "[N/A]" on some MIG setups
            return None

    return GPUInfo(name=row["name"], memory_total_mib=number(row["total"]) or 0.0,
                   memory_free_mib=number(row["free"]), uuid=row["uuid"])


def visible_gpu() -> GPUInfo | None:
    """The first GPU CUDA would give this process, honouring CUDA_VISIBLE_DEVICES; None if none.

    Asked of nvidia-smi (no CUDA initialisation in the notebook's kernel). nvidia-smi numbers
    GPUs in PCI bus order; CUDA does too when CUDA_DEVICE_ORDER=PCI_BUS_ID (the usual setting
    on multi-GPU servers; with CUDA's default, fastest-first order, the two agree unless the
    machine mixes GPU models).
    """
    return _query_gpu(os.environ.get("CUDA_VISIBLE_DEVICES"), shutil.which("nvidia-smi"))


def gpu_name() -> str | None:
    """The first visible GPU's name and memory (``"NVIDIA H100 80GB HBM3, 81559 MiB"``), or None
    on a machine without one or when CUDA_VISIBLE_DEVICES hides them all."""
    gpu = visible_gpu()
    return gpu.label if gpu else None


def usable_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def hardware() -> str:
    """One line for figure titles: the GPU if there is one, else the CPU and its core count."""
    gpu = gpu_name()
    return gpu if gpu else f"{cpu_name()} ({usable_cpus()} cores)"


def provenance(profile: str, target_model: str, draft_model: str | None = None,
               **extra: Any) -> dict[str, Any]:
    """The columns every results row carries."""
    from specdec_helpers.engine.serving import vllm_install

    install = vllm_install()
    row = {
        "profile": profile,
        "target_model": target_model,
        "draft_model": draft_model or "",
        "vllm_package": install.distribution,
        "vllm_version": install.version,
        "hardware": hardware(),
        "python": sys.version.split()[0],
        "measured_at": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }
    row.update(extra)
    return row


def caption(prov: dict[str, Any]) -> str:
    """A short provenance line for the bottom of a figure."""
    pair = prov["target_model"] + (f" + draft {prov['draft_model']}" if prov.get("draft_model") else "")
    return (f"{prov['hardware']} | {pair} | {prov['vllm_package']} {prov['vllm_version']} | "
            f"{prov['measured_at'][:10]}")
