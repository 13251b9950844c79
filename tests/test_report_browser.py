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


def test_sweep_page_draws_every_curve(tmp_path: Path) -> None:
    from agentload.report.sweep import write_sweep_report

    pts = []
    for c, thr, succ in ((1, 100.0, 1.0), (2, 190.0, 0.9), (4, 300.0, 0.75), (8, 320.0, 0.5)):
        pts.append(
            {
                "concurrency": c,
                "status": "completed",
                "episodes": 8,
                "output_tokens_per_s": thr,
                "episodes_per_min": thr / 10,
                "ttft_p50": 0.05 * c,
                "ttft_p90": 0.08 * c,
                "ttft_p99": 0.1 * c,
                "itl_p50": 0.01,
                "itl_p90": 0.012,
                "itl_p99": 0.02 * c,
                "e2e_p50": 0.5 * c,
                "e2e_p90": 0.7 * c,
                "e2e_p99": 0.9 * c,
                "success_rate": succ,
                "pass_hat_k": {"1": succ, "2": succ**2},
                "slo_met": c <= 2,
                "slo_call_attainment": 1.0 - 0.1 * c,
                "slo_session_attainment": 1.0 - 0.12 * c,
                "goodput_per_min": max(0.0, 6 - c),
            }
        )
    doc = {
        "kind": "concurrency",
        "points_planned": [1, 2, 4, 8],
        "points": pts,
        "slo": {"ttft_p90": 0.2},
        "best_point": 2,
        "knee": 4.0,
        "status": "completed",
    }
    write_sweep_report(tmp_path, doc)
    alone = tmp_path / "alone"
    alone.mkdir()
    shutil.copy(tmp_path / "sweep.html", alone / "sweep.html")
    page = open_page(alone / "sweep.html", tmp_path)
    assert page["errors"] == [] and page["requests"] == []
    assert page["state"] == "drawn"
    assert page["charts"] == 6 and page["drawn"] == 6  # TTFT, ITL, e2e, throughput, quality, SLO
    assert "knee at 4" in page["text"] and "Quality under load" in page["text"]
