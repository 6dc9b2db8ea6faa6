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


@lru_cache(maxsize=1)
def gpu_name() -> str | None:
    """The first GPU's name from nvidia-smi, or None on a machine without one."""
    if not shutil.which("nvidia-smi"):
        return None
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name,memory.total", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return None
    first = out.stdout.strip().splitlines()[:1]
    return first[0].strip() if out.returncode == 0 and first else None


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
    from .serving import vllm_install

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
