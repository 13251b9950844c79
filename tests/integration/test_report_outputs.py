"""What a run's outputs say and where they go: context, all-gap ITL, failed runs, sweep
curves and resume, compare, export (csv / parquet), MLflow (a real tracking server) and the
Python API."""

from __future__ import annotations

import csv
import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import numpy as np
import orjson
import pytest
from typer.testing import CliRunner

import agentload
from agentload.cli import app
from agentload.client import itlhist
from agentload.config import build_config
from agentload.report.sweep import knee
from agentload.results.context import context_differences, redact_url, run_context
from agentload.results.jsonl import load_jsonl
from agentload.sweep import execute_sweep
from agentload.util import run_async

FAST = {"sim": {"profile": "tiny-cpu", "speedup": 50.0}, "metrics": {"interval_s": 0.2}}


def _data(out: Path, **kw) -> dict:
    data = {"out": str(out), **FAST}
    data.update(kw)
    return data


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, agentload.Summary]:
    out = tmp_path_factory.mktemp("outputs") / "run"
    s = agentload.run(
        _data(
            out,
            workload={"tasks": ["airline/000-003"], "trials": 2},
            load={"concurrency": 4},
            slo={"ttft_p90": 2.0},
        )
    )
    return out, s


# ---- the Python API and the context ---------------------------------------------------------


def test_api_returns_the_summary(run_dir: tuple[Path, agentload.Summary]) -> None:
    out, s = run_dir
    assert s.ok and s.exit_code == 0 and s.out_dir == out
    on_disk = orjson.loads((out / "summary.json").read_bytes())
    assert s["counts"] == on_disk["counts"] and s["counts"]["sessions"] == 8
    assert s.get_path("episodes.episodes") == 8
    assert s.get_path("calls.no.such.key", "x") == "x"


def test_context_says_what_was_measured(run_dir: tuple[Path, agentload.Summary]) -> None:
    _, s = run_dir
    ctx = s["context"]
    assert ctx["models"] == ["agentload-sim"]
    assert ctx["endpoints"]["agent"]["url"].startswith("http://127.0.0.1:")
    assert ctx["load"] == {**ctx["load"], "mode": "closed", "concurrency": 4}
    assert ctx["workload"]["trials"] == 2 and ctx["workload"]["tasks_selected"] == 4
    assert ctx["simulator"]["profile"] == "tiny-cpu"
    assert ctx["agentload_version"] == agentload.__version__ and ctx["host"]
    md = (run_dir[0] / "report.md").read_text()
    assert "| load | closed loop, concurrency 4 |" in md
    assert "| simulator | embedded, profile tiny-cpu, speedup 50.0 (uncalibrated) |" in md


def test_urls_lose_userinfo_and_query() -> None:
    assert redact_url("https://bob:s3cret@host:8443/v1?api_key=k") == "https://host:8443/v1"
    assert redact_url("http://[::1]:8000/v1") == "http://[::1]:8000/v1"
    assert redact_url(None) is None


def test_context_differences_name_each_field() -> None:
    a = {"load": {"concurrency": 8}, "models": ["m"], "endpoints": {"agent": {"url": "u1"}}}
    b = {"load": {"concurrency": 16}, "models": ["m"], "endpoints": {"agent": {"url": "u2"}}}
    assert context_differences(a, b) == [
        "endpoints.agent.url: u1 -> u2",
        "load.concurrency: 8 -> 16",
    ]


def test_engine_from_preflight_is_shown(tmp_path: Path) -> None:
    (tmp_path / "run.json").write_text(
        json.dumps({"endpoints_detected": {"agent": {"engine": "vllm", "version": "0.11.0"}}})
    )
    assert run_context(tmp_path)["engines"] == {"agent": "vllm 0.11.0"}


# ---- all-token ITL --------------------------------------------------------------------------


