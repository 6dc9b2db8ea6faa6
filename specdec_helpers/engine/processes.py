"""Process groups: is one alive, what it holds in RAM, stop it. A vLLM server is one group (its API server and
engine processes, under a guard when shared), so :mod:`engine.serving` and :mod:`engine.pool` measure and stop
servers the same way, from here."""

from __future__ import annotations

import contextlib
import os
import signal
import time

import psutil


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
        return True
    except (ProcessLookupError, PermissionError):
        return False


def group_ram_bytes(pgid: int) -> int:
    """Proportional set size of every process in the group (shared pages counted once across them)."""
    total = 0
    for proc in psutil.process_iter():
        with contextlib.suppress(psutil.Error, ProcessLookupError, PermissionError):
            if os.getpgid(proc.pid) == pgid:
                total += proc.memory_full_info().pss
    return total


def stop_group(pgid: int, timeout_s: float = 30.0) -> None:
    """SIGTERM to the whole group, then SIGKILL to what is left."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGTERM)
    deadline = time.time() + timeout_s
    while group_alive(pgid) and time.time() < deadline:
        with contextlib.suppress(ChildProcessError, OSError):  # a guard this process started stays a zombie
            os.waitpid(pgid, os.WNOHANG)                       # (and its group "alive") until reaped
        time.sleep(0.2)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pgid, os.WNOHANG)
