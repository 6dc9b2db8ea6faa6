"""Shared fixtures: real models, real vLLM servers on the CPU, and a check that none is left behind.

Engine starts cost about 65 s each on 2 cores (measured: SmolLM2-135M, most of it Python imports),
so the servers the unit tests share are session-scoped and started only when a test asks for one.
"""

from __future__ import annotations

import os
from pathlib import Path

import psutil
import pytest

from specdec_helpers.models import resolve_model
from specdec_helpers.serving import VLLMServer, core_share, draft_model_config, ngram_config, usable_core_ids

TARGET = "smollm2-135m-instruct"
K = 4


def _cores_of_this_worker(worker: str, workers: int, cores: list[int]) -> list[int]:
    """This xdist worker's share of the cores: contiguous, equal, disjoint ("gw1" of 2 on 0-1: [1])."""
    return core_share(cores, int(worker.removeprefix("gw")), workers)


def pytest_configure(config) -> None:
    """Under ``pytest -n N`` (what ``make test`` uses), give each worker its own cores.

    Why: most of the suite's time is vLLM engine starts, which are single-threaded Python imports,
    so two workers on 2 cores overlap them and halve the wall time. Pinned, the workers do not
    fight over cores: every server, kernel and torch thread a test starts inherits the affinity
    (``serving.cpu_threads_default`` binds the server's threads to exactly these cores), so each
    notebook still compares its baseline and speculative servers on the same hardware.
    """
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if not worker or workers < 2 or not hasattr(os, "sched_setaffinity"):
        return
    cores = usable_core_ids()
    if len(cores) >= workers:
        os.sched_setaffinity(0, _cores_of_this_worker(worker, workers, cores))


def vllm_processes() -> list[psutil.Process]:
    """vLLM server processes on this machine (the API server and its engine core)."""
    found = []
    for proc in psutil.process_iter(["cmdline", "name"]):
        try:
            cmd = " ".join(proc.info["cmdline"] or [])
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        if "vllm.entrypoints" in cmd or (proc.info["name"] or "").startswith("VLLM::"):
            found.append(proc)
    return found


def our_children() -> list[psutil.Process]:
    return psutil.Process(os.getpid()).children(recursive=True)


@pytest.fixture(scope="session")
def target_dir() -> Path:
    return resolve_model(TARGET)


@pytest.fixture(scope="session")
def log_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("server-logs")


def _serve(target_dir: Path, log_dir: Path, name: str, spec: dict | None):
    # float32: draft and verify passes then compute bit-for-bit comparable probabilities, so the
    # sampling test measures the rejection sampler, not bf16 rounding noise (0.89 vs 1.0 measured).
    server = VLLMServer(target_dir, name=name, speculative_config=spec, log_dir=log_dir,
                        max_model_len=1024, dtype="float32")
    with server:
        yield server


@pytest.fixture(scope="session")
def baseline_server(target_dir, log_dir):
    yield from _serve(target_dir, log_dir, "baseline", None)


@pytest.fixture(scope="session")
def ngram_server(target_dir, log_dir):
    yield from _serve(target_dir, log_dir, "ngram", ngram_config(K, 4))


@pytest.fixture(scope="session")
def self_draft_server(target_dir, log_dir):
    yield from _serve(target_dir, log_dir, "self-draft", draft_model_config(target_dir, K, "probabilistic"))


@pytest.fixture(scope="session", autouse=True)
def nothing_left_running():
    """After the whole session, no process of any server the tests started may survive.

    Tracked by process group (each server gets its own), so vLLM processes of other programs on
    the same machine do not count, while an engine core that outlived its API server does.
    """
    yield
    import time

    from specdec_helpers.serving import surviving_processes

    deadline = time.time() + 30
    while surviving_processes() and time.time() < deadline:
        time.sleep(1)
    leftovers = surviving_processes()
    assert not leftovers, f"processes of test servers left running: {leftovers}"
