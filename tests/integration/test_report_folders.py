"""`agentload report / export / compare` on the folders they are given: a hand-made or older
sweep, a folder that is not a results folder, and what each reads (once) to do its work."""

from __future__ import annotations

import csv
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from typer.testing import CliRunner

from agentload.cli import app
from agentload.client.record import CallRecord
from agentload.report import plots
from agentload.results import Recorder, records
from agentload.results.records import ClientBlock
from agentload.results.summary import summarize

NOT_RESULTS = "no calls.jsonl or sessions.jsonl (not a results directory?)"


def _calls(out: Path, n: int = 3, ttft: float = 0.1) -> Path:
    """A calls-only results folder: `n` agent calls, turn i starting i seconds in."""
    with Recorder(out) as rec:
        for i in range(n):
            rec.record_call(
                CallRecord(
                    call_id=f"c{i}",
                    session_id=None,
                    role="agent",
                    turn=i % 2,
                    started_at=1_700_000_000.0 + i,
                    start_ns=10**9 * (i + 1),
                    end_ns=10**9 * (i + 1) + 5 * 10**8,
                    total_s=0.5,
                    ttft_s=ttft * (i + 1),
                    e2e_s=0.5,
                    prompt_tokens=100,
                    completion_tokens=10,
                )
            )
    return out


def _sweep(root: Path) -> Path:
    """A sweep folder as an older agentload or a user's script writes it: points only."""
    points = []
    for c in (1, 2):
        _calls(root / f"c{c:04d}", ttft=0.1 * c)
        points.append({"concurrency": c, "dir": f"c{c:04d}", "status": "completed"})
    (root / "sweep.json").write_bytes(orjson.dumps({"kind": "concurrency", "points": points}))
    return root


