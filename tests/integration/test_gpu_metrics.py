"""GPU telemetry (--gpu-metrics) from a DCGM exporter stand-in on 127.0.0.1.

The stand-in serves tests/data/dcgm_exporter_2gpu.prom, a page as NVIDIA's dcgm-exporter
writes it for two H100s, with the values the tests read changed on every scrape: even scrapes
are the recorded values, odd ones a quieter moment, and the energy counter (mJ since boot)
grows by 500 J (GPU 0) and 250 J (GPU 1) per scrape.
"""

from __future__ import annotations

import asyncio
import json
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agentload.servermetrics.parse import combine_samples, parse_metrics
from agentload.servermetrics.scraper import MetricsScraper
from agentload.servermetrics.summary import summarize_gpu, summarize_server
from agentload.sim import SimConfig
from dcgm_stand_in import PAGE, SimBesideExporter

AGENTLOAD = str(Path(sys.executable).parent / "agentload")

# metric -> (GPU 0, GPU 1) on odd scrapes; even scrapes serve the recorded values.
QUIET = {
    "DCGM_FI_DEV_GPU_UTIL": (41, 20),
    "DCGM_FI_DEV_FB_USED": (70000, 69000),
    "DCGM_FI_DEV_POWER_USAGE": (300.0, 250.0),
    "DCGM_FI_DEV_SM_CLOCK": (1410, 1410),
}
ENERGY0 = (1873459211003, 1790233874512)  # the recorded counters (mJ)
ENERGY_STEP = (500_000, 250_000)  # mJ per scrape


_LINE = re.compile(r'^(DCGM_\w+)\{gpu="(\d)".*\} (\S+)$')


def _served(k: int) -> str:
    """The exporter's page at its k-th scrape."""
    lines = []
    for line in PAGE.splitlines():
        m = _LINE.match(line)
        if m:
            name, gpu, head = m.group(1), int(m.group(2)), line[: m.start(3)]
            if name == "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION":
                line = f"{head}{ENERGY0[gpu] + k * ENERGY_STEP[gpu]}"
            elif k % 2 and name in QUIET:
                line = f"{head}{QUIET[name][gpu]}"
        lines.append(line)
    return "\n".join(lines) + "\n"


@pytest.fixture
def exporter() -> Iterator[SimBesideExporter]:
    with SimBesideExporter(SimConfig(port=0, profile="tiny-cpu", speedup=40), _served) as ex:
        yield ex


def test_the_recorded_page_parses_to_its_values() -> None:
    s = parse_metrics(PAGE)
    assert s["engine"] == "dcgm" and s["gpus"] == 2
    assert s["gpu_util"] == (87 + 64) / 2
    assert s["gpu_fb_used_mib"] == 75064 * 2
    assert s["gpu_fb_free_mib"] == 6029 * 2
    assert s["gpu_power_w"] == pytest.approx(412.337 + 298.114)
    assert s["gpu_sm_clock_mhz"] == (1980 + 1755) / 2
    assert s["gpu_energy_mj"] == sum(ENERGY0)
    assert (s["gpu0_util"], s["gpu1_util"]) == (87, 64)
    assert (s["gpu0_energy_mj"], s["gpu1_sm_clock_mhz"]) == (ENERGY0[0], 1755)
    # Two hosts: one sample with all four GPUs, numbered in URL order.
    both = combine_samples([s, parse_metrics(_served(1))])
    assert both["gpus"] == 4 and both["gpu2_util"] == 41 and both["gpu3_power_w"] == 250.0
    assert both["gpu_util"] == (87 + 64 + 41 + 20) / 4


def test_summary_figures_from_exact_samples() -> None:
    """Energy from the counter's delta; without the counter, power integrated over time."""
    base = {"engine": "dcgm", "endpoint": "agent", "url": "u", "ok": True, "gpus": 1}
    samples = [
        {**base, "t": 100.0, "gpu_util": 10.0, "gpu0_util": 10.0, "gpu_power_w": 100.0,
         "gpu0_power_w": 100.0, "gpu_energy_mj": 1_000_000.0, "gpu0_energy_mj": 1_000_000.0,
         "gpu_fb_used_mib": 1024.0, "gpu0_fb_used_mib": 1024.0},
        {**base, "t": 102.0, "gpu_util": 50.0, "gpu0_util": 50.0, "gpu_power_w": 300.0,
         "gpu0_power_w": 300.0, "gpu_energy_mj": 1_600_000.0, "gpu0_energy_mj": 1_600_000.0,
         "gpu_fb_used_mib": 4096.0, "gpu0_fb_used_mib": 4096.0},
        {**base, "t": 104.0, "gpu_util": 30.0, "gpu0_util": 30.0, "gpu_power_w": 200.0,
         "gpu0_power_w": 200.0, "gpu_energy_mj": 2_600_000.0, "gpu0_energy_mj": 2_600_000.0,
         "gpu_fb_used_mib": 2048.0, "gpu0_fb_used_mib": 2048.0},
    ]  # fmt: skip
    g = summarize_gpu(samples, output_tokens=400)
    assert g is not None
    assert (g["util_mean"], g["util_max"]) == (30.0, 50.0)
    assert (g["fb_used_max_mib"], g["power_mean_w"]) == (4096.0, 200.0)
    assert (
        g["energy_j"] == 1600.0
        and g["endpoints"]["agent"]["energy_source"] == "energy counter delta"
    )
    assert g["j_per_output_token"] == 4.0
    assert g["endpoints"]["agent"]["per_gpu"][0]["energy_j"] == 1600.0
    no_counter = [{k: v for k, v in s.items() if not k.endswith("energy_mj")} for s in samples]
    g2 = summarize_gpu(no_counter, output_tokens=400)
    assert g2 is not None
    # (100+300)/2*2 + (300+200)/2*2 = 400 + 500 J
    assert g2["energy_j"] == 900.0 and g2["j_per_output_token"] == 2.25
    assert g2["endpoints"]["agent"]["energy_source"] == "power integrated over the samples"
    # The engine's server block leaves GPU samples out.
    assert summarize_server(samples)["endpoints"] == {}


