"""Serve the live demo (notebooks/demo.ipynb) as a web page with Voila, on 127.0.0.1 only.

    python -m tools.demo_page [--profile cpu-coder|cpu-tiny] [--smoke] [--port N] [--set NAME=VALUE]

``make demo`` calls this. Why Voila: it is Jupyter's own way to turn a notebook into a page. The
page runs the same notebook, in a real kernel, with the same ipywidgets panel as JupyterLab, and
hides the code; the widgets stay live because the kernel stays up as long as the page is open. So
there is one demo, not a notebook plus a separate web app that could drift from it.

Parameters reach the page the way ``make run`` gives them to papermill: the profile's values that
the notebook declares are injected after its ``parameters`` cell (papermill's own
``parameterize_notebook``) into a generated copy, ``runs/demo-<profile>/demo.ipynb``, which Voila
serves. The committed notebook keeps the default profile's values, for JupyterLab.

Lifetime: every page load executes the notebook in a new kernel, which starts both vLLM servers.
Closing the page shuts that kernel down (Voila's ``beforeunload`` handler); Ctrl-C or SIGTERM stops
Voila, which shuts down all its kernels; a kernel that exits stops its servers (atexit), and one
that dies takes them with it (PR_SET_PDEATHSIG). After Voila exits this launcher checks that no
vLLM server started meanwhile is left, and stops any that is (it says so: that would be a bug).
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from specdec_helpers.engine.endpoints import HOST, free_port
from specdec_helpers.engine.pool_guard import exit_with_parent
from specdec_helpers.report.runs import REPO_ROOT, resolve_run_dir
from tools.profiles import load_profile

DEMO_NOTEBOOK = REPO_ROOT / "notebooks" / "demo.ipynb"
# Set in Voila's environment; its kernels and their vLLM servers inherit it, which is how we find
# (only) this demo's servers afterwards, whatever else runs on the machine.
MARKER = "SPECDEC_DEMO_ID"


def prepare(profile: str, smoke: bool = False, overrides: dict[str, Any] | None = None,
            run_dir: str | Path | None = None) -> Path:
    """The demo notebook with ``profile``'s parameters injected, written into its run folder."""
    import nbformat
    import papermill
    from papermill.iorw import load_notebook_node
    from papermill.parameterize import parameterize_notebook

    params = load_profile(profile, smoke=smoke)
    params.update(overrides or {})
    declared = papermill.inspect_notebook(str(DEMO_NOTEBOOK))
    chosen = {k: v for k, v in params.items() if k in declared}
    run = resolve_run_dir(run_dir or REPO_ROOT / "runs" / f"demo-{profile}")
    chosen["run_dir"] = str(run)
    nb = parameterize_notebook(load_notebook_node(str(DEMO_NOTEBOOK)), chosen,
                               kernel_name="python3", language="python")
    path = run / DEMO_NOTEBOOK.name
    nbformat.write(nb, path)
    return path


def voila_command(notebook: Path, port: int) -> list[str]:
    """Voila on loopback only, on exactly ``port`` (no silent move to another one)."""
    return [sys.executable, "-m", "voila", str(notebook), "--no-browser", f"--port={port}",
            f"--Voila.ip={HOST}", "--Voila.port_retries=0", "--show_tracebacks=True"]
    # Not --progressive_rendering: Voila 0.5.13 then runs each cell inside a websocket message
    # handler, which stops it from reading pongs, so a cell longer than the ping timeout (starting
    # two servers takes minutes on a CPU) drops the page. Plain rendering streams the page instead.


