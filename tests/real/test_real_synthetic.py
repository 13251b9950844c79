"""The synthetic kind against the real vLLM: exact prompt lengths with the model's tokenizer,
output lengths enforced by ignore_eos and min_tokens, no accidental prefix-cache hits."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from agentload.results.jsonl import load_jsonl

pytestmark = pytest.mark.real


def test_synthetic_lengths_on_vllm(vllm_server: Any, tiny_model: Path, tmp_path: Path) -> None:
    out = tmp_path / "run"
    args = [sys.executable, "-m", "agentload", "run", "--workload", "synthetic"]
    args += ["--base-url", vllm_server.base_url, "--model", vllm_server.model]
    args += ["--tokenizer", str(tiny_model / "tokenizer.json")]
    args += ["--input-tokens", "uniform:100-300", "--output-tokens", "24", "--num-requests", "8"]
    args += ["--concurrency", "4", "--progress", "off", "--no-report", "--out", str(out)]
    r = subprocess.run(args, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    calls = {c["call_id"]: c for c in load_jsonl(out / "calls.jsonl")}
    assert len(calls) == 8 and all(c["status"] == "ok" for c in calls.values())
    overhead = set()
    for s in load_jsonl(out / "sessions.jsonl"):
        turn = s["synthetic"]["turns"][0]
        overhead.add(turn["prompt_tokens"] - turn["input_tokens"])
        assert turn["completion_tokens"] == 24  # ignore_eos and min_tokens: exactly max_tokens
    # Exact lengths: the server's count is the message plus the same template tokens each time.
    assert len(overhead) == 1 and 0 < overhead.pop() < 40
    assert all(c["cached_tokens"] == 0 for c in calls.values())
    meta = json.loads((out / "run.json").read_text())["synthetic"]
    assert meta["lengths"] == "exact" and meta["tokenizer"] == "tokenizer.json"