async def test_scraper_tags_gpu_samples(exporter: SimBesideExporter) -> None:
    got: list[dict[str, Any]] = []
    scraper = MetricsScraper(
        [exporter.url], got.append, interval_s=0.05, endpoint="agent", gpu=True
    )
    async with scraper:
        await asyncio.sleep(0.3)
    assert len(got) >= 3 and all(s["ok"] and s["engine"] == "dcgm" for s in got)
    assert [s["gpu0_util"] for s in got[:3]] == [87, 41, 87]
    assert [s["gpu_energy_mj"] - got[0]["gpu_energy_mj"] for s in got[:3]] == [0, 750e3, 1500e3]


async def test_a_failing_or_wrong_gpu_url_is_a_failed_gpu_scrape(
    exporter: SimBesideExporter,
) -> None:
    """Failed GPU scrapes stay GPU samples (never counted against the engine's endpoint), and
    an engine's page given as --gpu-metrics is refused, not mixed into the engine's figures."""
    got: list[dict[str, Any]] = []
    engine_page = exporter.sim.base_url.removesuffix("/v1") + "/metrics"
    for url in ("http://127.0.0.1:9/metrics", engine_page):
        scraper = MetricsScraper(url, got.append, endpoint="agent", gpu=True, timeout_s=2)
        await scraper.scrape_once()
        await scraper.stop(final_sample=False)
    assert [s["ok"] for s in got] == [False, False]
    assert all(s["engine"] == "dcgm" for s in got)
    assert "not a DCGM exporter's page" in got[1]["error"]
    assert summarize_server(got)["endpoints"] == {}
    g = summarize_gpu(got, output_tokens=100)
    assert g is not None and g["endpoints"]["agent"]["failed_scrapes"] == 2
    assert g["energy_j"] is None and g["j_per_output_token"] is None and g["gpus"] == 0
    from agentload.report.build import build_document
    from agentload.report.document import to_markdown

    text = to_markdown(build_document({"gpu": g}))
    assert "### GPU telemetry" in text and "0 GPUs" in text


def _span(samples: list[dict[str, Any]], start: float, end: float) -> list[dict[str, Any]]:
    ts = [s["t"] for s in samples]
    lo = max([i for i, t in enumerate(ts) if t <= start], default=0)
    hi = min([i for i, t in enumerate(ts) if t >= end], default=len(ts) - 1)
    return samples[lo : hi + 1]


