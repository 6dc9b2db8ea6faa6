"""The live demo in a real browser: Chromium, driven by Playwright, presses the button.

For each way of opening the demo (the Voila page of `make demo`, and the notebook in JupyterLab) the
test starts the server on 127.0.0.1 with cpu-tiny's smoke parameters, opens the demo, checks both
answer panes are empty, picks a structured prompt, presses **Send to both**, and waits for text in
both panes and numbers in the stats (TTFT, tokens/s, acceptance, speedup). A button that does
nothing leaves the panes empty and fails the test. A screenshot of the finished page goes to
``runs/browser-test/<way>/demo.png`` (the panel; ``page.png`` is the page) with the server logs next
to it.

Chromium: Playwright's own browser download is not reachable on our machines, so the test uses
Debian's ``chromium`` package (``make test`` installs it when missing, scripts/ensure_browser.sh). Without it the test fails
with one line saying how to install it; ``SPECDEC_SKIP_BROWSER=1`` turns browser tests off on
purpose (they are then reported as skipped, never passed).

Nothing is left behind: the browser closes, the server is stopped as Ctrl-C would, and every
process that inherited the demo's marker (the kernel) must be gone afterwards; the two vLLM servers are
shared by both ways (a pool, as `make run` shares servers) and must be gone after the last.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from specdec_helpers.engine.endpoints import HOST, free_port
from specdec_helpers.engine.pool_guard import exit_with_parent
from specdec_helpers.report.runs import REPO_ROOT, resolve_run_dir
from tools import demo_page

# Both ways open the same demo on the same two servers: one worker runs them back to back, sharing the servers
# through a pool (engine.pool, as `make run` shares them), so the second way starts none.
pytestmark = [pytest.mark.engine, pytest.mark.xdist_group("demo-browser")]

PROFILE = "cpu-tiny"
BOOT_TIMEOUT_S = 600  # kernel start + two engine starts (1-2 min each on a busy 2-core machine) + warm-up
ANSWER_TIMEOUT_S = 180
INSTALL_HINT = "install Debian's chromium (apt-get install chromium)"


def chromium_executable() -> str:
    """Debian's Chromium, or a one-line failure (a skip only when browser tests are off on purpose)."""
    if os.environ.get("SPECDEC_SKIP_BROWSER") == "1":
        pytest.skip("browser tests are off (SPECDEC_SKIP_BROWSER=1): the demo page was NOT tested in a browser")
    for name in ("chromium", "chromium-browser"):
        path = shutil.which(name)
        if path:
            return path
    pytest.fail(f"No Chromium for the browser test: {INSTALL_HINT}, or set SPECDEC_SKIP_BROWSER=1 to skip it "
                "on purpose.", pytrace=False)


def _start_jupyterlab(notebook: Path, log_path: Path) -> tuple[subprocess.Popen, str]:
    """JupyterLab on loopback, no token (nothing but this machine can reach it), rooted at the notebook."""
    port = free_port()
    cmd = [sys.executable, "-m", "jupyterlab", "--no-browser", f"--port={port}", f"--ServerApp.ip={HOST}",
           "--ServerApp.port_retries=0", "--allow-root", "--IdentityProvider.token=", "--ServerApp.password=",
           "--ServerApp.disable_check_xsrf=True", f"--ServerApp.root_dir={notebook.parent}",
           "--LabApp.news_url=", "--LabServerApp.extension_manager=readonly"]
    demo_id = f"lab-{time.time_ns()}"
    proc = subprocess.Popen(cmd, stdout=open(log_path, "w"), stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                            start_new_session=True, cwd=notebook.parent, preexec_fn=exit_with_parent,
                            env={**os.environ, demo_page.MARKER: demo_id, "JUPYTER_NO_CONFIG": "1"})
    proc.demo_id = demo_id
    try:
        demo_page.wait_listening(port, proc, timeout_s=120, name="JupyterLab")
    except BaseException:
        demo_page.stop(proc)
        raise
    return proc, f"http://{HOST}:{port}/lab/tree/{notebook.name}?reset"


def _open_in_lab(page, url: str) -> None:
    """Open the notebook in JupyterLab and run all its cells (what a learner does)."""
    page.goto(url, wait_until="domcontentloaded", timeout=120_000)
    page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=120_000)
    # a kernel must be attached before "Run All" does anything
    page.wait_for_function("() => !!document.querySelector('.jp-Notebook') && "
                           "!document.body.innerText.includes('Kernel Connecting')", timeout=120_000)
    page.locator(".jp-Notebook").first.click()
    page.keyboard.press("Escape")
    page.get_by_role("menuitem", name="Run", exact=True).click()
    page.get_by_role("menuitem", name="Run All Cells", exact=True).click()


@pytest.fixture(scope="module")
def demo_pool(tmp_path_factory):
    """The demo's two servers, kept up from the first way to the second, stopped after the last."""
    from tools.server_pool import RunPool

    pool = RunPool(tmp_path_factory.mktemp("demo-pool"), os.getpid())
    try:
        yield pool
    finally:
        left = pool.stop_all()
    assert not left, f"process groups of the demo's shared servers left running: {left}"


