"""Outages for real: a simulator killed in the middle of a run (and restarted, or not)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import Counter
from pathlib import Path
from typing import Any

import orjson
import pytest

from agentload import runner as runner_mod
from agentload.config import build_config
from agentload.results.jsonl import load_jsonl
from agentload.results.records import Summary
from agentload.runner import execute_run
from agentload.sim import SimConfig, SimProcess


def _quiet(_msg: str) -> None:
    pass


def _measured(out: Path) -> list[dict[str, Any]]:
    return [s for s in load_jsonl(out / "sessions.jsonl") if not s.get("warmup")]


async def _wait_sessions(out: Path, n: int, timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        path = out / "sessions.jsonl"
        if path.exists() and path.read_bytes().count(b"\n") >= n:
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"fewer than {n} sessions after {timeout_s} s")


async def test_standalone_server_down_for_4s_burns_no_episode(tmp_path: Path) -> None:
    sim = SimProcess(SimConfig(port=0, profile="instant"))
    await asyncio.to_thread(sim.start)
    port = sim.port
    out = tmp_path / "outage"
    cfg = build_config(
        data={
            "out": str(out),
            "endpoints": {
                "agent": {
                    "base_url": sim.base_url,
                    "model": sim.config.model,
                    "timeouts": {"connect": 2},
                    "retry": {"backoff_base": 0.1, "backoff_max": 0.5},
                }
            },
            # The oracle agent needs no model: every call is the user's, so episodes are
            # quick and the run is long enough to kill the server in its middle.
            "workload": {"tasks": ["airline"], "trials": 8, "agent": "oracle", "user": "llm"},
            "load": {"concurrency": 8, "num_episodes": 120},
            "metrics": {"enabled": False},
            "report": False,
        }
    )
    said: list[str] = []
    run = asyncio.create_task(
        execute_run(cfg, progress="off", say=said.append, install_signals=False)
    )
    restarted: SimProcess | None = None
    try:
        await _wait_sessions(out, 30)
        await asyncio.to_thread(sim.proc.kill)  # type: ignore[union-attr]
        down_at = time.monotonic()
        await asyncio.sleep(4.0)
        restarted = SimProcess(SimConfig(port=port, profile="instant"))
        await asyncio.to_thread(restarted.start)
        up_after = time.monotonic() - down_at
        res = await asyncio.wait_for(run, 300)
    finally:
        sim.stop()
        if restarted is not None:
            restarted.stop()
    assert res.exit_code == 0, res.stop_reason
    sessions = _measured(out)
    terms = Counter(s["termination"] for s in sessions)
    assert len(sessions) == 120
    assert terms.get("infra_error", 0) == 0, terms  # 0 burned
    keys = [(s["task_id"], s["trial"]) for s in sessions]
    assert len(set(keys)) == 120  # and no duplicates
    outages = res.summary.dump()["client"]["outages"]
    assert outages["count"] >= 1
    assert 2.0 <= outages["paused_s"] <= up_after + 5.0
    assert outages["episodes_retried"] >= 1
    assert any("endpoint outage" in m for m in said)
    assert any("answers again" in m for m in said)
    meta = orjson.loads((out / "run.json").read_bytes())
    assert meta["status"] == "completed" and meta["exit_code"] == 0


async def test_embedded_simulator_killed_for_good_stops_resumable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    started: list[Any] = []
    real_start = runner_mod.start_embedded_sim

    def capture(cfg: Any, log_path: Any) -> Any:
        sim = real_start(cfg, log_path)
        started.append(sim)
        return sim

    monkeypatch.setattr(runner_mod, "start_embedded_sim", capture)
    out = tmp_path / "dead"
    data = {
        "out": str(out),
        "sim": {"profile": "instant"},
        "workload": {"tasks": ["airline"], "trials": 2, "agent": "oracle", "user": "llm"},
        "load": {"concurrency": 4, "num_episodes": 40},
        "metrics": {"enabled": False},
        "report": False,
    }
    said: list[str] = []
    run = asyncio.create_task(
        execute_run(build_config(data=data), progress="off", say=said.append, install_signals=False)
    )
    await _wait_sessions(out, 8)
    started[0].proc.kill()
    t0 = time.monotonic()
    res = await asyncio.wait_for(run, 120)
    assert time.monotonic() - t0 < 30  # stops, does not wait for the outage limit
    assert res.exit_code == 1
    assert "embedded simulator exited" in res.stop_reason
    meta = orjson.loads((out / "run.json").read_bytes())
    assert meta["exit_code"] == 1 and meta["status"].startswith("failed: ")
    assert any("giving up" in m for m in said)
    done = len(_measured(out))
    assert 8 <= done < 40

    # Resumable: the rest runs, infra-failed episodes included, and nothing twice.
    res2 = await execute_run(
        build_config(data=data), resume=True, progress="off", say=_quiet, install_signals=False
    )
    assert res2.exit_code == 0, res2.stop_reason
    sessions = _measured(out)
    keys = [(s["task_id"], s["trial"]) for s in sessions]
    assert len(keys) == 40 and len(set(keys)) == 40
    assert not any(s["termination"] == "infra_error" for s in sessions)


# ---- honest outcomes ---------------------------------------------------------------------


async def _silent_server() -> tuple[asyncio.AbstractServer, int]:
    """Accepts connections and reads requests, but never answers."""
    conns: list[asyncio.StreamWriter] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conns.append(writer)
        with contextlib.suppress(Exception):
            while await reader.read(65536):
                pass

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1]


async def test_server_that_never_answers_with_duration_exits_1(tmp_path: Path) -> None:
    server, port = await _silent_server()
    out = tmp_path / "silent"
    cfg = build_config(
        data={
            "out": str(out),
            "endpoints": {
                "agent": {
                    "base_url": f"http://127.0.0.1:{port}/v1",
                    "model": "m",
                    "timeouts": {"first_token": 30},
                }
            },
            "workload": {"tasks": ["airline/000-003"]},
            "load": {"concurrency": 2, "duration_s": "1s", "drain_timeout_s": "0.5s"},
            # Preflight would refuse this server up front; the run's own verdict is tested.
            "preflight": False,
            "metrics": {"enabled": False},
            "report": False,
        }
    )
    try:
        res = await execute_run(cfg, progress="off", say=_quiet, install_signals=False)
    finally:
        server.close()
    assert res.exit_code == 1
    assert res.stop_reason == "failed: 0 episodes measured"
    meta = orjson.loads((out / "run.json").read_bytes())
    assert meta["status"] == "failed: 0 episodes measured" and meta["exit_code"] == 1


def _small(out: Path, **extra: Any) -> Any:
    data: dict[str, Any] = {
        "out": str(out),
        "sim": {"profile": "tiny-cpu", "speedup": 50.0},
        "workload": {"tasks": ["airline/000-003"]},
        "load": {"concurrency": 4},
        "metrics": {"enabled": False},
        "report": False,
    }
    data.update(extra)
    return build_config(data=data)


async def test_every_call_a_context_overflow_exits_1(tmp_path: Path) -> None:
    out = tmp_path / "overflow"
    cfg = _small(
        out,
        sim={"profile": "tiny-cpu", "speedup": 50.0, "options": {"max_model_len": 16}},
        preflight=False,  # its test call would refuse this server up front
    )
    res = await execute_run(cfg, progress="off", say=_quiet, install_signals=False)
    assert res.exit_code == 1
    assert "every one of the" in res.stop_reason and "context_overflow" in res.stop_reason
    assert {s["termination"] for s in _measured(out)} == {"context_overflow"}
    meta = orjson.loads((out / "run.json").read_bytes())
    assert meta["exit_code"] == 1 and meta["status"] == res.stop_reason


async def test_summary_failure_is_a_failed_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:

    def broken(*a: Any, **k: Any) -> dict[str, Any]:
        raise TypeError("unsupported operand type(s) for +: 'int' and 'str'")

    monkeypatch.setattr(runner_mod, "summarize", broken)  # the runner's own name
    out = tmp_path / "nosummary"
    said: list[str] = []
    res = await execute_run(_small(out), progress="off", say=said.append, install_signals=False)
    assert res.exit_code == 1
    assert res.stop_reason.startswith("failed: the summary could not be computed: TypeError")
    meta = orjson.loads((out / "run.json").read_bytes())
    assert meta["status"] == res.stop_reason and meta["exit_code"] == 1
    assert any("the episodes ran, but the run failed" in m for m in said)
    assert len(_measured(out)) == 4  # the episodes themselves are kept


async def test_report_failure_is_a_failed_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import agentload.report as report_mod

    def broken(*a: Any, **k: Any) -> list[Path]:
        raise OSError(28, "No space left on device", "report.html")

    monkeypatch.setattr(report_mod, "write_report", broken)
    out = tmp_path / "noreport"
    res = await execute_run(
        _small(out, report=True), progress="off", say=_quiet, install_signals=False
    )
    assert res.exit_code == 1
    assert res.stop_reason == (
        "failed: the report could not be written: No space left on device (report.html)"
    )
    meta = orjson.loads((out / "run.json").read_bytes())
    assert meta["status"] == res.stop_reason
    summary = orjson.loads((out / "summary.json").read_bytes())
    assert summary["run"]["status"] == res.stop_reason  # summary and run.json agree


async def test_interrupt_while_the_summary_is_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import os
    import signal

    import agentload.results.summary as summary_mod

    real = summary_mod.summarize

    def interrupted(*a: Any, **k: Any) -> Summary:
        os.kill(os.getpid(), signal.SIGINT)  # as a Ctrl-C arriving during the summary
        return real(*a, **k)

    monkeypatch.setattr(runner_mod, "summarize", interrupted)  # the runner's own name
    out = tmp_path / "ctrlc"
    res = await execute_run(
        _small(out, report=True), progress="off", say=_quiet, install_signals=True
    )
    assert res.exit_code == 130 and res.stop_reason == "interrupted"
    meta = orjson.loads((out / "run.json").read_bytes())
    assert meta["status"] == "interrupted" and meta["exit_code"] == 130
    summary = orjson.loads((out / "summary.json").read_bytes())
    assert summary["run"]["status"] == "interrupted"
    assert summary["counts"]["sessions"] == 4
    assert not (out / "report.md").exists()  # skipped, and said so
