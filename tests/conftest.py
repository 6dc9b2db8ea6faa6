"""Shared fixtures: real models, real vLLM servers on the CPU, and a check that none is left behind.

Engine starts cost about 65 s each on 2 cores (measured: SmolLM2-135M, most of it Python imports),
so the servers the unit tests share are session-scoped, started only when a test asks for one and
stopped as soon as the last test that needs one is done (see "Shared servers" below).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from specdec_helpers.engine.cpu import core_share, usable_core_ids
from specdec_helpers.engine.server_log import start_failure_excerpt
from specdec_helpers.engine.serving import VLLMServer
from specdec_helpers.engine.spec_config import draft_model_config, ngram_config
from specdec_helpers.models.resolve import resolve_model

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
    (``engine.cpu.cpu_threads_default`` binds the server's threads to exactly these cores), so each
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


# --- The machine to itself: a test that needs most of the RAM runs alone --------------------------
#
# The default pair's test (tests/test_coder_pair.py) converts and serves a 1.5B + 0.5B pair in
# float32 (about 12 GB); next to the other worker's servers it left 0.1 GB free and vLLM refused
# to start (seen from an empty cache). Tests marked ``needs_the_machine`` hold an exclusive lock
# for their whole run (setup to teardown), every other test a shared one, so the worker that
# takes the exclusive lock waits for the other worker's current test and then runs alone. A
# turnstile lock stops new shared holders from starving a waiting exclusive one.

RAM_LOCK = Path(tempfile.gettempdir()) / f"specdec-tests-{os.getuid()}.lock"


@contextlib.contextmanager
def machine_turn(exclusive: bool) -> Iterator[None]:
    with open(RAM_LOCK.with_suffix(".turnstile"), "a") as turnstile, open(RAM_LOCK, "a") as lock:
        fcntl.flock(turnstile, fcntl.LOCK_EX)
        try:
            fcntl.flock(lock, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        finally:
            fcntl.flock(turnstile, fcntl.LOCK_UN)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):
    exclusive = item.get_closest_marker("needs_the_machine") is not None
    with machine_turn(exclusive=exclusive):
        if exclusive:  # the notebook tier's idle shared servers give their memory back (they restart on demand)
            stop_idle_series_servers()
        return (yield)


# --- The notebook tier shares servers as `make run` does ------------------------------------------------
#
# Each notebook asks for the same few servers (the target alone, with its draft, the draft alone, n-gram
# lookup); started per notebook they were 20 starts of about a minute each. The notebook tests therefore run
# as one group on one worker, in `make run`'s order, inside one server pool (specdec_helpers.engine.pool),
# which keeps a server up for the next notebook while memory allows: the pool leaves
# SERIES_RESERVE_GIB free for the other worker's servers (two of the test model's, about 4.7 GB each; the
# servers it has up already count against it),
# a test that needs the machine stops its idle servers first, and the last notebook test stops them all.

SERIES_GROUP = "notebook-series"
SERIES_RESERVE_GIB = 9.5
SERIES_POINTERS = RAM_LOCK.with_suffix(".pools")  # one file per worker holding its pool's folder


def series_environment(pool, notebook: str) -> dict[str, str]:
    """What a kernel of the notebook tier needs to share ``pool``: its variables, the notebook's name, and the
    reserve. Every test that starts servers in a pool sets all of it: a pool without the reserve filled the memory
    the other worker's servers needed, and the kernel's out-of-memory killer stopped one of them mid-start."""
    from specdec_helpers.engine.pool import NOTEBOOK_ENV, RESERVE_ENV

    return {**pool.environment(), NOTEBOOK_ENV: notebook, RESERVE_ENV: str(SERIES_RESERVE_GIB)}


def stop_idle_series_servers() -> int:
    """Stop the idle servers of every worker's notebook pool on this machine."""
    from tools.server_pool import RunPool

    stopped = 0
    for pointer in SERIES_POINTERS.glob("*"):
        folder = Path(pointer.read_text().strip())
        if (folder / "ledger.json").exists():
            stopped += RunPool(folder, int(pointer.name)).stop_idle()
    return stopped