def wait_listening(port: int, proc: subprocess.Popen, timeout_s: float = 60.0, name: str = "Voila") -> None:
    """Wait until the server accepts connections (without requesting Voila's page: that would start a
    kernel)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{name} exited with code {proc.returncode} before serving the page.")
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.settimeout(1.0)
            if sock.connect_ex((HOST, port)) == 0:
                return
        time.sleep(0.3)
    raise RuntimeError(f"{name} did not listen on {HOST}:{port} within {timeout_s:.0f} s.")


def start(notebook: Path, port: int | None = None, log_path: Path | None = None,
          new_session: bool = True) -> tuple[subprocess.Popen, str]:
    """Start Voila on ``notebook``; returns the process (``proc.demo_id`` marks its servers) and the
    page's URL once it listens.

    ``new_session`` (tests): Voila gets its own process group, so Ctrl-C in a terminal does not reach it.
    """
    port = port or free_port()
    demo_id = uuid.uuid4().hex
    out = open(log_path, "w") if log_path else None
    proc = subprocess.Popen(voila_command(notebook, port), stdout=out, stderr=subprocess.STDOUT if out else None,
                            stdin=subprocess.DEVNULL, start_new_session=new_session, cwd=notebook.parent,
                            env={**os.environ, MARKER: demo_id}, preexec_fn=exit_with_parent)
    proc.demo_id = demo_id
    try:
        wait_listening(port, proc)
    except BaseException:
        stop(proc)
        raise
    return proc, f"http://{HOST}:{port}/"


def stop(proc: subprocess.Popen, timeout_s: float = 60.0) -> None:
    """Stop Voila as Ctrl-C does (it then shuts its kernels down), harder if it does not listen."""
    for sig, wait in ((signal.SIGINT, timeout_s), (signal.SIGTERM, 15.0), (signal.SIGKILL, 10.0)):
        if proc.poll() is not None:
            break
        try:
            proc.send_signal(sig)
            proc.wait(timeout=wait)
        except subprocess.TimeoutExpired:
            continue
        except ProcessLookupError:
            break


def demo_processes(demo_id: str, keep_groups: frozenset[int] = frozenset()) -> list:
    """Processes that inherited this demo's marker (kernels, vLLM servers and their engines), except those in
    ``keep_groups`` (the process groups of a server pool's servers, which the pool stops)."""
    import psutil

    found = []
    for proc in psutil.process_iter():
        try:
            if proc.environ().get(MARKER) == demo_id and os.getpgid(proc.pid) not in keep_groups:
                found.append(proc)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess, ProcessLookupError):
            continue
    return found


def stop_leftovers(demo_id: str, grace_s: float = 30.0, keep_groups: frozenset[int] = frozenset()) -> list[int]:
    """Once Voila is gone: wait ``grace_s`` for this demo's processes to exit, kill the rest (but not a server
    pool's servers, ``keep_groups``: the pool stops those).

    Returns the pids that had to be killed (none, when the shutdown chain works).
    """
    deadline = time.monotonic() + grace_s
    while demo_processes(demo_id, keep_groups) and time.monotonic() < deadline:
        time.sleep(1)
    left = demo_processes(demo_id, keep_groups)
    for proc in left:
        try:
            proc.kill()
        except Exception:  # already gone
            pass
    return [p.pid for p in left]


def memory_refusal(profile: str, smoke: bool, overrides: dict[str, Any]) -> str | None:
    """Why the demo cannot start here, when the reason is memory: the page needs both servers up at
    once, and a float32 1.5B pair (CPUs without fast bf16) needs ~27 GiB. Other problems are left
    to the page's own preflight, which shows them in place."""
    from specdec_helpers.demo import MAX_TOKENS_LIMIT
    from specdec_helpers.measure.prompts import load_prompt_sets
    from specdec_helpers.preflight import PreflightError, RunSettings

    params = load_profile(profile, smoke=smoke)
    params.update(overrides)
    try:
        RunSettings.from_parameters({"profile": profile, **params}).check(
            load_prompt_sets(["structured", "creative"]), MAX_TOKENS_LIMIT, servers=2)
    except PreflightError as exc:
        if not re.search(r"\bRAM\b", str(exc)):
            return None
        return (f"The demo needs two servers of profile {profile} up at once, and this machine cannot hold "
                f"them:\n{exc}\nTry `make demo PROFILE=cpu-tiny` (a small pair), or a machine with more memory; "
                "notebook 05 measures the same comparison one server at a time.")
    except Exception:  # models not provisioned yet, no tokenizer: the page's preflight reports it
        return None
    return None


DEFAULT_PROFILE = "cpu-coder"
FALLBACK_PROFILE = "cpu-tiny"


