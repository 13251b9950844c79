"""Many runs side by side: `compare` over N runs and sweeps (table, overlaid curves, one page
that opens alone), `export` of a sweep folder, and sweep.html's links to each point's report,
all on real runs against the embedded simulator."""

from __future__ import annotations

import csv
import json
import re
import shutil
from pathlib import Path

import orjson
import pytest
from typer.testing import CliRunner

import agentload
from agentload.cli import app
from agentload.config import build_config
from agentload.results.jsonl import load_jsonl
from agentload.sweep import execute_sweep
from agentload.util import run_async

FAST = {"sim": {"profile": "instant"}, "metrics": {"interval_s": 0.2}}
TASKS = {"tasks": ["airline/000-001"]}
HREF = re.compile(r'<a href="([^"]+)">')
# Anything the page would fetch: a script, stylesheet, image or frame from elsewhere.
EXTERNAL = re.compile(
    r"""(src|href)\s*=\s*["']?(https?:)?//|<link\b|@import|url\(\s*["']?https?:"""
)


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A sweep over concurrency 1, 2 and two single runs (concurrency 1, and 2 with another
    seed), each with its report."""
    tmp = tmp_path_factory.mktemp("many")
    sweep = tmp / "sweep"
    cfg = build_config(data={"out": str(sweep), **FAST, "workload": TASKS})
    doc, code = run_async(
        execute_sweep(cfg, kind="concurrency", points=[1, 2], progress="off", say=lambda m: None)
    )
    assert code == 0 and [p["concurrency"] for p in doc["points"]] == [1, 2]
    one, two = tmp / "one", tmp / "two"
    agentload.run({"out": str(one), **FAST, "workload": TASKS, "load": {"concurrency": 1}})
    agentload.run(
        {"out": str(two), **FAST, "workload": {**TASKS, "seed": 7}, "load": {"concurrency": 2}}
    )
    return {"sweep": sweep, "one": one, "two": two, "tmp": tmp}


def _invoke(*args: str):
    return CliRunner().invoke(app, [str(a) for a in args])


def test_compare_runs_and_a_sweep_table_curves_links(folders: dict[str, Path]) -> None:
    out = folders["tmp"] / "cmp"
    res = _invoke(
        "compare", folders["sweep"], folders["one"], folders["two"], "--out", out,
        "--labels", "sw,c1,c2s7", "--json",
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    doc = json.loads(res.output)
    assert doc == orjson.loads((out / "compare.json").read_bytes())
    assert [r["label"] for r in doc["runs"]] == ["sw", "c1", "c2s7"]
    assert [r["sweep"] for r in doc["runs"]] == [True, False, False]
    # One row per sweep point, one per run, at the run's own load.
    assert [(p["run"], p["concurrency"]) for p in doc["points"]] == [
        ("sw", 1.0), ("sw", 2.0), ("c1", 1.0), ("c2s7", 2.0),
    ]  # fmt: skip
    # The sweep's rows are sweep.json's; a run's are its summary's agent calls.
    sweep_doc = orjson.loads((folders["sweep"] / "sweep.json").read_bytes())
    for got, want in zip(doc["points"][:2], sweep_doc["points"], strict=True):
        assert got["ttft_p50"] == want["ttft_p50"] and got["episodes"] == want["episodes"]
    summary = orjson.loads((folders["one"] / "summary.json").read_bytes())
    agent = summary["calls"]["by_role"]["agent"]
    assert doc["points"][2]["ttft_p90"] == pytest.approx(agent["ttft_s"]["p90"])
    assert doc["points"][2]["episodes"] == summary["counts"]["sessions"] == 2
    # The seed differs from the first run's workload: said, load aside.
    assert any("c2s7 differs from sw in" in n and "workload.seed" in n for n in doc[
        "context_differences"])  # fmt: skip
    assert not any(re.search(r"(in |; )load\.", n) for n in doc["context_differences"])

    md = (out / "compare.md").read_text()
    assert "| sw | [1](../sweep/c0001/report.html) |" in md
    assert "| c2s7 | [2](../two/report.html) |" in md
    assert "| c1 | `" in md and "| run |" in md and "sweep over concurrency, 2 points" in md

    page = (out / "compare.html").read_text()
    # Every link resolves to an existing report, relative to the page.
    hrefs = HREF.findall(page.partition("</main>")[0])
    targets = [h for h in hrefs if not h.startswith("#")]
    assert len(targets) == 4
    for h in targets:
        assert (out / h).resolve().is_file(), h
    assert EXTERNAL.search(page) is None
    # TTFT, e2e, success and throughput against concurrency; one colour per run.
    specs = [
        json.loads(m.replace("<\\/", "</"))
        for m in re.findall(r'<script type="application/json" id="spec\d+">(.*?)</script>', page)
    ]
    titles = [s["layout"]["title"]["text"] for s in specs]
    assert titles == [
        "TTFT p50 (solid) and p90 (dashed) against concurrency",
        "End-to-end latency p50 (solid) and p90 (dashed) against concurrency",
        "Task success against concurrency",
        "Output tokens per second against concurrency",
    ]
    ttft = specs[0]["data"]
    assert [t["name"] for t in ttft] == ["sw p50", "sw p90", "c1 p50", "c1 p90", "c2s7 p50",
                                         "c2s7 p90"]  # fmt: skip
    assert ttft[0]["x"] == [1.0, 2.0] and ttft[2]["x"] == [1.0]
    assert ttft[0]["y"] == [p["ttft_p50"] for p in sweep_doc["points"]]
    assert ttft[0]["line"]["color"] == ttft[1]["line"]["color"] != ttft[2]["line"]["color"]

    # The console table without --json.
    res = _invoke("compare", folders["sweep"], folders["one"], folders["two"], "--out", out)
    assert res.exit_code == 0, res.output
    assert "3 runs side by side" in res.output and f"wrote {out / 'compare.html'}" in res.output


def test_two_runs_keep_their_statistics(
    folders: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    one, two = folders["one"], folders["two"]
    monkeypatch.chdir(folders["tmp"])
    res = _invoke("compare", one, two, "--json")
    assert res.exit_code == 0, res.output
    doc = json.loads(res.output)
    assert set(doc) >= {"a", "b", "metrics", "context_differences"}  # unchanged two-run JSON
    assert "workload.seed: 0 -> 7" in doc["context_differences"]
    assert not (folders["tmp"] / "results").exists()  # two runs: no files unless --out
    # With --out, the page too: both rows and the confidence-interval table.
    out = folders["tmp"] / "two-page"
    res = _invoke("compare", one, two, "--out", out)
    assert res.exit_code == 0, res.output
    assert "95% bootstrap CI" in res.output and f"wrote {out / 'compare.md'}" in res.output
    md = (out / "compare.md").read_text()
    assert "## one against two: 95% bootstrap confidence intervals" in md
    ttft = doc["metrics"]["ttft_p50"]
    assert f"| ttft_p50 | {_secs(ttft['a']['value'])} [" in md
    assert "| one | [1](../one/report.html) |" in md


def _secs(v: float) -> str:
    from agentload.fmt import secs

    return secs(v)


def test_two_sweeps_overlay_without_gateway(folders: dict[str, Path]) -> None:
    out = folders["tmp"] / "two-sweeps"
    sweep = folders["sweep"]
    res = _invoke("compare", sweep, sweep, "--out", out, "--json")
    assert res.exit_code == 0, res.output
    doc = json.loads(res.output)
    # The same folder twice is told apart in the labels.
    a, b = (r["label"] for r in doc["runs"])
    assert (a, b) == ("sweep #1", "sweep #2")
    assert len(doc["points"]) == 4


def test_compare_usage_errors(folders: dict[str, Path]) -> None:
    one, two, sweep = folders["one"], folders["two"], folders["sweep"]
    empty = folders["tmp"] / "empty"
    empty.mkdir(exist_ok=True)
    for args, says in (
        ((one,), "two or more results folders"),
        ((one, two, sweep, "--labels", "a,b"), "expected 3 non-empty comma-separated names"),
        ((one, two, sweep, "--labels", "a,a,b"), "names must differ"),
        ((one, two, sweep, "--gateway"), "compare two folders"),
        ((one, two, empty), f"error: {empty}: no calls.jsonl or sessions.jsonl"),
    ):
        res = _invoke("compare", *args, "--out", folders["tmp"] / "bad")
        assert res.exit_code == 2, (args, res.output)
        assert says in res.output and "Traceback" not in res.output, (args, res.output)
    assert not (folders["tmp"] / "bad").exists()  # nothing written on bad usage


def test_sweep_page_links_each_point_report(folders: dict[str, Path]) -> None:
    sweep = folders["sweep"]
    md = (sweep / "sweep.md").read_text()
    assert "| [1](c0001/report.html) |" in md and "| [2](c0002/report.html) |" in md
    page = (sweep / "sweep.html").read_text()
    hrefs = [h for h in HREF.findall(page.partition("</main>")[0]) if not h.startswith("#")]
    assert hrefs == ["c0001/report.html", "c0002/report.html"]
    for h in hrefs:
        assert (sweep / h).is_file()
    assert '<td><a href="c0001/report.html">1</a></td>' in page


def test_export_a_sweep_one_table_per_kind(folders: dict[str, Path]) -> None:
    sweep = folders["sweep"]
    dest = folders["tmp"] / "sweep-csv"
    res = _invoke("export", sweep, "--out", dest)
    assert res.exit_code == 0, res.output
    assert "point 1/2: concurrency 1 (c0001)" in res.output
    with (dest / "calls.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert list(rows[0])[:3] == ["concurrency", "point", "call_id"]
    for c, d in ((1, "c0001"), (2, "c0002")):
        calls = load_jsonl(sweep / d / "calls.jsonl")
        mine = [r for r in rows if r["point"] == d]
        assert len(mine) == len(calls) and {float(r["concurrency"]) for r in mine} == {c}
        assert [r["call_id"] for r in mine] == [c_["call_id"] for c_ in calls]
    with (dest / "sessions.csv").open() as f:
        sessions = list(csv.DictReader(f))
    assert sorted((r["point"], r["task_id"]) for r in sessions) == [
        ("c0001", "airline/000"), ("c0001", "airline/001"),
        ("c0002", "airline/000"), ("c0002", "airline/001"),
    ]  # fmt: skip
    # tau2 files are per run: refused for a sweep, naming it.
    res = _invoke("export", sweep, "--format", "tau2")
    assert res.exit_code == 2 and f"{sweep} is a sweep" in res.output


def test_export_a_sweep_as_parquet(folders: dict[str, Path]) -> None:
    pq = pytest.importorskip("pyarrow.parquet")
    sweep = folders["sweep"]
    dest = folders["tmp"] / "sweep-pq"
    res = _invoke("export", sweep, "--format", "parquet", "--out", dest, "--json")
    assert res.exit_code == 0, res.output
    assert json.loads(res.output) == [str(dest / f"{t}.parquet") for t in ("calls", "sessions",
                                                                           "turns")]  # fmt: skip
    t = pq.read_table(dest / "calls.parquet")
    n = sum(len(load_jsonl(sweep / d / "calls.jsonl")) for d in ("c0001", "c0002"))
    assert t.num_rows == n
    assert sorted(set(t.column("concurrency").to_pylist())) == [1.0, 2.0]


CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.mark.skipif(CHROMIUM is None, reason="no chromium on PATH")
def test_compare_page_alone_draws_in_chromium(folders: dict[str, Path]) -> None:
    from test_report_browser import open_page

    out = folders["tmp"] / "cmp-browser"
    res = _invoke("compare", folders["sweep"], folders["one"], folders["two"], "--out", out)
    assert res.exit_code == 0, res.output
    alone = folders["tmp"] / "alone"
    alone.mkdir()
    shutil.copy(out / "compare.html", alone / "compare.html")
    page = open_page(alone / "compare.html", folders["tmp"])
    assert page["errors"] == [] and page["requests"] == []
    assert page["state"] == "drawn"
    assert page["charts"] == 4 and page["drawn"] == 4
    assert "sweep over concurrency, 2 points" in page["text"]