@pytest.mark.parametrize("way", ["voila", "jupyterlab"])
def test_demo_streams_both_answers_in_chromium(way: str, demo_pool, monkeypatch):
    chromium = chromium_executable()
    from conftest import series_environment

    for name, value in series_environment(demo_pool, f"demo-{way}").items():
        monkeypatch.setenv(name, value)  # Voila and JupyterLab pass it to the kernel, which starts the servers
    from playwright.sync_api import TimeoutError as PlaywrightTimeout
    from playwright.sync_api import sync_playwright

    run = resolve_run_dir(REPO_ROOT / "runs" / "browser-test" / way)
    for old in run.glob("*.png"):  # screenshots of an earlier run must not pass for this one's
        old.unlink()
    notebook = demo_page.prepare(PROFILE, smoke=True, run_dir=run)
    started_children = {p.pid for p in psutil.Process().children(recursive=True)}
    if way == "voila":
        server, url = demo_page.start(notebook, log_path=run / "voila.log")
    else:
        server, url = _start_jupyterlab(notebook, run / "jupyterlab.log")
    print(f"\n{way}: {url}; screenshot and logs in {run}")
    try:
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=chromium, args=["--no-sandbox"], headless=True)
            try:
                page = browser.new_page(viewport={"width": 1400, "height": 1000})
                if way == "voila":
                    page.goto(url, wait_until="commit", timeout=120_000)
                else:
                    _open_in_lab(page, url)
                send = page.locator(".specdec-send")
                try:
                    send.wait_for(state="visible", timeout=BOOT_TIMEOUT_S * 1000)
                    page.wait_for_function("() => !document.querySelector('.specdec-send').disabled",
                                           timeout=30_000)
                except PlaywrightTimeout:
                    page.screenshot(path=str(run / "boot-timeout.png"), full_page=True)
                    pytest.fail(f"The demo panel did not appear within {BOOT_TIMEOUT_S} s; see "
                                f"{run / 'boot-timeout.png'} and the logs in {run}")
                panes = {name: page.locator(f".specdec-answer-{name}") for name in ("baseline", "speculative")}
                assert all(p.inner_text().strip() == "" for p in panes.values()), "answers before any click"

                page.locator(".specdec-tabs .lm-TabBar-tab", has_text="Structured").first.click()
                picker = page.locator(".specdec-picker-structured select")
                picker.select_option(index=0)
                chosen = picker.locator("option:checked").inner_text()
                send.click()
                try:
                    page.wait_for_function(
                        "() => ['baseline', 'speculative'].every(n => document.querySelector("
                        "'.specdec-answer-' + n).innerText.trim().length > 0) && "
                        "/Speedup: [0-9.]+x/.test(document.querySelector('.specdec-summary').innerText)",
                        timeout=ANSWER_TIMEOUT_S * 1000)
                except PlaywrightTimeout:
                    page.screenshot(path=str(run / "no-answer.png"), full_page=True)
                    pytest.fail(f"Pressing 'Send to both' on {chosen!r} gave no complete answers within "
                                f"{ANSWER_TIMEOUT_S} s (the button does nothing?); see {run / 'no-answer.png'}")
                page.locator(".specdec-arena").screenshot(path=str(run / "demo.png"))  # the panel, answered
                page.screenshot(path=str(run / "page.png"), full_page=True)

                texts = {name: p.inner_text().strip() for name, p in panes.items()}
                stats = {name: page.locator(f".specdec-stats-{name}").inner_text() for name in panes}
                summary = page.locator(".specdec-summary").inner_text()
                print(f"prompt: {chosen}\nstats: {stats}\nsummary: {summary}")
                for name in panes:
                    assert texts[name], f"{name} pane is empty"
                    assert re.search(r"TTFT \d+ ms", stats[name]), stats[name]
                    assert re.search(r"\d+(\.\d+)? tokens/s", stats[name]), stats[name]
                    assert "done" in stats[name]
                assert re.search(r"acceptance \d+%", stats["speculative"]), stats["speculative"]
                speedup = float(re.search(r"Speedup: ([0-9.]+)x", summary).group(1))
                assert speedup > 0
            finally:
                browser.close()
    finally:
        demo_page.stop(server)
        left = demo_page.stop_leftovers(server.demo_id, keep_groups=frozenset(e.pgid for e in demo_pool.running()))
    assert not left, f"processes of the demo outlived its server and had to be killed: {left}"
    deadline = time.time() + 30
    while time.time() < deadline:
        ours = [p for p in psutil.Process().children(recursive=True) if p.pid not in started_children]
        if not ours:
            break
        time.sleep(1)
    assert not ours, f"processes left behind: {[(p.pid, p.name()) for p in ours]}"
    assert (run / "demo.png").stat().st_size > 10_000
