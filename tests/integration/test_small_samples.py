"""Percentiles a sample is too small to carry are marked, in summary.json and in every table
that shows them (a sweep point of 6 episodes reports no bare p99)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from rich.console import Console

from agentload.report.columns import THIN_MARK, THIN_NOTE
from agentload.report.table import summary_table
from agentload.results.summary import summarize
from agentload.stats import describe, min_samples, thin_percentiles
from agentload.sweep import summary_row, sweep_table
from agentload.util import run_async


def test_a_percentile_needs_one_over_one_minus_p_values() -> None:
    assert [min_samples(p) for p in (50, 90, 95, 99, 99.9)] == [2, 10, 20, 100, 1000]
    assert thin_percentiles(6) == ["p90", "p95", "p99", "p99.9"]
    assert thin_percentiles(100) == ["p99.9"]
    assert thin_percentiles(0) == []
    # describe() says so beside its figures; a sample large enough has no mark.
    assert describe(np.arange(6.0))["thin"] == ["p90", "p95", "p99", "p99.9"]
    assert "thin" not in describe(np.arange(1000.0))


@pytest.fixture(scope="module")
def small_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from agentload.config import build_config
    from agentload.runner import execute_run

    out = tmp_path_factory.mktemp("small") / "run"
    cfg = build_config(
        data={
            "out": str(out),
            "workload": {"tasks": ["airline/000-002"]},
            "load": {"concurrency": 2},
            "sim": {"profile": "instant"},
            "report": False,
        }
    )
    outcome = run_async(execute_run(cfg, progress="off", say=lambda _m: None))
    assert outcome.exit_code == 0
    return out


def test_a_small_run_marks_its_tail_percentiles(small_run: Path) -> None:
    s = summarize(small_run).dump()
    calls = s["calls"]["by_role"]["agent"]
    n = calls["ttft_s"]["count"]
    assert 0 < n < 100
    assert "p99" in calls["ttft_s"]["thin"] and "p50" not in calls["ttft_s"]["thin"]
    assert calls["ttft_s"]["thin"] == thin_percentiles(n)

    console = Console(width=220, record=True)
    console.print(summary_table(s))
    text = console.export_text()
    assert THIN_NOTE[:40] in text
    # The TTFT p99 cell carries the mark; the p50 cell does not.
    assert any(c.endswith(THIN_MARK) for c in text.split()), text

    row = summary_row(2, "concurrency", "c0002", "completed", s)
    assert "ttft_p99" in row["thin"] and "ttft_p50" not in row["thin"]
    table = Console(width=220, record=True)
    table.print(sweep_table({"kind": "concurrency", "points": [row]}))
    sweep_text = table.export_text()
    assert THIN_NOTE[:40] in sweep_text
    cells = [c for c in sweep_text.split() if c.endswith(THIN_MARK)]
    assert cells, sweep_text
