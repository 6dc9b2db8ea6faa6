"""One vLLM server per configuration for a whole run of the series, shared by its notebooks (a start takes 45-65 s
on two cores): ``make run`` opens a pool for every kernel (``SPECDEC_SERVER_POOL``: the ledger's folder,
``SPECDEC_SERVER_POOL_OWNER``: its pid), and a ``VLLMServer`` started in it asks the ledger. The owner
(``tools.server_pool``) stops every server at the end, and a guard process (``pool_guard``) stops each within a second
of the owner dying, even by SIGKILL. Without a pool every server is the notebook's own. How: docs/running.md, "One
server per configuration".
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import time
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, Callable

import psutil

from specdec_helpers.engine.endpoints import HOST, healthy, reset_prefix_cache
from specdec_helpers.engine.processes import group_alive, group_ram_bytes, stop_group

POOL_ENV = "SPECDEC_SERVER_POOL"
OWNER_ENV = "SPECDEC_SERVER_POOL_OWNER"
NOTEBOOK_ENV = "SPECDEC_NOTEBOOK"  # which notebook is running, for the ledger's history
#: free memory kept back when a new server starts (the kernel, the page cache of the next checkpoint)
MARGIN_BYTES = int(1.5 * 2**30)
#: memory (GiB) the pool leaves free for others beyond the margin: the test suite's other worker; unset in make run
RESERVE_ENV = "SPECDEC_SERVER_POOL_RESERVE_GIB"
#: environment variables that change what a server computes or how fast: part of its identity. Not TORCH*:
#: importing vLLM in a kernel sets TORCHINDUCTOR_*, which an eager server never reads
_IDENTITY_ENV_PREFIXES = ("VLLM_", "OMP_", "KMP_", "ONEDNN_", "DNNL_", "MKL_", "CUDA_", "LD_PRELOAD", "HF_")
_VOLATILE_FLAGS = ("--port", "--served-model-name")


def server_key(command: list[str], environment: dict[str, str]) -> str:
    """The identity of a server: its command line without port and served name, and the variables that matter."""
    args = [f"{arg}=*" if arg in _VOLATILE_FLAGS else arg
            for i, arg in enumerate(command) if i == 0 or command[i - 1] not in _VOLATILE_FLAGS]
    env = {k: v for k, v in sorted(environment.items()) if k.startswith(_IDENTITY_ENV_PREFIXES)}
    return hashlib.sha256(json.dumps([args, env]).encode()).hexdigest()[:16]


@dataclass
class Entry:
    """One running shared server, as the ledger keeps it."""

    key: str
    name: str  # the served model name it was started with: requests must use it
    pgid: int  # its guard's process group: the guard, the API server and the engine processes
    port: int
    log_path: str
    startup_s: float
    ram_bytes: int = 0  # measured PSS of the whole group, right after start
    temp_dir: str = ""  # its TMPDIR (vLLM's IPC sockets), removed when it stops
    last_used: float = field(default_factory=time.time)
    uses: int = 0  # notebooks' handles so far: the servers most asked for are the last to be stopped
    users: list[int] = field(default_factory=list)  # pids holding it now

    @property
    def base_url(self) -> str:
        return f"http://{HOST}:{self.port}"

    def alive(self) -> bool:
        return group_alive(self.pgid)

    def idle(self) -> bool:
        return not any(psutil.pid_exists(pid) for pid in self.users)

    def stop(self, timeout_s: float = 30.0) -> None:
        stop_group(self.pgid, timeout_s)
        if self.temp_dir:
            shutil.rmtree(self.temp_dir, ignore_errors=True)


def reserve_bytes(own_groups: set[int] = frozenset()) -> int:
    """What :data:`RESERVE_ENV` asks the pool to leave free (0 when unset), less what vLLM servers outside this
    pool hold already (they are out of free memory)."""
    reserve = int(float(os.environ.get(RESERVE_ENV) or 0) * 2**30)
    if not reserve:
        return 0
    held = 0
    for proc in psutil.process_iter(["cmdline", "name"]):
        with contextlib.suppress(psutil.Error, ProcessLookupError, PermissionError):
            cmd = " ".join(proc.info["cmdline"] or [])
            if ("vllm.entrypoints" in cmd or (proc.info["name"] or "").startswith("VLLM::")) \
                    and os.getpgid(proc.pid) not in own_groups:
                held += proc.memory_full_info().pss
    return max(reserve - held, 0)


class ServerPool:
    """The ledger of one run's shared servers (a JSON file and its lock in ``folder``)."""

    def __init__(self, folder: str | os.PathLike, owner_pid: int):
        from filelock import FileLock

        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        self.owner_pid = owner_pid
        self.path = self.folder / "ledger.json"
        self.lock = FileLock(str(self.folder / "ledger.lock"))

    def _read(self) -> dict[str, Any]:
        if not self.path.exists():
            return {"entries": {}, "events": []}
        data = json.loads(self.path.read_text())
        known = {f.name for f in fields(Entry)}  # a ledger written by another version of this module still reads
        data["entries"] = {k: Entry(**{n: x for n, x in v.items() if n in known}) for k, v in data["entries"].items()}
        return data

    def _write(self, data: dict[str, Any]) -> None:
        out = {**data, "entries": {k: asdict(e) for k, e in data["entries"].items()}}
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(out, indent=1))
        tmp.replace(self.path)

    @staticmethod
    def _event(data: dict[str, Any], what: str, entry: Entry) -> None:
        data["events"].append({"event": what, "key": entry.key, "name": entry.name, "time": round(time.time(), 1),
                               "notebook": os.environ.get(NOTEBOOK_ENV, ""), "startup_s": entry.startup_s})

    def acquire(self, server: Any) -> None:
        """Attach ``server`` to the running server of its configuration, or start that one (and make room)."""
        key = server.pool_key()
        with self.lock:  # held across a start: two kernels never start the same server twice
            data = self._read()
            entry = data["entries"].get(key)
            if entry is not None and not (entry.alive() and healthy(entry.base_url, timeout_s=5)):
                entry.stop(timeout_s=5)
                del data["entries"][key]
                entry = None
            reused = entry is not None
            if reused:  # empty its prefix cache: no measurement is sped up by an earlier notebook's prompts
                reset_prefix_cache(entry.base_url, f"the shared server {entry.name}")
                self._event(data, "reuse", entry)
            else:
                self._make_room(data, server)
                server._launch(pool_owner=self.owner_pid)
                entry = data["entries"][key] = Entry(
                    key=key, name=server.name, pgid=server.process.pid, port=server.port, log_path=str(server.log_path),
                    startup_s=round(server.startup_s, 1), ram_bytes=group_ram_bytes(server.process.pid),
                    temp_dir=str(server.temp_dir or ""))
                self._event(data, "start", entry)
            entry.users = [pid for pid in entry.users if psutil.pid_exists(pid)] + [os.getpid()]
            entry.last_used, entry.uses = time.time(), entry.uses + 1
            self._write(data)
        server._attach(entry, reused)

    def note_own_start(self, server: Any) -> None:  # a notebook's own server counts among the run's starts
        with self.lock:
            data = self._read()
            entry = Entry(key=server.pool_key(), name=server.name, pgid=0, port=server.port or 0,
                          log_path=str(server.log_path), startup_s=round(server.startup_s or 0.0, 1))
            self._event(data, "start-own", entry)
            self._write(data)

    def release(self, key: str) -> None:
        """Hand a server back: it stays up for the next notebook."""
        with self.lock:
            data = self._read()
            entry = data["entries"].get(key)
            if entry is not None:
                if os.getpid() in entry.users:
                    entry.users.remove(os.getpid())
                entry.last_used = time.time()
                self._write(data)

    def _stop_idle_until(self, data: dict[str, Any], enough: Callable[[int], bool]) -> int:
        """Stop idle servers, the least used, then the least recently used first, until ``enough(reserve)``; returns
        how many. ``reserve`` (:func:`reserve_bytes`) is read once: stopping our own servers does not change it."""
        reserve = reserve_bytes({e.pgid for e in data["entries"].values()})
        stopped = 0
        for entry in sorted((e for e in data["entries"].values() if e.idle()), key=lambda e: (e.uses, e.last_used)):
            if enough(reserve):
                break
            self._stop(data, entry)
            stopped += 1
        return stopped

    def _stop(self, data: dict[str, Any], entry: Entry) -> None:
        entry.stop()
        del data["entries"][entry.key]
        self._event(data, "stop", entry)

    def _make_room(self, data: dict[str, Any], server: Any) -> None:
        """Stop idle servers until ``server`` fits (CPU RAM; on a GPU, the card's share)."""
        if server.install.platform == "cpu":
            need = server.estimated_ram_bytes() + MARGIN_BYTES
            self._stop_idle_until(data, lambda reserve: psutil.virtual_memory().available >= need + reserve)
        else:
            self._stop_idle_until(data, lambda _: (len(data["entries"]) + 1) * server.gpu_memory_utilization <= 0.95)

    def _locked_stop_idle_until(self, enough: Callable[[int], bool]) -> int:
        with self.lock:
            data = self._read()
            stopped = self._stop_idle_until(data, enough)
            self._write(data)
        return stopped

    def make_room(self, nbytes: int) -> int:
        """Stop idle servers until ``nbytes`` (plus the margin) are free, for a kernel that needs memory of its own
        (notebook 01 loads both models). Returns how many it stopped."""
        return self._locked_stop_idle_until(
            lambda reserve: psutil.virtual_memory().available >= nbytes + MARGIN_BYTES + reserve)

    def reclaimable_bytes(self) -> int:
        """Memory of idle shared servers: a new start may take it (the preflight counts it as free)."""
        with self.lock:
            return sum(e.ram_bytes for e in self._read()["entries"].values() if e.idle() and e.alive())


def active_pool() -> ServerPool | None:
    """The pool this process was started in, while its owner lives; None outside ``make run``."""
    folder, owner = os.environ.get(POOL_ENV), os.environ.get(OWNER_ENV, "")
    if not folder or not owner.isdigit() or not psutil.pid_exists(int(owner)):
        return None
    return ServerPool(folder, int(owner))


def make_room(nbytes: int) -> int:
    """Inside ``make run``: stop idle shared servers until ``nbytes`` are free; outside it there are none."""
    pool = active_pool()
    return pool.make_room(int(nbytes)) if pool else 0