def test_gap_histogram_percentiles_within_one_percent() -> None:
    rng = np.random.default_rng(3)
    calls = [rng.lognormal(np.log(0.02), 0.6, size=rng.integers(1, 400)) for _ in range(300)]
    ks, ns = itlhist.merge(itlhist.encode(g.tolist()) for g in calls)
    gaps = np.sort(np.concatenate(calls))
    assert int(ns.sum()) == gaps.size
    qs = [10, 50, 90, 99, 99.9]
    for q, got in zip(qs, itlhist.quantiles(ks, ns, qs), strict=True):
        rank = int(np.ceil(q / 100 * gaps.size)) - 1
        assert got == pytest.approx(gaps[rank], rel=itlhist.RELATIVE_ERROR + 1e-9)


def test_summary_all_gap_itl_matches_records(run_dir: tuple[Path, agentload.Summary]) -> None:
    out, s = run_dir
    calls = [c for c in load_jsonl(out / "calls.jsonl") if c["role"] == "agent"]
    gaps = sum(c["itl"]["count"] for c in calls if c["status"] == "ok")
    block = s["calls"]["by_role"]["agent"]["itl_s"]
    assert block["all_gaps"]["count"] == gaps > 0
    # Every gap lies between the smallest and largest per-call extremes.
    assert block["all_gaps"]["p50"] <= block["max"] * (1 + itlhist.RELATIVE_ERROR)


# ---- compare --------------------------------------------------------------------------------


