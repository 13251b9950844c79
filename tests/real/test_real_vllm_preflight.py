"""Each new-user mistake against a real vLLM ends `agentload run` within seconds, with exit
code 2 and one line naming the role, the URL and the server's own words (the preflight)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from real_helpers import LOCKED_KEY as KEY
from real_helpers import MODEL_NAME, RealServer

from agentload.util import free_port

pytestmark = pytest.mark.real

# The bar: one clear message within 10 seconds.
LIMIT_S = 10.0


def _run(tmp_path: Path, base_url: str, model: str, **env: str) -> tuple[int, str, float]:
    clean = {k: v for k, v in os.environ.items() if k not in ("OPENAI_API_KEY", "VLLM_API_KEY")}
    t0 = time.monotonic()
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "agentload",
            "run",
            "--base-url",
            base_url,
            "--model",
            model,
            "--tasks",
            "airline/000",
            "--out",
            str(tmp_path / "run"),
            "--progress",
            "off",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env={**clean, **env},
    )
    return r.returncode, r.stderr, time.monotonic() - t0


def _one_error_line(stderr: str) -> str:
    lines = [ln for ln in stderr.splitlines() if "preflight" in ln and "agent" in ln]
    assert len(lines) == 1, stderr
    assert "Traceback" not in stderr
    return lines[0]


def test_wrong_model(vllm_server: RealServer, tmp_path: Path) -> None:
    code, err, took = _run(tmp_path, vllm_server.base_url, "wrong-model")
    assert code == 2, err
    line = _one_error_line(err)
    assert vllm_server.base_url in line
    assert "'wrong-model'" in line and "'tiny'" in line
    assert took < LIMIT_S


def test_bare_host_is_accepted(vllm_server: RealServer, tmp_path: Path) -> None:
    # No /v1: the preflight passes (the run itself is not the point here: --num-episodes 0
    # is not allowed, so a wrong model after the URL check shows the URL was understood).
    bare = vllm_server.base_url.removesuffix("/v1")
    code, err, _ = _run(tmp_path, bare, "wrong-model")
    assert code == 2
    assert "is not served here" in _one_error_line(err)


def test_dead_server(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{free_port()}/v1"
    code, err, took = _run(tmp_path, url, MODEL_NAME)
    assert code == 2, err
    line = _one_error_line(err)
    assert url in line and "cannot connect" in line
    assert took < LIMIT_S


def test_missing_key(locked_vllm: RealServer, tmp_path: Path) -> None:
    code, err, took = _run(tmp_path, locked_vllm.base_url, MODEL_NAME)
    assert code == 2, err
    line = _one_error_line(err)
    assert "401" in line and "OPENAI_API_KEY" in line
    assert KEY not in err
    assert took < LIMIT_S


def test_tools_not_enabled(locked_vllm: RealServer, tmp_path: Path) -> None:
    code, err, took = _run(tmp_path, locked_vllm.base_url, MODEL_NAME, OPENAI_API_KEY=KEY)
    assert code == 2, err
    line = _one_error_line(err)
    assert "tool" in line and "--enable-auto-tool-choice" in line
    assert KEY not in err and not any(
        KEY in p.read_text(errors="replace") for p in (tmp_path / "run").rglob("*") if p.is_file()
    )
    assert took < LIMIT_S
