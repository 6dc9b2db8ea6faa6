"""What a server's log says when it fails to start: the cause, which the last lines alone often miss."""

from __future__ import annotations

import re
from pathlib import Path

import psutil

#: vLLM's line for a worker that died without an error of its own: exit code -9 (SIGKILL, what the OOM killer sends),
#: or None when its monitor saw the process end before the exit code was collected (seen in a test that sent SIGKILL)
KILLED = re.compile(r"died unexpectedly \(exit code: (-9|None)\)")


def start_failure_excerpt(log_path: Path, lines: int = 40) -> str:
    """What a failed start's log says: its last ``lines``, and before them the first ERROR lines above the tail.
    Why: the API server's traceback fills the tail and ends in "See root cause above"; the cause (a worker killed,
    a memory check) is logged earlier by the engine's processes. A worker killed by signal 9 on a CPU is
    almost always the kernel's out-of-memory killer, so the excerpt then says how much memory is free."""
    try:
        text = log_path.read_text(errors="replace").splitlines()
    except OSError:
        return f"(no log at {log_path})"
    tail = text[-lines:]
    errors = [line for line in text[:-lines] if " ERROR " in line and _is_a_message(line.split("] ", 1)[-1])][:8]
    parts = [f"First errors in {log_path}:", *errors, "..."] if errors else []
    if any(KILLED.search(line) for line in text):
        free_gib = psutil.virtual_memory().available / 2**30
        parts.insert(0, "A server process died without an error of its own (killed), most likely by the "
                        f"out-of-memory killer: {free_gib:.1f} GiB of memory is free now. Stop other servers or "
                        "programs, or lower cpu_kv_cache_gib in the profile.")
    return "\n".join([*parts, f"Last lines of {log_path}:", *tail])


def _is_a_message(logged: str) -> bool:
    """A logged line that says something, not a line of a traceback's frames."""
    return bool(logged) and not logged[0].isspace() and not logged.startswith("Traceback")
