"""``python -P pool_guard.py OWNER_PID -- COMMAND...``: run one shared vLLM server while the run owning it lives.
A shared server outlives the kernel that started it; this guard leads its process group and stops it once the
owner is gone, however it ended. Run by path, it imports nothing of this package."""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import sys
import time

import psutil

POLL_S = 0.5


def exit_with_parent() -> None:
    """For ``preexec_fn``: the child gets SIGTERM when its parent dies (a SIGKILLed kernel; Linux only)."""
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except OSError:  # not Linux
        pass


def owner_alive(owner: psutil.Process) -> bool:
    with contextlib.suppress(psutil.Error):
        return owner.is_running() and owner.status() != psutil.STATUS_ZOMBIE
    return False


def main(argv: list[str]) -> int:
    if len(argv) < 3 or argv[1] != "--" or not argv[0].isdigit():
        print("usage: pool_guard.py OWNER_PID -- COMMAND...", file=sys.stderr)
        return 2
    try:
        owner = psutil.Process(int(argv[0]))
    except psutil.NoSuchProcess:
        print(f"pool_guard: owner {argv[0]} is not running; not starting the server", file=sys.stderr)
        return 3
    child = subprocess.Popen(argv[2:], preexec_fn=exit_with_parent)
    while child.poll() is None:
        if not owner_alive(owner):
            print(f"pool_guard: owner {owner.pid} is gone; stopping the server", file=sys.stderr, flush=True)
            signal.signal(signal.SIGTERM, signal.SIG_IGN)  # the group's SIGTERM is for the server
            os.killpg(os.getpgrp(), signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                child.wait(timeout=20)
            os.killpg(os.getpgrp(), signal.SIGKILL)  # what is left, and this guard
        time.sleep(POLL_S)
    return child.returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
