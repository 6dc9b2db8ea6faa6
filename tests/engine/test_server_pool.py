"""Servers shared across the notebooks of a run (``engine.pool``), on real vLLM engines and real papermill.

One server start each: a two-notebook run whose second notebook reuses the first one's server and then
fails, and an owner killed with SIGKILL while its server runs.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import requests

from specdec_helpers.engine.pool import POOL_ENV, group_alive
from tools.run_series import run_notebooks
from tools.server_pool import RunPool

REPO = Path(__file__).resolve().parents[2]

MEASURE = """
import json, os, requests
from pathlib import Path
from prometheus_client.parser import text_string_to_metric_families
from specdec_helpers.engine.serving import VLLMServer
from specdec_helpers.engine.spec_config import ngram_config
from specdec_helpers.measure.prompts import load_prompt_sets, select
from specdec_helpers.measure.requests import measure_prompts, measure_request

def prefix_hits(url):
    families = text_string_to_metric_families(requests.get(url + "/metrics", timeout=10).text)
    return sum(s.value for f in families if f.name == "vllm:prefix_cache_hits" for s in f.samples
               if s.name.endswith("_total"))

prompts = select(load_prompt_sets(["structured"]), limit_per_class=3)
with VLLMServer(TARGET, name=NAME, speculative_config=ngram_config(4), log_dir=LOGS, max_model_len=1024,
                cpu_kv_cache_gib=0.5) as server:
    hits_before = prefix_hits(server.base_url)
    rows = measure_prompts([server], prompts, temperature=0.0, max_tokens=24, progress=False)
    out = {"reused": server.reused, "port": server.port, "served": server.served_model_name,
           "pooled": server._entry is not None, "prefix_hits": prefix_hits(server.base_url) - hits_before,
           "text": rows["text"].tolist(), "accepted": rows["accepted_tokens"].tolist(),
           "drafts": rows["drafts"].tolist()}
    # prefix caching hits whole KV blocks only (128 tokens on vLLM's CPU backend): a prompt of ~500 tokens
    text = "\\n".join(p.user_text for p in load_prompt_sets(["structured"]))[:2000]
    long = [{"role": "user", "content": "Repeat the first line of this text.\\n" + text}]
    hits = [prefix_hits(server.base_url)]
    for _ in range(2):  # cold=False: the cache as the pool left it (a measurement empties it before each request)
        measure_request(server, long, max_tokens=4, temperature=0.0, seed=0, cold=False)
        hits.append(prefix_hits(server.base_url))
    measure_request(server, long, max_tokens=4, temperature=0.0, seed=0)  # cold: prefills in full
    hits.append(prefix_hits(server.base_url))
    out["long_first_hits"], out["long_repeat_hits"] = hits[1] - hits[0], hits[2] - hits[1]
    out["long_cold_hits"] = hits[3] - hits[2]
Path(OUT).write_text(json.dumps(out))
"""


def _notebook(path: Path, source: str, **constants) -> Path:
    header = "\n".join(f"{name} = {value!r}" for name, value in constants.items())
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(header), nbformat.v4.new_code_cell(source)])
    nbformat.write(nb, path)
    return path


def test_a_shared_server_is_reused_measures_as_fresh_and_is_stopped_after_a_failing_notebook(target_dir, tmp_path):
    first = _notebook(tmp_path / "a_first.ipynb", MEASURE, TARGET=str(target_dir), NAME="first",
                      LOGS=str(tmp_path / "logs"), OUT=str(tmp_path / "first.json"))
    second = _notebook(tmp_path / "b_second.ipynb", MEASURE + "\nraise RuntimeError('this notebook fails')\n",
                       TARGET=str(target_dir), NAME="second", LOGS=str(tmp_path / "logs"),
                       OUT=str(tmp_path / "second.json"))
    run_dir = tmp_path / "run"
    runs, summary = run_notebooks([first, second], {}, run_dir)

    assert [r.ok for r in runs] == [True, False] and "this notebook fails" in runs[1].error
    assert summary["starts"] == 1 and summary["reuses"] == 1, summary
    a, b = (json.loads((tmp_path / f"{n}.json").read_text()) for n in ("first", "second"))
    assert a["pooled"] and b["pooled"] and not a["reused"] and b["reused"]
    assert b["port"] == a["port"] and b["served"] == "first"  # the same process, under the name it started with
    # the same greedy requests give the same answers and the same acceptance, exactly: reuse changes nothing
    assert b["text"] == a["text"] and b["accepted"] == a["accepted"] and b["drafts"] == a["drafts"]
    assert sum(a["accepted"]) > 0  # n-gram lookup accepted something, so equal counts mean something
    # the second notebook sent the first one's long prompt again, yet found nothing of it in the prefix cache
    # (emptied when the server was handed over); repeated within a notebook, it hits (caching is on, and
    # the counter is read right)
    assert b["long_first_hits"] == 0, b
    assert a["long_repeat_hits"] > 0 and b["long_repeat_hits"] > 0, (a, b)
    assert a["long_cold_hits"] == 0 and b["long_cold_hits"] == 0, (a, b)  # a measured request prefills in full
    # the run stopped the server although its last notebook failed
    ledger = json.loads((run_dir / "servers.json").read_text())
    assert [e["event"] for e in ledger["events"]] == ["start", "reuse", "stop"]
    assert [e["notebook"] for e in ledger["events"][:2]] == ["a_first", "b_second"]
    assert not RunPool(run_dir / "servers", os.getpid()).running()
    assert POOL_ENV not in os.environ  # the run's environment does not leak into the caller
    with_port = f"http://127.0.0.1:{a['port']}/health"
    try:
        requests.get(with_port, timeout=2)
        raise AssertionError("the shared server still answers after the run")
    except requests.ConnectionError:
        pass


OWNER = """
import os, subprocess, sys, time
from tools.server_pool import RunPool
pool = RunPool(sys.argv[1], os.getpid())
kernel = ("from specdec_helpers.engine.serving import VLLMServer\\n"
          "server = VLLMServer(sys.argv[1], name='orphan', log_dir=sys.argv[2], max_model_len=512,"
          " cpu_kv_cache_gib=0.25).start()\\n"
          "server.stop()\\n")  # handed back: the server stays up after this 'kernel' exits
subprocess.run([sys.executable, "-c", "import sys\\n" + kernel, sys.argv[2], sys.argv[3]],
               env={**os.environ, **pool.environment()}, check=True)
print("ready", flush=True)
time.sleep(600)
"""


def test_a_shared_server_stops_when_the_run_that_owns_it_is_killed(target_dir, tmp_path):
    pool_dir = tmp_path / "pool"
    owner = subprocess.Popen([sys.executable, "-c", OWNER, str(pool_dir), str(target_dir), str(tmp_path)],
                             stdout=subprocess.PIPE, text=True, cwd=REPO, start_new_session=True)
    try:
        assert owner.stdout.readline().strip() == "ready"
        entries = RunPool(pool_dir, owner.pid).running()
        assert len(entries) == 1 and group_alive(entries[0].pgid)
        assert requests.get(entries[0].base_url + "/health", timeout=5).status_code == 200  # outlived its kernel
        os.kill(owner.pid, signal.SIGKILL)  # no finally block, no atexit: only the guard is left to act
        owner.wait()
        deadline = time.time() + 40
        while group_alive(entries[0].pgid) and time.time() < deadline:
            time.sleep(0.5)
        assert not group_alive(entries[0].pgid), "the shared server outlived its killed owner"
    finally:
        if owner.poll() is None:
            os.killpg(owner.pid, signal.SIGKILL)

