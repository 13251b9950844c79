"""τ²-bench episodes (airline and telecom, τ²'s own prompts and tools) against the real
vLLM: the run finishes, every call is measured from the server's usage, the prefix cache
serves τ²'s static prompt, and the summary holds rewards, terminations and server figures."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from agentload.domains import get_domain
from agentload.domains.tau2 import configure
from agentload.results.jsonl import load_jsonl

pytestmark = pytest.mark.real


def test_tau2_airline_and_telecom_on_vllm(
    vllm_server: Any, tmp_path: Path, tau2_data: Path
) -> None:
    configure(tau2_data, "base")
    telecom = [t.id for t in get_domain("tau2-telecom").tasks()[:2]]
    out = tmp_path / "run"
    cfg = {
        "out": str(out),
        "endpoints": {
            "agent": {
                "base_url": vllm_server.base_url,
                "model": vllm_server.model,
                "metrics_url": vllm_server.metrics_url,
                # The random model never stops on its own: short answers keep the run short.
                "max_tokens": 16,
            }
        },
        "workload": {
            "tasks": ["tau2-airline/0-1", *telecom],
            "tau2": {"data": str(tau2_data), "max_steps": 8},
        },
        "load": {"concurrency": 2},
        "metrics": {"interval_s": 1.0},
    }
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(cfg))
    r = subprocess.run(
        [sys.executable, "-m", "agentload", "run", "--config", str(path), "--progress", "off"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    # 0, or 3 when no episode succeeded (the random model solves nothing).
    assert r.returncode in (0, 3), r.stderr[-3000:]
    calls = load_jsonl(out / "calls.jsonl")
    assert all(c["status"] == "ok" for c in calls), {c["error_kind"] for c in calls}
    assert {c["role"] for c in calls} == {"agent", "user"}
    assert all(not c["tokens_estimated"] for c in calls)
    agent = [c for c in calls if c["role"] == "agent"]
    # τ²'s policy and tool schemas make a long static prefix, which the engine caches.
    assert min(c["prompt_tokens"] for c in agent) > 1000
    assert sum(c["cached_tokens"] for c in agent) > 0
    sessions = load_jsonl(out / "sessions.jsonl")
    assert sorted(s["task_id"] for s in sessions) == sorted(
        ["tau2-airline/0", "tau2-airline/1", *telecom]
    )
    assert all(s["grader_version"] == "tau2-1" for s in sessions)
    assert all(s["termination"] in ("user_stop", "max_steps", "too_many_errors") for s in sessions)
    summary = json.loads((out / "summary.json").read_text())
    ep = summary["episodes"]
    assert set(ep["by_domain"]) == {"tau2-airline", "tau2-telecom"}
    assert sum(ep["terminations"].values()) == 4 and ep["mean_reward"] is not None
    server = summary["server"]["endpoints"]["agent"]
    assert server["engine"] == "vllm" and server["samples"] >= 1
    traj = load_jsonl(out / "trajectories.jsonl")
    assert all(t["tau2"]["messages"][0]["content"] == "Hi! How can I help you today?" for t in traj)
    report = (out / "report.md").read_text()
    assert "tau2-telecom" in report and "Episodes" in report