def test_compare_uses_summary_definitions_and_warns_on_context(
    run_dir: tuple[Path, agentload.Summary], tmp_path: Path
) -> None:
    out, s = run_dir
    other = tmp_path / "b"
    agentload.run(
        _data(other, workload={"tasks": ["airline/000-003"], "trials": 2}, load={"concurrency": 2})
    )
    res = CliRunner().invoke(app, ["compare", str(out), str(other), "--json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.output)
    # One definition: compare's ITL mean is summary.json's gap-weighted mean.
    itl = doc["metrics"]["itl_mean"]["a"]
    assert itl["value"] == pytest.approx(s["calls"]["by_role"]["agent"]["itl_s"]["mean"])
    assert itl["ci"][0] <= itl["value"] <= itl["ci"][1]
    assert "load.concurrency: 4 -> 2" in doc["context_differences"]
    assert "slo.ttft_p90: 2.0 -> (none)" in doc["context_differences"]
    assert not any(".url" in d for d in doc["context_differences"])
    text = CliRunner().invoke(app, ["compare", str(out), str(other)]).output
    assert "warning: the runs differ in load.concurrency: 4 -> 2" in text
    assert "cluster bootstrap" in text


def test_cluster_bootstrap_is_wider_for_correlated_calls() -> None:
    from agentload.report.compare import Clusters, cluster_bootstrap

    # 40 episodes of 25 calls; each episode's calls share one level: resampling calls alone
    # would pretend there are 1000 independent values.
    rng = np.random.default_rng(0)
    levels = rng.normal(1.0, 0.3, size=40)
    values = np.repeat(levels, 25) + rng.normal(0, 0.01, size=1000)
    sids = np.repeat(np.arange(40), 25).astype(object)
    cl = Clusters(sids)
    assert sorted(cl.resample(np.random.default_rng(1)).tolist())[:1] != []
    ((lo, hi),) = cluster_bootstrap(cl, lambda idx: [values[idx].mean()], n_resamples=400)
    from agentload.report.compare import bootstrap

    ((nlo, nhi),) = bootstrap(values, lambda m: m.mean(axis=1), n_resamples=400)
    assert (hi - lo) > 3 * (nhi - nlo)


# ---- failed runs ----------------------------------------------------------------------------


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_failed_run_report_shows_errors_not_rates(tmp_path: Path) -> None:
    port = _closed_port()  # nothing listens: every call fails to connect
    s = agentload.run(
        {
            "out": str(tmp_path / "f"),
            "endpoints": {
                "agent": {
                    "base_url": f"http://127.0.0.1:{port}/v1",
                    "model": "m",
                    "retry": {"max_attempts": 1},
                }
            },
            "workload": {"tasks": ["airline/000-001"]},
            "load": {"concurrency": 2},
            "metrics": {"enabled": False},
            "preflight": False,  # preflight would stop the run before any episode
        }
    )
    assert s.exit_code == 1
    md = (tmp_path / "f" / "report.md").read_text()
    assert "> **warning:** the run failed" in md
    assert "no call succeeded" in md
    assert "| connect_error |" in md  # the error kind, and its message below
    assert "episodes / min | –" in md or "episodes / min" not in md.split("## Run\n")[0]
    html = (tmp_path / "f" / "report.html").read_text()
    assert "Throughput and concurrency" not in html  # no empty or meaningless chart


# ---- sweep ----------------------------------------------------------------------------------


def test_knee() -> None:
    pts = [
        {"concurrency": 1, "output_tokens_per_s": 100},
        {"concurrency": 2, "output_tokens_per_s": 195},
        {"concurrency": 4, "output_tokens_per_s": 380},
        {"concurrency": 8, "output_tokens_per_s": 450},
        {"concurrency": 16, "output_tokens_per_s": 460},
    ]
    assert knee(pts, "concurrency") == 4
    assert knee(pts[:3], "concurrency") is None


def test_sweep_curves_report_and_resume(tmp_path: Path) -> None:
    root = tmp_path / "sw"
    cfg = build_config(
        data=_data(
            root,
            workload={"tasks": ["airline/000-003"], "trials": 2},
            slo={"ttft_p90": 2.0},
        )
    )
    doc, code = run_async(
        execute_sweep(cfg, kind="concurrency", points=[1, 4], progress="off", say=lambda m: None)
    )
    assert code == 0 and [p["concurrency"] for p in doc["points"]] == [1, 4]
    p = doc["points"][1]
    for key in ("itl_p50", "e2e_p90", "success_rate", "slo_call_attainment", "pass_hat_k"):
        assert p[key] is not None, key
    assert "knee" in doc and doc["context"]["load"]["concurrency"] == "1, 4"
    html = (root / "sweep.html").read_text()
    assert html.count('<div class="chart"') >= 5
    assert "Quality under load" in html and "calls meeting every SLO" in html
    md = (root / "sweep.md").read_text()
    assert "| calls in SLO |" in md.replace("calls in SLO | goodput", "calls in SLO |")

    # Interrupted before the second point: resume runs it and keeps the first as it is.
    first = (root / "c0001" / "calls.jsonl").read_bytes()
    cut = dict(doc, points=doc["points"][:1], status="interrupted")
    (root / "sweep.json").write_bytes(orjson.dumps(cut))
    shutil.rmtree(root / "c0004")
    doc2, code2 = run_async(
        execute_sweep(
            cfg, kind="concurrency", points=[], progress="off", say=lambda m: None, resume=True
        )
    )
    assert code2 == 0 and doc2["status"] == "completed"
    assert [p["concurrency"] for p in doc2["points"]] == [1, 4]
    assert (root / "c0001" / "calls.jsonl").read_bytes() == first
    assert (root / "c0004" / "summary.json").exists()

    res = CliRunner().invoke(app, ["report", str(root), "-q"])
    assert res.exit_code == 0, res.output
    assert "sweep.html" in res.output and "c0004/report.html" in res.output


# ---- export ---------------------------------------------------------------------------------


def test_export_csv_and_parquet(run_dir: tuple[Path, agentload.Summary], tmp_path: Path) -> None:
    import pyarrow.parquet as pq

    out, s = run_dir
    calls = load_jsonl(out / "calls.jsonl")
    res = CliRunner().invoke(app, ["export", str(out), "--out", str(tmp_path / "c"), "--json"])
    assert res.exit_code == 0, res.output
    with (tmp_path / "c" / "calls.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == len(calls)
    assert {"call_id", "ttft_s", "itl.p50", "session_id"} <= rows[0].keys()
    assert float(rows[0]["ttft_s"]) == pytest.approx(calls[0]["ttft_s"])
    res = CliRunner().invoke(
        app, ["export", str(out), "--format", "parquet", "--out", str(tmp_path / "p")]
    )
    assert res.exit_code == 0, res.output
    t = pq.read_table(tmp_path / "p" / "calls.parquet")
    assert t.num_rows == len(calls) and "itl.p99" in t.column_names
    sess = pq.read_table(tmp_path / "p" / "sessions.parquet")
    assert sess.num_rows == 8 and "durations.total_s" in sess.column_names
    turns = pq.read_table(tmp_path / "p" / "turns.parquet").to_pylist()
    agent_turns = [r for r in turns if r["role"] == "agent"]
    assert sum(r["calls"] for r in agent_turns) == s["calls"]["by_role"]["agent"]["calls"]
    bad = CliRunner().invoke(app, ["export", str(out), "--format", "xlsx"])
    assert bad.exit_code == 2 and "expected csv or parquet" in bad.output


# ---- MLflow ---------------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module", autouse=True)
def mlflow_proc(tmp_path_factory: pytest.TempPathFactory):
    """A real MLflow tracking server (sqlite store), started when this module's tests start:
    it needs tens of seconds to boot, which it spends while the other tests run."""
    tmp = tmp_path_factory.mktemp("mlflow")
    port = _free_port()
    proc = subprocess.Popen(
        [
            str(Path(sys.executable).parent / "mlflow"),
            "server",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--workers",
            "1",
            "--backend-store-uri",
            f"sqlite:///{tmp / 'mlflow.db'}",
            "--artifacts-destination",
            str(tmp / "artifacts"),
        ],
        stdout=subprocess.DEVNULL,
        stderr=(tmp / "mlflow.log").open("w"),
        start_new_session=True,
    )
    try:
        yield proc, f"http://127.0.0.1:{port}", tmp / "mlflow.log"
    finally:
        os.killpg(proc.pid, 15)
        proc.wait(timeout=30)


@pytest.fixture
def mlflow_server(mlflow_proc) -> str:
    proc, url, log = mlflow_proc
    deadline = time.monotonic() + 180
    while True:
        try:
            with urllib.request.urlopen(f"{url}/health", timeout=1) as r:
                if r.status == 200:
                    return url
        except OSError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            pytest.fail("mlflow server did not start: " + log.read_text()[-2000:])
        time.sleep(0.3)


def test_mlflow_logs_params_metrics_and_artifacts(
    run_dir: tuple[Path, agentload.Summary],
    mlflow_server: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from mlflow.tracking import MlflowClient

    # mlflow.set_tracking_uri exports MLFLOW_TRACKING_URI; restored after the test, so later
    # runs in this process do not log to a server that is gone by then.
    monkeypatch.setenv("MLFLOW_TRACKING_URI", mlflow_server)

    from agentload.integrations import mlflow as ml
    from agentload.results import records

    parses: list[type] = []
    parse = records.parse_lenient
    monkeypatch.setattr(records, "parse_lenient", lambda c, d: parses.append(c) or parse(c, d))
    out, s = run_dir
    run_id = ml.log_run(out, s, uri=mlflow_server)
    assert parses == [records.Summary]  # the summary dict is parsed once
    client = MlflowClient(tracking_uri=mlflow_server)
    r = client.get_run(run_id)
    assert r.data.params["load.concurrency"] == "4"
    assert r.data.params["simulator.profile"] == "tiny-cpu"
    agent = s["calls"]["by_role"]["agent"]
    assert r.data.metrics["ttft_p90_s"] == pytest.approx(agent["ttft_s"]["p90"])
    assert r.data.metrics["success_rate"] == pytest.approx(s["episodes"]["success_rate"])
    names = {a.path for a in client.list_artifacts(run_id)}
    assert {"report.html", "summary.json", "calls.jsonl", "sessions.jsonl"} <= names

    doc = {
        "kind": "concurrency",
        "points_planned": [1, 2],
        "points": [
            {"concurrency": 1, "output_tokens_per_s": 10.0, "ttft_p90": 0.1},
            {"concurrency": 2, "output_tokens_per_s": 19.0, "ttft_p90": 0.2},
        ],
        "knee": None,
    }
    (tmp_path / "sweep.json").write_bytes(orjson.dumps(doc))
    sid = ml.log_sweep(tmp_path, doc, uri=mlflow_server)
    # A parent run with a nested run per point, its figures under a run's metric names.
    exp = client.get_run(sid).info.experiment_id
    kids = client.search_runs([exp], filter_string=f"tags.mlflow.parentRunId = '{sid}'")
    got = sorted((k.data.params["sweep.point"], k.data.metrics["ttft_p90_s"]) for k in kids)
    assert got == [("1", 0.1), ("2", 0.2)]
    assert "sweep.json" in {a.path for a in client.list_artifacts(sid)}