@pytest.fixture(scope="session")
def series_pool(tmp_path_factory):
    """The notebook tier's server pool (this worker owns it; its guards stop the servers if the worker dies)."""
    from tools.server_pool import RunPool

    folder = tmp_path_factory.mktemp("series-pool")
    pool = RunPool(folder, os.getpid())
    SERIES_POINTERS.mkdir(exist_ok=True)
    pointer = SERIES_POINTERS / str(os.getpid())
    pointer.write_text(str(folder))
    _pools["series_pool"] = pool
    try:
        yield pool
    finally:
        _pools.pop("series_pool", None)
        stop_series_pool(pool)
        pointer.unlink(missing_ok=True)


def stop_series_pool(pool) -> None:
    """Stop every server of the pool, write what it did (servers.json beside its ledger), and fail if any
    process of those servers survived."""
    import json

    left = pool.stop_all()
    (pool.folder / "servers.json").write_text(json.dumps(pool.summary(), indent=1))
    assert not left, f"process groups of the notebook tier's shared servers left running: {left}"


_pools: dict = {}


# --- Shared servers: started on first use, stopped right after their last test -------------------
#
# A CPU server of the 135M test model holds about 4.7 GB (its worker alone 3.5 GB with the 1 GiB KV
# minimum). Kept until the session ends, three of them on one worker plus the other worker's notebook
# (two servers and a kernel) outgrow 24 GB, and the kernel's OOM killer then takes one of them in the
# middle of the run (seen in CI as "connection refused" on a shared server). So every test that uses
# one goes to one xdist group (one worker, run back to back), each server is stopped as soon as the
# last test that needs it is done, and the tests are ordered so that at most two run at once.

SHARED_SERVERS = ("baseline_server", "ngram_server", "self_draft_server")
SHARED_GROUP = "session-servers"
_tests_left: dict[str, int] = {}
_running: dict[str, VLLMServer] = {}
_grouping_problem: str | None = None


def shared_servers_of(item: pytest.Item) -> set[str]:
    """The shared servers a test uses: as fixture arguments, or by name as a parameter
    (``request.getfixturevalue(name)`` in a parametrised test)."""
    names = set(getattr(item, "fixturenames", ()))
    callspec = getattr(item, "callspec", None)
    if callspec is not None:
        names |= {value for value in callspec.params.values() if isinstance(value, str)}
    return names & set(SHARED_SERVERS)


def uses_series_pool(item: pytest.Item) -> bool:
    return "series_pool" in getattr(item, "fixturenames", ())


TIERS = Path(__file__).parent


def tier_of(item: pytest.Item) -> str:
    """``unit``, ``engine`` or ``notebooks``: the folder under tests/ the test lives in."""
    return Path(item.path).relative_to(TIERS).parts[0]


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist reads the groups
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark every test of the engine and notebook tiers ``engine`` (and notebook tests ``notebook``),
    so ``-m "not engine"`` is the fast tier. Tests of the shared servers, and tests that need the
    machine, go to one group: on one worker, a test that needs the machine (first, by file name)
    never meets the group's idle servers."""
    for item in items:
        if tier_of(item) in ("engine", "notebooks"):
            item.add_marker(pytest.mark.engine)
        if tier_of(item) == "notebooks":
            item.add_marker(pytest.mark.notebook)
        if shared_servers_of(item) or item.get_closest_marker("needs_the_machine"):
            item.add_marker(pytest.mark.xdist_group(SHARED_GROUP))
        elif uses_series_pool(item):
            item.add_marker(pytest.mark.xdist_group(SERIES_GROUP))
    # the two long groups first, so that xdist hands one to each worker and the short tests fill in after
    def rank(item: pytest.Item) -> int:
        groups = [m.args[0] for m in item.iter_markers("xdist_group") if m.args]
        return 0 if SERIES_GROUP in groups else 1 if SHARED_GROUP in groups else 2
    items.sort(key=rank)  # stable: each group keeps its order (the notebooks in make run's)


