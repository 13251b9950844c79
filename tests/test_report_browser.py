"""report.html in a real headless Chromium: a copy of the page alone in an empty folder
renders, draws every chart, logs no console error and fetches nothing."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from agentload.config import build_config
from agentload.runner import execute_run
from agentload.util import run_async

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = pytest.mark.skipif(
    CHROMIUM is None, reason="no chromium on PATH (make test installs Debian's chromium as root)"
)

# The closed network otherwise makes Chromium retry background services endlessly.
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def open_page(html_file: Path, tmp: Path) -> dict:
    """Load `html_file` in Chromium; returns what the page did."""
    from playwright.sync_api import sync_playwright

    errors: list[str] = []
    requests: list[str] = []
    with sync_playwright() as p:
        browser = p.chromium.launch_persistent_context(
            str(tmp / "profile"),
            executable_path=CHROMIUM,
            headless=True,
            args=CHROMIUM_ARGS,
            viewport={"width": 1400, "height": 900},
        )
        try:
            page = browser.new_page()
            page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.on("request", lambda r: requests.append(r.url))
            page.goto(html_file.as_uri())
            page.wait_for_function("document.body.dataset.charts !== undefined", timeout=60_000)
            res = page.evaluate(
                """() => ({
                  state: document.body.dataset.charts,
                  charts: document.querySelectorAll('div.chart').length,
                  drawn: [...document.querySelectorAll('div.chart')].filter(
                    el => el.querySelector('svg.main-svg') &&
                          el.querySelectorAll('g.trace').length > 0
                  ).length,
                  toc: document.querySelectorAll('nav a').length,
                  broken_imgs: [...document.images].filter(
                    i => !i.complete || !i.naturalWidth).length,
                  wrapped: [...document.querySelectorAll('td')].filter(
                    td => getComputedStyle(td).whiteSpace !== 'nowrap').length,
                  first_chart_top: (document.querySelector('div.chart') || {getBoundingClientRect:
                    () => ({top: 1e9})}).getBoundingClientRect().top + window.scrollY,
                  text: document.body.innerText,
                })"""
            )
        finally:
            browser.close()
    res["errors"] = errors
    res["requests"] = [u for u in requests if not u.startswith(("file:", "data:", "blob:"))]
    return res


def test_report_alone_renders_in_chromium(tmp_path: Path) -> None:
    out = tmp_path / "run"
    cfg = build_config(
        data={
            "out": str(out),
            "sim": {"profile": "tiny-cpu", "speedup": 50.0},
            "metrics": {"interval_s": 0.2},
            "workload": {"tasks": ["airline/000-003"], "trials": 2},
            "load": {"concurrency": 4},
            "slo": {"ttft_p90": 2.0},
        }
    )
    res = run_async(execute_run(cfg, progress="off", say=lambda _m: None, install_signals=False))
    assert res.exit_code == 0
    alone = tmp_path / "alone"
    alone.mkdir()
    shutil.copy(out / "report.html", alone / "report.html")

    page = open_page(alone / "report.html", tmp_path)

    assert page["errors"] == []
    assert page["requests"] == []  # nothing fetched: not even a favicon from a server
    assert page["state"] == "drawn"
    assert page["charts"] >= 5  # timeline, CDF, ITL histogram, prompt length, by turn, KV
    assert page["drawn"] == page["charts"]
    assert page["toc"] >= 8
    assert page["broken_imgs"] == 0
    assert page["wrapped"] == 0
    # The first chart starts on the first screen at 1400 x 900 (context and key figures
    # above it, tables below).
    assert page["first_chart_top"] < 900
    text = page["text"]
    assert "Run context" in text and "closed loop, concurrency 4" in text
    assert "profile tiny-cpu" in text and "http://127.0.0.1:" in text
