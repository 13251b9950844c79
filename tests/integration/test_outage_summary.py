"""A run whose endpoint went down: episodes that ended on infrastructure errors are counted
apart, not as task failures (docs/reliability.md, "Outages")."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import orjson
import pytest

from agentload import runner as runner_mod
from agentload.config import build_config
from agentload.results.jsonl import load_jsonl
from agentload.results.summary import summarize
from agentload.runner import execute_run


async def _wait_sessions(out: Path, n: int, timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        path = out / "sessions.jsonl"
        if path.exists() and path.read_bytes().count(b"\n") >= n:
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"fewer than {n} sessions after {timeout_s} s")


async def test_infra_error_episodes_are_left_out_of_success(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    started: list[Any] = []
    real_start = runner_mod.start_embedded_sim

    def capture(cfg: Any, log_path: Any) -> Any:
        sim = real_start(cfg, log_path)
        started.append(sim)
        return sim

    monkeypatch.setattr(runner_mod, "start_embedded_sim", capture)
    out = tmp_path / "outage"
    data = {
        "out": str(out),
        "sim": {"profile": "instant"},
        # The oracle agent solves every task: each success is certain, so any shortfall in
        # the success rate could only come from the infrastructure.
        "workload": {"tasks": ["airline"], "trials": 2, "agent": "oracle", "user": "llm"},
        "load": {"concurrency": 8, "num_episodes": 40, "retry_infra": 0},
        "metrics": {"enabled": False},
        "report": False,
    }
    run = asyncio.create_task(
        execute_run(
            build_config(data=data), progress="off", say=lambda _m: None, install_signals=False
        )
    )
    await _wait_sessions(out, 8)
    started[0].proc.kill()  # the engine goes away for good, episodes in flight with it
    res = await asyncio.wait_for(run, 120)
    assert res.exit_code == 1

    sessions = [s for s in load_jsonl(out / "sessions.jsonl") if not s.get("warmup")]
    infra = [s for s in sessions if s["termination"] == "infra_error"]
    finished = [s for s in sessions if s["termination"] != "infra_error"]
    assert infra and finished
    wins = sum(1 for s in finished if (s.get("reward") or 0) >= 1.0)
    assert wins == len(finished)  # the oracle agent

    for ep in (
        summarize(out).dump()["episodes"],
        orjson.loads((out / "summary.json").read_bytes())["episodes"],
    ):
        assert ep["success_rate"] == pytest.approx(1.0)
        assert ep["episodes"] == len(sessions)
        assert ep["graded_episodes"] == len(finished)
        assert ep["infra_error"]["episodes"] == len(infra)
        assert ep["successes"] == wins
        assert ep["pass_hat_k"]["1"] == pytest.approx(1.0)
        assert ep["mean_reward"] == pytest.approx(1.0)
        assert ep["terminations"]["infra_error"] == len(infra)  # still shown, apart
        assert ep["by_domain"]["airline"]["success_rate"] == pytest.approx(1.0)
