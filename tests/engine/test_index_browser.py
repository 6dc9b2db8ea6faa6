"""The run's report in a real browser (Debian's Chromium, as the demo's test): a reader who opens index.html sees the
verdicts and notebook 05's figure without scrolling. A screenshot is kept in runs/browser-test/."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from test_demo_browser import chromium_executable

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "unit"))
from test_index_page import fake_run  # noqa: E402  (the same fake run as the unit test of the page)

from specdec_helpers.report.runs import REPO_ROOT, resolve_run_dir  # noqa: E402
from tools import run_series as runner  # noqa: E402

pytestmark = [pytest.mark.engine]
VIEWPORT = {"width": 1280, "height": 900}  # a laptop screen


def test_index_shows_the_verdicts_and_05s_figure_above_the_fold(tmp_path):
    from playwright.sync_api import sync_playwright

    chromium = chromium_executable()
    index = runner.write_index(tmp_path, fake_run(tmp_path), "cpu-coder", {"max_tokens": 48})
    shots = resolve_run_dir(REPO_ROOT / "runs" / "browser-test" / "index")
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium, args=["--no-sandbox"], headless=True)
        try:
            page = browser.new_page(viewport=VIEWPORT)
            page.goto(index.as_uri())
            page.wait_for_function("() => [...document.images].every(i => i.complete && i.naturalWidth > 0)")
            page.screenshot(path=str(shots / "index.png"))
            verdict = page.get_by_text("Do not enable speculative decoding").first.bounding_box()
            figure = page.locator('img[src="figures/05_acceptance_and_speedup.png"]').first.bounding_box()
        finally:
            browser.close()
    assert verdict["y"] < VIEWPORT["height"] and figure["y"] < VIEWPORT["height"], (verdict, figure)