def choose_profile(asked: str | None, smoke: bool, overrides: dict[str, Any]) -> tuple[str, str | None]:
    """The profile the page runs, and why it cannot run (None when it can).

    A profile the user names is used or refused, never swapped. Without one, the default pair runs
    where both of its servers fit in memory; where they do not (a float32 1.5B pair on a 24 GB
    machine), the small pair runs instead and we say so, so `make demo` on a fresh clone always
    shows a working page. The small pair's drafts cost too much for its tiny target: expect the
    speculative pane to be slower there (notebook 04 explains why).
    """
    if asked:
        return asked, memory_refusal(asked, smoke, overrides)
    refusal = memory_refusal(DEFAULT_PROFILE, smoke, overrides)
    if not refusal:
        return DEFAULT_PROFILE, None
    print(f"The default pair ({DEFAULT_PROFILE}) does not fit in this machine's memory twice over, so the demo "
          f"runs {FALLBACK_PROFILE} (SmolLM2-135M and a distilled draft; speculation does not pay for a target that "
          f"small). `make demo PROFILE={DEFAULT_PROFILE}` shows the memory it needs.", file=sys.stderr)
    return FALLBACK_PROFILE, memory_refusal(FALLBACK_PROFILE, smoke, overrides)


def describe(profile: str, params: dict[str, Any]) -> str:
    """What the page will run and why, for the terminal: the pair, k and the served format auto picked."""
    from specdec_helpers.engine.cpu import cpu_has_int8_dot, cpu_serving_format
    from specdec_helpers.engine.install import vllm_install

    asked = params.get("served_format", "auto")
    if vllm_install().platform != "cpu":
        served = f"served as {asked} (vLLM's --dtype)"
    else:
        fmt = cpu_serving_format(asked)
        why = ("you asked for it" if asked != "auto" else
               "this CPU multiplies int8 natively (VNNI), and int8 holds about half of bf16's weight bytes"
               if fmt == "int8" else "no int8 dot products here" + ("" if cpu_has_int8_dot() else " (no VNNI)"))
        served = f"served as {fmt} ({why})"
    return (f"The demo runs {profile}: {params['target_model']} alone and drafted by {params.get('draft_model')} "
            f"(k = {params.get('num_speculative_tokens', 4)}), both servers up at once, {served}. The page shows "
            "how much memory each server holds.")


def main(argv: list[str] | None = None) -> int:
    from tools.profiles import parse_overrides

    parser = argparse.ArgumentParser(prog="python -m tools.demo_page", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--profile", default=None,
                        help=f"default: {DEFAULT_PROFILE}, or {FALLBACK_PROFILE} where its pair does not fit in memory")
    parser.add_argument("--smoke", action="store_true", help="the tests' small parameters")
    parser.add_argument("--port", type=int, default=None, help="default: a free port")
    parser.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                        help="override a parameter (VALUE is read as YAML), e.g. --set max_tokens=128")
    args = parser.parse_args(argv)

    overrides = parse_overrides(args.set)
    args.profile, refusal = choose_profile(args.profile, args.smoke, overrides)
    if refusal:
        print(refusal, file=sys.stderr)
        return 2
    print(describe(args.profile, load_profile(args.profile, smoke=args.smoke) | overrides), flush=True)
    notebook = prepare(args.profile, args.smoke, overrides)
    # Same process group as `make`: Ctrl-C reaches Voila directly, and it shuts its kernels down.
    proc, url = start(notebook, args.port, new_session=False)
    print(f"\n  Demo ({args.profile}): {url}\n  Open it once (every page load starts its own pair of "
          f"servers; the first load takes a minute or two). Ctrl-C here stops everything.\n"
          f"  Server logs: {notebook.parent / 'logs'}\n", flush=True)
    try:
        proc.wait()
    except KeyboardInterrupt:
        print("\nstopping the demo (Voila shuts its kernels down, each kernel its servers)...", flush=True)
        try:
            proc.wait(timeout=60)
        except (subprocess.TimeoutExpired, KeyboardInterrupt):
            stop(proc, timeout_s=5)
    left = stop_leftovers(proc.demo_id)
    if left:
        print(f"warning: vLLM processes {left} outlived the demo and were killed; please report this.",
              file=sys.stderr)
        return 1
    print("demo stopped; no vLLM server left running.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
