"""A short `agentload run` against the real vLLM, with its /metrics scraped."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from agentload.results.jsonl import load_jsonl

pytestmark = pytest.mark.real


def test_short_run_with_metrics_scraping(vllm_server: Any, tmp_path: Path) -> None:
    out = tmp_path / "run"
    cfg = {
        "out": str(out),
        "endpoints": {
            "agent": {
                "base_url": vllm_server.base_url,
                "model": vllm_server.model,
                "metrics_url": vllm_server.metrics_url,
                # The random model never stops on its own: short answers keep the run short.
                # Sampling is left to the server (no seed is sent): the default path.
                "max_tokens": 16,
            }
        },
        "workload": {"tasks": ["airline/000-001"], "max_steps": 4, "max_user_turns": 2},
        "load": {"concurrency": 2},
        "metrics": {"interval_s": 1.0},
    }
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(cfg))
    r = subprocess.run(
        [sys.executable, "-m", "agentload", "run", "--config", str(path), "--progress", "off"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr
    calls = load_jsonl(out / "calls.jsonl")
    assert len(calls) >= 4
    assert all(c["status"] == "ok" for c in calls), {c["error_kind"] for c in calls}
    assert {c["role"] for c in calls} == {"agent", "user"}
    # Token counts come from the server's usage, cached tokens included.
    assert all(not c["tokens_estimated"] for c in calls)
    assert all(c["cached_tokens"] is not None for c in calls)
    assert sum(c["cached_tokens"] for c in calls) > 0
    summary = json.loads((out / "summary.json").read_text())
    server = summary["server"]["endpoints"]["agent"]
    assert server["engine"] == "vllm"
    assert server["samples"] >= 2 and server["failed_scrapes"] == 0
    assert 0 < server["prefix_cache_hit_rate"] <= 1
    assert server["ttft_mean_s"] is not None and server["ttft_mean_s"] > 0
    assert len(load_jsonl(out / "sessions.jsonl")) == 2
