"""End-to-end runs on the embedded simulator (real HTTP on loopback, real subprocesses)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import yaml

from agentload.config import build_config
from agentload.results.jsonl import load_jsonl
from agentload.runner import execute_run
from agentload.sweep import execute_sweep

AGENTLOAD = str(Path(sys.executable).parent / "agentload")
FAST = {"sim": {"profile": "tiny-cpu", "speedup": 50.0}, "metrics": {"interval_s": 0.5}}


def _cfg(out: Path, **kw):
    data = {"out": str(out), **FAST}
    for k, v in kw.items():
        data[k] = {**data.get(k, {}), **v} if isinstance(v, dict) else v
    return build_config(data=data)


def _quiet(_msg: str) -> None:
    pass


def _keys(out: Path) -> list[tuple[str, int]]:
    return [
        (s["task_id"], s["trial"])
        for s in load_jsonl(out / "sessions.jsonl")
        if not s.get("warmup")
    ]


async def test_run_writes_every_file_and_numbers_agree(tmp_path: Path) -> None:
    out = tmp_path / "run"
    cfg = _cfg(
        out,
        workload={"tasks": ["airline/000-005"], "trials": 2},
        load={"concurrency": 4, "warmup": 2},
        slo={"ttft_p90": 2.0},
    )
    res = await execute_run(cfg, progress="off", say=_quiet, install_signals=False)
    assert res.exit_code == 0, res.stop_reason
    for name in (
        "config.yaml",
        "summary.json",
        "calls.jsonl",
        "sessions.jsonl",
        "trajectories.jsonl",
        "server_metrics.jsonl",
        "report.md",
        "report.html",
        "run.json",
    ):
        assert (out / name).stat().st_size > 0, name
    assert list((out / "charts").glob("*.png"))
    sessions = load_jsonl(out / "sessions.jsonl")
    calls = load_jsonl(out / "calls.jsonl")
    measured = [s for s in sessions if not s["warmup"]]
    warm = [s for s in sessions if s["warmup"]]
    assert len(measured) == 12 and len(warm) == 2
    assert len(set(_keys(out))) == 12
    assert all(s["trial"] < 0 for s in warm)
    assert all(s["sched_delay_s"] >= 0 and s["intended_start_ns"] for s in sessions)
    assert len(load_jsonl(out / "trajectories.jsonl")) == len(sessions)
    summary = json.loads((out / "summary.json").read_text())
    assert summary == json.loads(json.dumps(res.summary.dump()))
    warm_ids = {s["session_id"] for s in warm}
    mcalls = [c for c in calls if c["session_id"] not in warm_ids]
    assert summary["counts"]["sessions"] == 12
    assert summary["counts"]["calls"] == len(mcalls)
    agent_ttft = [c["ttft_s"] for c in mcalls if c["role"] == "agent" and c["status"] == "ok"]
    got = summary["calls"]["by_role"]["agent"]["ttft_s"]["p50"]
    assert got == pytest.approx(float(np.percentile(agent_ttft, 50)))
    succ = sum(1 for s in measured if s["reward"] >= 1.0) / 12
    assert summary["episodes"]["success_rate"] == pytest.approx(succ)
    client = summary["client"]
    assert client["episodes_finished"] == 14 and client["max_active"] <= 4
    assert client["event_loop_lag_s"]["count"] > 0 and "p99" in client["event_loop_lag_s"]
    assert summary["slo"]["thresholds"] == {"ttft_p90": 2.0}


def _spawn(args: list[str], out: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [
            AGENTLOAD,
            "run",
            "--out",
            str(out),
            "--progress",
            "plain",
            "--progress-interval",
            "0.5",
            *args,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )


def _wait_sessions(out: Path, n: int, proc: subprocess.Popen, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    path = out / "sessions.jsonl"
    while time.monotonic() < deadline:
        if path.exists() and path.read_bytes().count(b"\n") >= n:
            return
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.05)
    raise AssertionError("the run made no progress")


RUN_ARGS = [
    "--tasks",
    "airline/000-009",
    "--trials",
    "2",
    "--concurrency",
    "4",
    "--sim-speedup",
    "40",
    "--metrics-interval",
    "0.5",
]


def test_sigint_then_sigkill_then_resume(tmp_path: Path) -> None:
    out = tmp_path / "run"
    # 1. Ctrl-C: no new episodes, in-flight ones drain, summary written, exit 130.
    proc = _spawn([*RUN_ARGS, "--drain-timeout", "20s"], out)
    _wait_sessions(out, 3, proc)
    os.killpg(proc.pid, signal.SIGINT)  # as a terminal does: the whole process group
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, stderr
    assert b"no new episodes" in stderr and b"--resume" in stderr
    summary = json.loads((out / "summary.json").read_text())
    sessions = load_jsonl(out / "sessions.jsonl")
    assert summary["client"]["stop_reason"] == "interrupted"
    assert summary["client"]["episodes_cancelled"] == 0  # drained, nothing cut off
    assert summary["counts"]["sessions"] == len(sessions) < 20
    assert summary["counts"]["unfinished_calls"] == 0
    per_session = Counter(c["session_id"] for c in load_jsonl(out / "calls.jsonl"))
    assert set(per_session) == {s["session_id"] for s in sessions}
    for s in sessions:  # every call of every finished episode is on disk
        assert (
            per_session[s["session_id"]] == s["counts"]["agent_calls"] + s["counts"]["user_calls"]
        )
    after_int = _keys(out)

    # 2. Resume, then SIGKILL the run and its simulator mid-way.
    proc = subprocess.Popen(
        [AGENTLOAD, "run", "--resume", str(out), "--quiet"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    _wait_sessions(out, len(after_int) + 3, proc)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    before = _keys(out)
    assert len(after_int) + 3 <= len(before) < 20

    # 3. Resume to the end: every pair exactly once, earlier records untouched.
    r = subprocess.run(
        [AGENTLOAD, "run", "--resume", str(out), "--quiet"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 0, r.stderr
    keys = _keys(out)
    assert len(keys) == len(set(keys)) == 20
    assert set(keys) == {(f"airline/{i:03d}", t) for i in range(10) for t in range(2)}
    assert keys[: len(before)] == before
    done = {s["session_id"] for s in load_jsonl(out / "sessions.jsonl")}
    calls = load_jsonl(out / "calls.jsonl")
    assert {c["session_id"] for c in calls} <= done  # no calls of lost episodes left over
    assert len(load_jsonl(out / "trajectories.jsonl")) == 20
    summary = json.loads((out / "summary.json").read_text())
    assert summary["counts"]["sessions"] == 20
    assert json.loads((out / "run.json").read_text())["resume_count"] == 2


async def test_sweep_two_points_with_slo(tmp_path: Path) -> None:
    out = tmp_path / "sweep"
    cfg = _cfg(out, workload={"tasks": ["airline/000-003"]}, slo={"ttft_p90": 30.0}, report=False)
    _, code = await execute_sweep(
        cfg, kind="concurrency", points=[1, 4], progress="off", say=_quiet
    )
    assert code == 0
    saved = json.loads((out / "sweep.json").read_text())
    assert [p["concurrency"] for p in saved["points"]] == [1, 4]
    assert saved["best_point"] == 4 and all(p["slo_met"] for p in saved["points"])
    for p in saved["points"]:
        assert p["episodes"] == 4 and p["ttft_p90"] is not None and p["calls_per_s"] > 0
        assert (out / p["dir"] / "summary.json").exists()
    assert "Highest concurrency meeting the SLO" in (out / "sweep.md").read_text()


async def test_open_loop_rate_within_5_percent(tmp_path: Path) -> None:
    # Gamma shape 100 (CV 0.1) keeps the sampling error of 80 arrivals near 1 %, so the check
    # measures the scheduler; Poisson arrivals would need thousands for a 5 % bound.
    out = tmp_path / "open"
    cfg = _cfg(
        out,
        workload={"tasks": ["airline/000-019"], "trials": 4},
        load={"rate": 40.0, "burstiness": 100.0},
        sim={"profile": "instant"},
        report=False,
        metrics={"enabled": False},
    )
    res = await execute_run(cfg, progress="off", say=_quiet, install_signals=False)
    assert res.exit_code == 0
    client = res.summary.dump()["client"]
    assert client["episodes_finished"] == 80
    assert client["rate_achieved"] == pytest.approx(40.0, rel=0.05)
    assert client["rate_offered"] == pytest.approx(40.0, rel=0.05)
    assert res.summary.scheduling.sched_delay_s.count == 80


async def test_faults_are_counted_and_nothing_lost(tmp_path: Path) -> None:
    out = tmp_path / "faults"
    path = tmp_path / "faults.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "out": str(out),
                "sim": {
                    "profile": "tiny-cpu",
                    "speedup": 50,
                    "fault_rate": 0.1,
                    "fault_kinds": ["http_503", "http_429", "http_500", "reset"],
                },
                "endpoints": {},
                "workload": {"tasks": "airline/000-007"},
                # Injected 500s and resets end about half the episodes on infrastructure
                # errors: tolerated here, where counting them is the point.
                "load": {"concurrency": 4, "max_infra_error_share": 1.0},
                "report": False,
            }
        )
    )
    cfg = build_config(path=path)
    res = await execute_run(cfg, progress="off", say=_quiet, install_signals=False)
    assert res.exit_code == 0
    calls = load_jsonl(out / "calls.jsonl")
    failed = [c for c in calls if c["status"] == "error"]
    retried = [c for c in calls if (c.get("attempts") or 1) > 1]
    assert failed or retried  # faults were injected and seen
    s = res.summary.dump()
    assert s["counts"]["sessions"] == 8 and s["counts"]["calls"] == len(calls)
    assert s["errors"]["calls_failed"] == len(failed)
    assert sum(s["errors"]["by_kind"].values()) == len(failed)
    assert len(load_jsonl(out / "trajectories.jsonl")) == 8
