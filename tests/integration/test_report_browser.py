"""report.html in a real headless Chromium: a copy of the page alone in an empty folder
renders, draws every chart, logs no console error and fetches nothing."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from agentload.config import build_config
from agentload.runner import execute_run
from agentload.sim import SimConfig
from agentload.util import run_async
from dcgm_stand_in import SimBesideExporter

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


def _launch(p: Any, tmp: Path) -> Any:
    """Debian's Chromium, headless, a 1,400 x 900 window, a fresh profile under `tmp`."""
    return p.chromium.launch_persistent_context(
        str(tmp / "profile"),
        executable_path=CHROMIUM,
        headless=True,
        args=CHROMIUM_ARGS,
        viewport={"width": 1400, "height": 900},
    )


def open_page(html_file: Path, tmp: Path) -> dict:
    """Load `html_file` in Chromium; returns what the page did."""
    from playwright.sync_api import sync_playwright

    errors: list[str] = []
    requests: list[str] = []
    with sync_playwright() as p:
        browser = _launch(p, tmp)
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


def _sweep_doc() -> dict:
    """sweep.json of a concurrency sweep with SLO and graded episodes: all six charts."""
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
    doc: dict = {
        "kind": "concurrency",
        "points_planned": [1, 2, 4, 8],
        "points": pts,
        "slo": {"ttft_p90": 0.2},
        "best_point": 2,
        "knee": 4.0,
        "status": "completed",
    }
    return doc


def test_sweep_page_draws_every_curve(tmp_path: Path) -> None:
    from agentload.report.sweep import write_sweep_report

    doc = _sweep_doc()
    write_sweep_report(tmp_path, doc)
    alone = tmp_path / "alone"
    alone.mkdir()
    shutil.copy(tmp_path / "sweep.html", alone / "sweep.html")
    page = open_page(alone / "sweep.html", tmp_path)
    assert page["errors"] == [] and page["requests"] == []
    assert page["state"] == "drawn"
    assert page["charts"] == 6 and page["drawn"] == 6  # TTFT, ITL, e2e, throughput, quality, SLO
    assert "knee at 4" in page["text"] and "Quality under load" in page["text"]


# ---- chart layout at 1,400 px ---------------------------------------------------------------

# Per chart: the svg's box and every text-bearing part plotly draws (axis titles, tick labels,
# the chart title, the legend), each with its client rectangle. Tick labels are grouped by axis
# (plotly names their <g> xtick / y2tick / ...), titles by axis (g-xtitle / g-y2title / ...).
_BOXES_JS = """() => [...document.querySelectorAll('div.chart')].map((el, i) => {
  const svg = el.querySelector('svg.main-svg');
  const box = r => ({x0: r.left, y0: r.top, x1: r.right, y1: r.bottom});
  const parts = [];
  const add = (name, node) => {
    const r = node.getBoundingClientRect();
    if (r.width > 0 && r.height > 0 && (node.textContent || '').trim() !== '')
      parts.push({name, ...box(r)});
  };
  for (const g of el.querySelectorAll('g[class^="g-"][class$="title"]'))
    add(g.getAttribute('class'), g);  // g-xtitle, g-y2title, g-gtitle ...
  for (const t of el.querySelectorAll('g[class$="tick"] > text'))
    add(t.parentNode.getAttribute('class') + ' ' + t.textContent, t);
  for (const g of el.querySelectorAll('g.legend')) add('legend', g);
  const title = (el.querySelector('.gtitle') || {}).textContent || '';
  return {i, title, svg: box(svg.getBoundingClientRect()), parts};
})"""

# Sub-pixel rounding and glyph side bearings: two boxes may share a pixel without a glyph of
# one touching the other.
_TOL = 1.0


def _overlap(a: dict, b: dict) -> float:
    w = min(a["x1"], b["x1"]) - max(a["x0"], b["x0"])
    h = min(a["y1"], b["y1"]) - max(a["y0"], b["y0"])
    return min(w, h)


def layout_faults(charts: list[dict]) -> list[str]:
    """Every pair of a chart's labelled parts that overlap, and every part outside its svg."""
    faults = []
    for c in charts:
        where = f"chart {c['i']} ({c['title']!r})"
        s, parts = c["svg"], c["parts"]
        for p in parts:
            out = max(s["x0"] - p["x0"], s["y0"] - p["y0"], p["x1"] - s["x1"], p["y1"] - s["y1"])
            if out > _TOL:
                faults.append(f"{where}: {p['name']} lies {out:.0f} px outside the chart")
        for j, a in enumerate(parts):
            for b in parts[j + 1 :]:
                if _overlap(a, b) > _TOL:
                    faults.append(f"{where}: {a['name']} overlaps {b['name']}")
    return faults


def chart_layout(pages: dict[str, Path], tmp: Path, shots: Path) -> dict[str, list[dict]]:
    """Open each page at 1,400 px in one browser; screenshot each chart into `shots` (as
    NAME-NN.png); returns each page's charts with their boxes (see _BOXES_JS)."""
    from playwright.sync_api import sync_playwright

    shots.mkdir(parents=True, exist_ok=True)
    found = {}
    with sync_playwright() as p:
        browser = _launch(p, tmp)
        try:
            page = browser.new_page()
            for name, html_file in pages.items():
                page.goto(html_file.as_uri())
                page.wait_for_function("document.body.dataset.charts !== undefined", timeout=60_000)
                assert page.evaluate("document.body.dataset.charts") == "drawn", name
                charts = page.evaluate(_BOXES_JS)
                for c, el in zip(charts, page.query_selector_all("div.chart"), strict=True):
                    el.screenshot(path=str(shots / f"{name}-{c['i']:02d}.png"))
                found[name] = charts
        finally:
            browser.close()
    return found


