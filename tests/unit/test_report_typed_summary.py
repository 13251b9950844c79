"""The report reads the summary's model: a summary given as its model (`Summary`) and as the
dict it dumps to give the same report.md, report.html and console table."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console
from test_results_helpers import SLO, build_run

from agentload.integrations.mlflow import run_metrics
from agentload.report import summary_table, write_report
from agentload.report.health import client_cpu_share
from agentload.report.points import summary_row
from agentload.results import summarize
from agentload.results.records import ClientBlock, Summary, as_summary

CLIENT = {
    "stop_reason": "completed",
    "elapsed_s": 80.0,
    "cpu_s": 72.0,  # 90 % of a core: above the warning's 80 %
    "episodes_cancelled": 2,
    "event_loop_lag_s": {"count": 400, "mean": 0.01, "max": 0.2, "p50": 0.005, "p99": 0.12},
    "workers": [{"worker": "w0", "cpu_share": 0.95, "saturated": True}],
}


def _as_dict(summary: Summary | Mapping[str, Any]) -> dict[str, Any]:
    return summary.dump() if isinstance(summary, Summary) else dict(summary)


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    out = build_run(tmp_path_factory.mktemp("typed") / "out")
    data = _as_dict(summarize(out, slo=SLO))
    data["client"] = CLIENT
    return out, data


def _report(out: Path, summary: Summary | Mapping[str, Any]) -> tuple[str, str]:
    write_report(out, summary)
    return (out / "report.md").read_text(), (out / "report.html").read_text()


def test_model_and_dict_give_the_same_report(run: tuple[Path, dict[str, Any]]) -> None:
    out, data = run
    typed = as_summary(data)
    assert isinstance(typed, Summary)
    md_dict, html_dict = _report(out, data)
    md_model, html_model = _report(out, typed)
    assert md_model == md_dict
    assert html_model == html_dict
    # Every section read its figures off the model: episodes, SLO, errors, turns, client.
    assert "| success rate | 50.0% |" in md_model
    assert "| goodput (episodes / min) | 1.50 |" in md_model
    assert "| timeout_first_token | 1 |" in md_model
    assert "| 2 | 6 | 300 ms |" in md_model  # by-turn row: turn 2, 6 calls, TTFT p50
    assert "| episodes cancelled at stop | 2 |" in md_model
    assert "| event-loop lag | 400 | 5.0 ms | " in md_model
    assert "Client CPU: 90% of one core over the run." in md_model
    assert "event loop lagged (p99 120 ms, max 200 ms" in md_model
    assert "worker process w0 (95% of a core) saturated" in md_model


def test_model_and_dict_give_the_same_figures(run: tuple[Path, dict[str, Any]]) -> None:
    _, data = run
    typed = as_summary(data)

    def text(summary: Summary | Mapping[str, Any]) -> str:
        console = Console(record=True, width=200)
        console.print(summary_table(summary))
        return console.export_text()

    assert text(typed) == text(data)
    assert "agent@default" in text(typed)
    assert summary_row(4, "concurrency", "c4", "completed", typed) == summary_row(
        4, "concurrency", "c4", "completed", data
    )
    assert run_metrics(typed) == run_metrics(data)
    assert run_metrics(typed)["goodput_per_min"] == pytest.approx(1.5)


def test_client_cpu_share() -> None:
    assert client_cpu_share(ClientBlock.model_validate(CLIENT)) == pytest.approx(0.9)
    assert client_cpu_share(ClientBlock(cpu_s=1.0)) is None  # no elapsed time: no share
    assert client_cpu_share(None) is None