def test_run_with_gpu_metrics_on_the_simulator(tmp_path: Path, exporter: SimBesideExporter) -> None:
    out = tmp_path / "run"
    r = subprocess.run(
        [AGENTLOAD, "run", "--base-url", exporter.sim.base_url, "--model", "agentload-sim",
         "--tasks", "airline/000-003", "--concurrency", "4",
         "--metrics-interval", "0.2", "--gpu-metrics", exporter.url,
         "--out", str(out), "--quiet"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr[-2000:]
    rows = [json.loads(x) for x in (out / "server_metrics.jsonl").read_text().splitlines()]
    gpu_rows = sorted((s for s in rows if s.get("engine") == "dcgm"), key=lambda s: s["t"])
    engine_rows = [s for s in rows if s.get("engine") != "dcgm"]
    assert len(gpu_rows) >= 3 and engine_rows, "both scrapers ran beside each other"
    assert all(s["url"] == exporter.url and s["gpus"] == 2 for s in gpu_rows)
    assert {s["gpu0_util"] for s in gpu_rows} == {87, 41}

    summary = json.loads((out / "summary.json").read_text())
    gpu = summary["gpu"]
    w = summary["window"]
    span = _span(gpu_rows, w["start"], w["end"])
    inside = [s for s in gpu_rows if w["start"] <= s["t"] <= w["end"]] or gpu_rows
    scrapes = round((span[-1]["gpu_energy_mj"] - span[0]["gpu_energy_mj"]) / 750e3)
    assert scrapes >= 1 and gpu["energy_j"] == pytest.approx(750.0 * scrapes)
    tokens = summary["calls"]["all"]["tokens"]["completion"]
    assert tokens > 0 and gpu["output_tokens"] == tokens
    assert gpu["j_per_output_token"] == pytest.approx(750.0 * scrapes / tokens)
    # Which of the two moments fall inside a short window depends on the machine's pace: the
    # figures are those of the samples inside it, and only ever the values served.
    assert gpu["util_max"] == max(s["gpu_util"] for s in inside)
    assert gpu["util_max"] in ((87 + 64) / 2, (41 + 20) / 2)
    assert gpu["fb_used_max_mib"] == max(s["gpu_fb_used_mib"] for s in inside)
    assert gpu["fb_used_max_mib"] in (75064 * 2, 70000 + 69000)
    assert gpu["util_mean"] == pytest.approx(sum(s["gpu_util"] for s in inside) / len(inside))
    assert gpu["power_mean_w"] == pytest.approx(sum(s["gpu_power_w"] for s in inside) / len(inside))
    per = gpu["endpoints"]["agent"]["per_gpu"]
    assert [p["util_max"] for p in per] == [max(s[f"gpu{i}_util"] for s in inside) for i in (0, 1)]
    assert per[0]["energy_j"] == pytest.approx(500.0 * scrapes)
    # The engine's own figures are unaffected by the GPU samples beside them.
    assert summary["server"]["endpoints"]["agent"]["engine"] != "dcgm"

    report = (out / "report.md").read_text()
    section = report[report.index("## Server-side metrics") :]
    assert "### GPU telemetry" in section and "J/token" in section
    assert "charts/gpu_timeline.png" in section and (out / "charts/gpu_timeline.png").stat().st_size
    html = (out / "report.html").read_text()
    assert "GPU telemetry (DCGM exporter)" in html and "SM clock (MHz)" in html


def test_a_bad_gpu_metrics_url_is_one_line_exit_2(tmp_path: Path) -> None:
    r = subprocess.run(
        [AGENTLOAD, "run", "--base-url", "http://127.0.0.1:9/v1", "--model", "m",
         "--tasks", "airline/000", "--gpu-metrics", "gpu-node:9400",
         "--out", str(tmp_path / "x"), "--quiet"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert r.returncode == 2
    assert "gpu_metrics_urls" in r.stderr and "gpu-node:9400" in r.stderr


CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.mark.skipif(CHROMIUM is None, reason="no chromium on PATH (make test installs it)")
def test_the_gpu_chart_draws_at_1400_px_without_overlapping_titles(
    tmp_path: Path, exporter: SimBesideExporter
) -> None:
    from playwright.sync_api import sync_playwright

    out = tmp_path / "run"
    r = subprocess.run(
        [AGENTLOAD, "run", "--base-url", exporter.sim.base_url, "--model", "agentload-sim",
         "--tasks", "airline/000-001", "--metrics-interval", "0.2",
         "--gpu-metrics", exporter.url, "--out", str(out), "--quiet"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr[-2000:]
    with sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=CHROMIUM, headless=True, args=["--no-sandbox", "--disable-gpu"]
        )
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 900})
            page.goto((out / "report.html").as_uri())
            page.wait_for_function("document.body.dataset.charts !== undefined", timeout=60_000)
            got = page.evaluate(
                """() => {
                  const el = [...document.querySelectorAll('div.chart')].find(
                    c => c.textContent.includes('GPU telemetry (DCGM exporter)'));
                  if (!el) return null;
                  const boxes = [...el.querySelectorAll('g[class$="title"] text')]
                    .filter(t => /^g-(x|y\\d?)title$/.test(t.parentNode.getAttribute('class')))
                    .map(t => { const b = t.getBoundingClientRect();
                                return [t.textContent, b.left, b.top, b.right, b.bottom]; });
                  return {traces: el.querySelectorAll('g.trace').length, boxes};
                }"""
            )
        finally:
            browser.close()
    assert got is not None, "no GPU chart in report.html"
    assert got["traces"] == 8  # 2 GPUs x 4 panels
    titles = [b[0] for b in got["boxes"]]
    assert {"utilisation %", "memory used (GiB)", "power (W)", "SM clock (MHz)"} <= set(titles)
    for i, a in enumerate(got["boxes"]):
        for b in got["boxes"][i + 1 :]:
            apart = a[3] <= b[1] or b[3] <= a[1] or a[4] <= b[2] or b[4] <= a[2]
            assert apart, f"axis titles overlap: {a} {b}"