def _full_run(out: Path) -> None:
    """A run whose report has every chart: GPU telemetry and failed calls included."""
    # Faults injected, so the report has its failed-calls chart.
    sim = SimConfig(port=0, profile="tiny-cpu", speedup=25, fault_rate=0.03,
                    fault_kinds=["http_500", "reset"])  # fmt: skip
    with SimBesideExporter(sim) as srv:
        cfg = build_config(
            data={
                "out": str(out),
                "endpoints": {
                    "agent": {
                        "base_url": srv.sim.base_url,
                        "model": "agentload-sim",
                        "gpu_metrics_urls": [srv.url],
                    }
                },
                "metrics": {"interval_s": 0.2},
                "workload": {"tasks": ["airline/000-003"], "trials": 2},
                # A failed run's report leaves out the throughput chart.
                "load": {"concurrency": 4, "max_infra_error_share": 1.0},
                "slo": {"ttft_p90": 2.0},
            }
        )
        res = run_async(
            execute_run(cfg, progress="off", say=lambda _m: None, install_signals=False)
        )
    assert res.exit_code == 0


def test_no_chart_label_overlaps_or_is_clipped_at_1400_px(tmp_path: Path) -> None:
    """Run report, sweep page and N-run compare page: in every chart, axis titles, tick
    labels, the chart title and the legend neither overlap each other nor leave the chart."""
    from agentload.report.multi import Series, load_series, write_compare
    from agentload.report.sweep import write_sweep_report

    run = tmp_path / "run"
    _full_run(run)
    doc = _sweep_doc()
    write_sweep_report(tmp_path, doc)
    rate = {
        **doc,
        "kind": "rate",
        "points": [{**r, "rate": r["concurrency"] / 4} for r in doc["points"]],
    }
    series = [
        load_series(run, "single run"),
        Series("sweep A", tmp_path / "a", True, "concurrency", _rows(doc, "concurrency"), {}),
        Series("sweep B", tmp_path / "b", True, "concurrency", _rows(doc, "concurrency", 1.7), {}),
        Series("rate sweep", tmp_path / "c", True, "rate", _rows(rate, "rate"), {}),
        # Long names: the legend wraps to more rows.
        *(
            Series(
                f"vLLM 0.11 TP{tp} prefix caching off",
                tmp_path / f"tp{tp}",
                True,
                "concurrency",
                _rows(doc, "concurrency", 1 + tp / 3),
                {},
            )
            for tp in (1, 2, 4)
        ),
    ]
    write_compare(series, tmp_path / "compare")
    shots = tmp_path / "shots"
    pages = {
        "report": run / "report.html",
        "sweep": tmp_path / "sweep.html",
        "compare": tmp_path / "compare" / "compare.html",
    }
    found = chart_layout(pages, tmp_path, shots)
    faults = [f"{name}: {f}" for name, charts in found.items() for f in layout_faults(charts)]
    # Every chart kind is on the pages: the run report's 8 (timeline, CDF, ITL, prompt,
    # by turn, failed calls, KV cache, GPU), sweep's 6 and compare's 4 per load kind.
    counts = {name: len(charts) for name, charts in found.items()}
    assert counts == {"report": 8, "sweep": 6, "compare": 8}, counts
    assert faults == [], f"screenshots in {shots}:\n" + "\n".join(faults)


def _rows(doc: dict, kind: str, scale: float = 1.0) -> list[dict]:
    """A sweep's point rows as compare reads them, latency scaled by `scale`."""
    out = []
    for r in doc["points"]:
        row = {**r, "dir": f"{kind}-{r[kind]:g}"}
        for k in ("ttft_p50", "ttft_p90", "e2e_p50", "e2e_p90"):
            row[k] = r[k] * scale
        out.append(row)
    return out


def test_a_time_axis_that_starts_before_the_window_clears_the_y_axis_zero(tmp_path: Path) -> None:
    # Samples before the window put the time axis's first label (-0.3) at the corner where
    # the lowest panel's "0" stands; which runs do so depends on timing, so it is built here.
    from types import SimpleNamespace

    from agentload.report import plots
    from agentload.report.document import Document, to_html

    t = [-0.3 + 0.05 * i for i in range(18)]
    gpu: dict[str, list[float]] = {"gpus": [2.0] * len(t), "t": t}
    for i in range(2):
        gpu[f"gpu{i}_util"] = [87.0 - 20 * i] * len(t)
        gpu[f"gpu{i}_fb_used_mib"] = [70_000.0] * len(t)
        gpu[f"gpu{i}_power_w"] = [410.0 - 110 * i] * len(t)
        gpu[f"gpu{i}_sm_clock_mhz"] = [1_980.0 - 230 * i] * len(t)
    doc = Document("corner")
    doc.chart(plots.gpu_timeline(SimpleNamespace(gpu={"dcgm": gpu})))
    (tmp_path / "gpu.html").write_text(to_html(doc))
    found = chart_layout({"gpu": tmp_path / "gpu.html"}, tmp_path, tmp_path / "shots")
    labels = [p["name"] for p in found["gpu"][0]["parts"]]
    assert "xtick −0.3" in labels and "y4tick 0" in labels
    assert layout_faults(found["gpu"]) == []