@pytest.fixture
def sweep_reads(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """The names of the sweep.json files read while the test runs."""
    seen: list[str] = []
    read_bytes = Path.read_bytes

    def spy(self: Path) -> bytes:
        if self.name == "sweep.json":
            seen.append(str(self))
        return read_bytes(self)

    monkeypatch.setattr(Path, "read_bytes", spy)
    yield seen


def test_report_derives_a_missing_points_planned(tmp_path: Path, sweep_reads: list[str]) -> None:
    root = _sweep(tmp_path / "sw")
    r = CliRunner().invoke(app, ["report", str(root), "-q"])
    assert r.exit_code == 0, r.output
    assert sweep_reads == [str(root / "sweep.json")]  # read once, passed down
    doc = orjson.loads((root / "sweep.json").read_bytes())
    assert doc["points_planned"] == [1, 2]
    assert [p["concurrency"] for p in doc["points"]] == [1, 2]
    assert doc["points"][1]["ttft_p50"] == pytest.approx(0.4)  # c0002: 0.2, 0.4, 0.6 s
    assert "2 of 2 planned" in (root / "sweep.md").read_text()


def test_report_on_a_broken_sweep_json_is_one_line(tmp_path: Path) -> None:
    root = _sweep(tmp_path / "sw")
    doc = orjson.loads((root / "sweep.json").read_bytes())
    cases = [
        ({**doc, "kind": None}, "sweep.json: kind: expected one of concurrency, rate, got None"),
        ({**doc, "points": {}}, "sweep.json: points: expected a list, got dict"),
        ({**doc, "points": [{"dir": "c0001"}]}, "sweep.json: points[0].concurrency: expected"),
        ({**doc, "points_planned": "1,2"}, "sweep.json: points_planned: expected a list"),
    ]
    for bad, line in cases:
        (root / "sweep.json").write_bytes(orjson.dumps(bad))
        r = CliRunner().invoke(app, ["report", str(root), "-q"])
        assert r.exit_code == 2, r.output
        lines = r.output.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith(f"error: {root}/{line}"), r.output


def test_resume_still_needs_the_plan(tmp_path: Path) -> None:
    from agentload.config import ConfigError
    from agentload.sweep import _resume_doc

    root = _sweep(tmp_path / "sw")
    with pytest.raises(ConfigError, match=r"sweep.json: points_planned: missing"):
        _resume_doc(root)


def test_not_a_results_folder_is_the_same_line_everywhere(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    run = _calls(tmp_path / "run")
    line = f"error: {empty}: {NOT_RESULTS}"
    for args in (["report", str(empty)], ["export", str(empty)], ["compare", str(run), str(empty)]):
        r = CliRunner().invoke(app, args)
        assert r.exit_code == 2, (args, r.output)
        assert r.output.strip() == line, (args, r.output)
    missing = tmp_path / "missing"
    r = CliRunner().invoke(app, ["report", str(missing)])
    assert r.exit_code == 2 and r.output.strip() == f"error: {missing}: not a directory"


def test_a_sweep_point_without_records_is_left_out(tmp_path: Path) -> None:
    root = _sweep(tmp_path / "sw")
    for f in (root / "c0002").iterdir():
        if f.is_file():
            f.unlink()
    r = CliRunner().invoke(app, ["report", str(root), "-q"])
    assert r.exit_code == 0, r.output
    doc = orjson.loads((root / "sweep.json").read_bytes())
    assert [p["concurrency"] for p in doc["points"]] == [1]
    assert doc["points_planned"] == [1, 2]


def test_report_slo_is_the_one_the_sweep_page_states(tmp_path: Path) -> None:
    root = _sweep(tmp_path / "sw")
    r = CliRunner().invoke(app, ["report", str(root), "-q", "--slo", "ttft_p90=350ms"])
    assert r.exit_code == 0, r.output
    doc = orjson.loads((root / "sweep.json").read_bytes())
    assert doc["slo"] == {"ttft_p90": pytest.approx(0.35)}
    assert [p["slo_met"] for p in doc["points"]] == [True, False]  # p90 0.28 s, then 0.56 s
    assert doc["best_point"] == 1
    assert "ttft_p90 ≤ 350" in (root / "sweep.md").read_text()


@pytest.fixture
def summary_parses(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """One entry per lenient parse of a dict into the Summary model."""
    seen: list[int] = []
    parse = records.parse_lenient

    def spy(cls: Any, data: Any) -> Any:
        if cls is records.Summary:
            seen.append(1)
        return parse(cls, data)

    monkeypatch.setattr(records, "parse_lenient", spy)
    return seen


def test_the_report_parses_the_summary_once(tmp_path: Path, summary_parses: list[int]) -> None:
    from agentload.report import summary_table, write_report

    out = _calls(tmp_path / "run")
    summary = summarize(out).model_copy(update={"client": ClientBlock(cpu_s=9.0, elapsed_s=10.0)})
    # The model as summarize built it is read as it is; summary.json's dict is parsed once.
    for given, parses in ((summary, 0), (summary.dump(), 1)):
        summary_parses.clear()
        written = write_report(out, given)
        assert len(summary_parses) == parses
        assert "used 90% of a CPU core" in written[0].read_text()  # the client warning shows
        summary_parses.clear()
        summary_table(given)
        assert len(summary_parses) == parses


def test_export_computes_the_turn_table_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import agentload.results.summary as summary_mod

    out = _calls(tmp_path / "run", n=5)
    turns = summarize(out).dump()["turns"]["agent"]

    def no_summary(*a: Any, **kw: Any) -> None:
        raise AssertionError("export summarized the whole run")

    monkeypatch.setattr(summary_mod, "summarize", no_summary)
    r = CliRunner().invoke(app, ["export", str(out), "--out", str(tmp_path / "x")])
    assert r.exit_code == 0, r.output
    with (tmp_path / "x" / "turns.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert [(r["role"], int(r["turn"]), int(r["calls"])) for r in rows] == [
        ("agent", t["turn"], t["calls"]) for t in turns
    ]
    assert [float(r["ttft_s.p50"]) for r in rows] == pytest.approx(
        [t["ttft_s"]["p50"] for t in turns]
    )


def test_the_sweep_page_has_the_report_look(monkeypatch: pytest.MonkeyPatch) -> None:
    from agentload.report.sweep import sweep_charts

    monkeypatch.setitem(plots._BASE_LAYOUT, "template", "plotly_dark")
    doc = {
        "kind": "rate",
        "slo": {"ttft_p90": 1.0},
        "points": [
            {"rate": 1.0, "ttft_p50": 0.1, "output_tokens_per_s": 10.0, "success_rate": 1.0},
            {"rate": 2.0, "ttft_p50": 0.2, "output_tokens_per_s": 19.0, "success_rate": 0.5},
        ],
    }
    figs = sweep_charts(doc)
    assert len(figs) == 4
    for fig in figs:
        lay = fig["layout"]
        assert lay["template"] == "plotly_dark" and lay["hovermode"] == "x unified"
        assert lay["xaxis"]["title"] == {"text": "rate"} and lay["xaxis"]["automargin"] is True
    y = figs[0]["layout"]["yaxis"]
    assert y["title"] == {"text": "seconds"} and y["rangemode"] == "tozero"
    assert figs[2]["layout"]["yaxis"]["range"] == [0, 1.05]  # a chart's own y axis wins