def pytest_collection_finish(session: pytest.Session) -> None:
    """Count, per shared server, the tests of this run that need it (after any -k/deselection).

    Under --dist loadgroup the whole group runs on one worker, so that worker sees every count go to
    zero; on the other worker the servers never start. With another --dist mode a count may never
    reach zero and the server simply lives until the session ends, as session fixtures do.
    """
    global _grouping_problem
    _grouping_problem = None
    # pytest-xdist sets this option on its workers only: a run without -n has no such option
    if getattr(session.config.option, "loadgroup", False):  # an xdist worker under --dist loadgroup
        ungrouped = [item.nodeid for item in session.items
                     if shared_servers_of(item) and not item.nodeid.endswith(f"@{SHARED_GROUP}")]
        if ungrouped:  # pytest-xdist marks a group in the node id; pytest 9.2 ignores that
            _grouping_problem = (
                f"pytest-xdist did not group the {len(ungrouped)} tests that share servers, so both "
                f"workers would start them and outgrow the memory: run the tests in the project's "
                f"environment (`make test`), whose pytest is pinned below 9.2 (pytest-xdist issue #1386).")
    _tests_left.clear()
    for item in session.items:
        for name in shared_servers_of(item) | ({"series_pool"} if uses_series_pool(item) else set()):
            _tests_left[name] = _tests_left.get(name, 0) + 1


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item):
    """Fail a test that needs a shared server, with the reason, when the grouping failed or when the
    server died before the test (instead of a bare "connection refused" inside it)."""
    if _grouping_problem and shared_servers_of(item):
        pytest.fail(_grouping_problem, pytrace=False)
    result = yield
    for name in sorted(shared_servers_of(item)):
        server = _running.get(name)
        if server is not None and server.process is not None and not server.running:
            code = server.process.returncode
            pytest.fail(f"the shared server {server.name!r} exited (code {code}; -9 means killed, on a "
                        f"small machine usually by the kernel's OOM killer) before this test.\n"
                        f"{start_failure_excerpt(server.log_path)}", pytrace=False)
    return result


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item: pytest.Item) -> None:
    for name in shared_servers_of(item):
        _tests_left[name] = _tests_left.get(name, 0) - 1
        if _tests_left[name] <= 0 and name in _running:
            _running.pop(name).stop()
    if uses_series_pool(item):
        _tests_left["series_pool"] = _tests_left.get("series_pool", 0) - 1
        if _tests_left["series_pool"] <= 0 and "series_pool" in _pools:
            stop_series_pool(_pools["series_pool"])  # the fixture's teardown (session end) finds nothing left


def _serve(target_dir: Path, log_dir: Path, fixture: str, name: str, spec: dict | None):
    # float32: draft and verify passes then compute bit-for-bit comparable probabilities, so the
    # sampling test measures the rejection sampler, not bf16 rounding noise (0.89 vs 1.0 measured).
    server = VLLMServer(target_dir, name=name, speculative_config=spec, log_dir=log_dir,
                        max_model_len=1024, dtype="float32")
    with server:
        _running[fixture] = server
        yield server
    _running.pop(fixture, None)


@pytest.fixture(scope="session")
def baseline_server(target_dir, log_dir):
    yield from _serve(target_dir, log_dir, "baseline_server", "baseline", None)


@pytest.fixture(scope="session")
def ngram_server(target_dir, log_dir):
    yield from _serve(target_dir, log_dir, "ngram_server", "ngram", ngram_config(K, 4))


@pytest.fixture(scope="session")
def self_draft_server(target_dir, log_dir):
    yield from _serve(target_dir, log_dir, "self_draft_server", "self-draft",
                      draft_model_config(target_dir, K, "probabilistic"))


@pytest.fixture(autouse=True)
def unit_tests_start_no_server(request, monkeypatch):
    """A test in tests/unit that starts a vLLM server fails, naming the tier it belongs in."""
    if tier_of(request.node) == "unit":
        def refuse(self, *args, **kwargs):
            raise AssertionError("a unit test started a vLLM server: it belongs in tests/engine")
        monkeypatch.setattr(VLLMServer, "start", refuse)


@pytest.fixture(scope="session", autouse=True)
def nothing_left_running():
    """After the whole session, no process of any server the tests started may survive.

    Tracked by process group (each server gets its own), so vLLM processes of other programs on
    the same machine do not count, while an engine core that outlived its API server does.
    """
    yield
    import time

    from specdec_helpers.engine.processes import group_alive
    from specdec_helpers.engine.serving import started_groups

    deadline = time.time() + 30
    while any(map(group_alive, started_groups)) and time.time() < deadline:
        time.sleep(1)
    leftovers = [group for group in started_groups if group_alive(group)]
    assert not leftovers, f"process groups of test servers left running: {leftovers}"
