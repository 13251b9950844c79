"""Runs over worker processes (`--workers N`) on the embedded simulator: the same records as
one process, each session once, a killed worker's sessions run again, resume and Ctrl-C."""

from __future__ import annotations

import asyncio
import json
import multiprocessing as mp
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

from agentload.config import build_config
from agentload.distributed.shares import split_evenly
from agentload.results.jsonl import load_jsonl
from agentload.runner import execute_run
from replay_fixture import write_dataset

AGENTLOAD = str(Path(sys.executable).parent / "agentload")
FAST = {"sim": {"profile": "tiny-cpu", "speedup": 50.0}, "metrics": {"interval_s": 0.5}}
PAIRS = {(f"airline/{i:03d}", t) for i in range(6) for t in range(2)}


def _cfg(out: Path, workers: int | str, **load: Any) -> Any:
    return build_config(
        data={
            "out": str(out),
            **FAST,
            "workload": {"tasks": ["airline/000-005"], "trials": 2},
            "load": {"concurrency": 4, "warmup": 2, "workers": workers, **load},
            "report": False,
        }
    )


def _measured(out: Path) -> list[dict[str, Any]]:
    return [s for s in load_jsonl(out / "sessions.jsonl") if not s.get("warmup")]


def _check_records(out: Path) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Each (task, trial) once, each session id once, each committed session's calls all
    there; returns (sessions, calls)."""
    sessions = load_jsonl(out / "sessions.jsonl")
    calls = load_jsonl(out / "calls.jsonl")
    ids = [s["session_id"] for s in sessions]
    assert len(ids) == len(set(ids))
    assert len({c["call_id"] for c in calls}) == len(calls)
    per_session = Counter(c["session_id"] for c in calls)
    for s in sessions:
        n = s["counts"]["agent_calls"] + s["counts"].get("user_calls", 0)
        assert per_session[s["session_id"]] == n, s["session_id"]
    keys = [(s["task_id"], s["trial"]) for s in _measured(out)]
    assert len(keys) == len(set(keys))
    return sessions, calls


def test_split_evenly() -> None:
    assert split_evenly(10, 3) == [4, 3, 3]
    assert split_evenly(2, 4) == [1, 1, 0, 0]
    assert sum(split_evenly(1001, 7)) == 1001


async def test_two_workers_record_every_session_once(tmp_path: Path) -> None:
    said: list[str] = []
    res = await execute_run(
        _cfg(tmp_path / "two", 2), progress="off", say=said.append, install_signals=False
    )
    assert res.exit_code == 0, (res.message, said)
    sessions, calls = _check_records(tmp_path / "two")
    assert {(s["task_id"], s["trial"]) for s in _measured(tmp_path / "two")} == PAIRS
    assert len(sessions) == 14  # 12 measured + 2 warmup
    assert len(load_jsonl(tmp_path / "two" / "trajectories.jsonl")) == 14
    summary = json.loads((tmp_path / "two" / "summary.json").read_text())
    assert summary["counts"]["sessions"] == 12 and summary["counts"]["unfinished_calls"] == 0
    client = summary["client"]
    workers = client["workers"]
    assert [w["worker"] for w in workers] == [0, 1]
    assert sum(w["sessions"] for w in workers) == 14
    assert sum(w["calls"] for w in workers) == len(calls)
    for w in workers:
        assert w["sessions"] > 0 and w["cpu_s"] > 0 and w["pid"] != os.getpid()
        assert w["event_loop_lag_s"]["p99"] is not None and w["exit"] == "done"
    assert client["cpu_s_all_processes"] > client["cpu_s"] > 0
    # The driver's own CPU time is read once for both figures.
    assert client["cpu_s_all_processes"] == client["cpu_s"] + sum(w["cpu_s"] for w in workers)
    assert client["episodes_finished"] == 14 and client["max_active"] <= 4


async def test_replay_over_two_workers_sends_what_one_process_sends(tmp_path: Path) -> None:
    data = write_dataset(tmp_path / "d.jsonl", 12)
    calls = []
    for n in (1, 2):
        cfg = build_config(
            data={
                "out": str(tmp_path / f"run{n}"),
                "kind": "replay",
                "replay": {"dataset": str(data)},
                "sim": {"profile": "instant"},
                "load": {"concurrency": 3, "workers": n},
                "metrics": {"enabled": False},
                "report": False,
            }
        )
        res = await execute_run(cfg, progress="off", say=lambda _m: None, install_signals=False)
        assert res.exit_code == 0, res.message
        sessions, got = _check_records(tmp_path / f"run{n}")
        assert len(sessions) == 12
        calls.append(sorted(c["call_id"].split("-", 3)[-1] for c in got))
    assert calls[0] == calls[1] and len(calls[0]) > 12
    client = json.loads((tmp_path / "run2" / "summary.json").read_text())["client"]
    assert len(client["workers"]) == 2 and sum(w["sessions"] for w in client["workers"]) == 12
    one = json.loads((tmp_path / "run1" / "summary.json").read_text())["client"]
    assert "workers" not in one


async def test_a_killed_worker_has_its_sessions_run_again(tmp_path: Path) -> None:
    out = tmp_path / "run"
    said: list[str] = []

    async def kill_one() -> None:
        while True:
            await asyncio.sleep(0.05)
            path = out / "sessions.jsonl"
            if path.exists() and path.read_bytes().count(b"\n") >= 3:
                break
        victim = next(p for p in mp.active_children() if p.name == "agentload-worker-0")
        os.kill(victim.pid or 0, signal.SIGKILL)

    killer = asyncio.ensure_future(kill_one())
    res = await execute_run(
        _cfg(out, 2, warmup=0), progress="off", say=said.append, install_signals=False
    )
    killer.cancel()
    assert res.exit_code == 0, (res.message, said)
    assert any("worker 0 exited (exit status -9)" in m for m in said), said
    sessions, calls = _check_records(out)
    assert {(s["task_id"], s["trial"]) for s in sessions} == PAIRS  # 0 lost
    redone = [s["session_id"] for s in sessions if "-redo1" in s["session_id"]]
    assert redone, "the killed worker held sessions in flight"
    # The lost attempts' calls stay as calls of sessions that never finished.
    done = {s["session_id"] for s in sessions}
    lost = {c["session_id"] for c in calls} - done
    assert {f"{sid}" for sid in lost} <= {sid.removesuffix("-redo1") for sid in redone}
    workers = json.loads((out / "summary.json").read_text())["client"]["workers"]
    assert [w["exit"] for w in workers] == ["exit status -9", "done", "done"]


def _spawn(args: list[str], out: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [AGENTLOAD, "run", "--out", str(out), "--progress", "plain", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )


def _wait_sessions(out: Path, n: int, proc: subprocess.Popen[bytes], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    path = out / "sessions.jsonl"
    while time.monotonic() < deadline:
        if path.exists() and path.read_bytes().count(b"\n") >= n:
            return
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.05)
    raise AssertionError("the run made no progress")


def test_sigint_then_resume_over_workers(tmp_path: Path) -> None:
    out = tmp_path / "run"
    args = ["--tasks", "airline/000-009", "--trials", "2", "-c", "4", "--workers", "2"]
    proc = _spawn([*args, "--sim-speedup", "20", "--drain-timeout", "20s"], out)
    _wait_sessions(out, 3, proc)
    os.killpg(proc.pid, signal.SIGINT)  # as a terminal does: workers get it too
    _, stderr = proc.communicate(timeout=90)
    assert proc.returncode == 130, stderr
    assert b"no new episodes" in stderr
    summary = json.loads((out / "summary.json").read_text())
    assert summary["client"]["stop_reason"] == "interrupted"
    assert summary["client"]["episodes_cancelled"] == 0  # drained, nothing cut off
    sessions, _ = _check_records(out)
    assert summary["counts"]["sessions"] == len(sessions) < 20
    assert summary["counts"]["unfinished_calls"] == 0
    assert len(summary["client"]["workers"]) == 2

    r = subprocess.run(
        [AGENTLOAD, "run", "--resume", str(out), "--quiet"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    _check_records(out)
    keys = {(s["task_id"], s["trial"]) for s in _measured(out)}
    assert keys == {(f"airline/{i:03d}", t) for i in range(10) for t in range(2)}
    assert json.loads((out / "summary.json").read_text())["counts"]["sessions"] == 20


async def test_open_loop_rate_is_split_across_workers(tmp_path: Path) -> None:
    data = write_dataset(tmp_path / "d.jsonl", 16)
    cfg = build_config(
        data={
            "out": str(tmp_path / "run"),
            "kind": "replay",
            "replay": {"dataset": str(data)},
            "sim": {"profile": "instant"},
            "load": {"rate": 8.0, "max_concurrency": 4, "workers": 2},
            "metrics": {"enabled": False},
            "report": False,
        }
    )
    res = await execute_run(cfg, progress="off", say=lambda _m: None, install_signals=False)
    assert res.exit_code == 0, res.message
    sessions, _ = _check_records(tmp_path / "run")
    assert len(sessions) == 16
    client = json.loads((tmp_path / "run" / "summary.json").read_text())["client"]
    assert client["rate_target"] == 8.0 and client["max_active"] <= 4
    # Two arrival processes of 4/s each: together about 8/s (16 arrivals: a loose bound).
    assert 3.0 < client["rate_offered"] < 20.0
    assert [w["sessions"] > 0 for w in client["workers"]] == [True, True]
