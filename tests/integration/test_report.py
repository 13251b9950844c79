"""report.md / report.html / charts and the console table from a known results directory."""

from __future__ import annotations

from pathlib import Path

import pytest
from rich.console import Console
from test_results_helpers import SLO, build_run

from agentload.report import summary_table, write_report
from agentload.results import summarize
from agentload.results.records import Summary

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def reported(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Summary, list[Path]]:
    out = build_run(tmp_path_factory.mktemp("rep") / "out")
    summary = summarize(out, slo=SLO)
    return out, summary, write_report(out, summary)


def test_files_written(reported: tuple[Path, Summary, list[Path]]) -> None:
    out, _, files = reported
    names = {p.relative_to(out).as_posix() for p in files}
    assert names == {
        "report.md",
        "report.html",
        "charts/latency_cdf.png",
        "charts/by_turn.png",
        "charts/server_timeline.png",
    }
    for p in files:
        assert p.stat().st_size > 0
        if p.suffix == ".png":
            assert p.read_bytes()[:8] == PNG_MAGIC


def test_key_numbers_in_markdown(reported: tuple[Path, Summary, list[Path]]) -> None:
    out, summary, _ = reported
    md = (out / "report.md").read_text()
    assert "# agentload report: r1" in md
    assert "| success rate | 50.0% |" in md
    assert "k=1: 50.0%, k=2: 33.3%" in md
    assert "| goodput (episodes / min) | 1.50 |" in md
    assert "| episodes / min | 4.50 |" in md
    # agent TTFT p50 over the 17 measured calls is 0.2 s; p90 and p99 from the summary
    assert summary.calls.by_role["agent"].ttft_s.stat("p50") == pytest.approx(0.2)
    assert "| agent TTFT p50 / p90 / p99 | 200 ms / " in md
    assert "| timeout_first_token | 1 |" in md
    assert "| ttft_p90 | 500 ms | 300 ms | yes |" in md
    assert "60.0%" in md  # server-side prefix-cache hit rate
    assert "1 episodes, 2 calls" in md  # warmup counted apart
    assert "![latency cdf](charts/latency_cdf.png)" in md
    assert "| 2 | 6 | 300 ms |" in md  # by-turn row: turn 2, 6 calls, TTFT p50


def test_html_mirrors_markdown(reported: tuple[Path, Summary, list[Path]]) -> None:
    out, _, _ = reported
    html = (out / "report.html").read_text()
    assert html.startswith("<!doctype html>")
    assert '<td>success rate</td><td class="n">50.0%</td>' in html
    # Charts are embedded (plotly specs), never links to files beside the page.
    assert "charts/" not in html and "<img" not in html
    assert html.count('<div class="chart"') >= 3


def test_console_table(reported: tuple[Path, Summary, list[Path]]) -> None:
    _, summary, _ = reported
    console = Console(record=True, width=160)
    console.print(summary_table(summary))
    text = console.export_text()
    assert "agent@default" in text and "user@default" in text
    assert "50.0%" in text and "goodput" in text


def test_report_without_episodes_or_server(tmp_path: Path) -> None:
    from agentload.client.record import CallRecord
    from agentload.results import Recorder

    with Recorder(tmp_path) as rec:
        for i in range(5):
            rec.record_call(
                CallRecord(
                    call_id=f"c{i}",
                    role="agent",
                    started_at=100.0 + i,
                    ttft_s=0.1 * (i + 1),
                    e2e_s=1.0,
                    total_s=1.0,
                )
            )
    summary = summarize(tmp_path)
    assert summary.episodes is None and summary.server is None
    assert summary.window.source == "calls"
    files = write_report(tmp_path, summary)
    # no turn indices, no server samples: no by-turn or timeline chart
    assert {p.name for p in files} == {"report.md", "report.html", "latency_cdf.png"}
    Console(record=True).print(summary_table(summary))


def test_report_and_compare_commands(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from agentload.cli import app

    a = build_run(tmp_path / "a")
    b = build_run(tmp_path / "b", server_samples=False)
    runner = CliRunner()
    res = runner.invoke(app, ["report", str(a), "--slo", "ttft_p90=400ms", "-q"])
    assert res.exit_code == 0, res.output
    assert (a / "summary.json").exists() and (a / "report.html").exists()
    md = (a / "report.md").read_text()
    assert "| ttft_p90 | 400 ms | 300 ms | yes |" in md
    res = runner.invoke(app, ["compare", str(a), str(b), "--json"])
    assert res.exit_code == 0, res.output
    import json

    out = json.loads(res.output)
    ttft = out["metrics"]["ttft_p50"]
    assert ttft["a"]["value"] == pytest.approx(0.2) and ttft["delta"] == pytest.approx(0.0)
    assert ttft["a"]["ci"][0] <= 0.2 <= ttft["a"]["ci"][1]
    assert out["metrics"]["success_rate"]["a"]["value"] == pytest.approx(0.5)
    res = runner.invoke(app, ["report", str(tmp_path / "missing")])
    assert res.exit_code == 2  # a usage error naming the path


def test_chunked_bootstrap_matches_stats_bootstrap_ci() -> None:
    import numpy as np

    from agentload import stats
    from agentload.report.compare import bootstrap

    v = np.random.default_rng(3).lognormal(size=500)
    ours = bootstrap(v, lambda m: m.mean(axis=1), n_resamples=2000, seed=0)
    assert ours is not None
    assert ours[0] == pytest.approx(stats.bootstrap_ci(v, np.mean, seed=0))
    # several statistics share the resamples; chunking keeps the interval sensible
    many = bootstrap(np.repeat(v, 20), lambda m: np.percentile(m, [50, 90], axis=1), seed=1)
    assert many is not None and len(many) == 2
    assert many[0][0] <= np.percentile(v, 50) <= many[0][1]
