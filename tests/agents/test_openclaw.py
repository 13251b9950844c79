"""OpenClaw end to end (`make test-openclaw`): Node 24 and OpenClaw installed with npm into a
cache folder, then airline episodes solved by OpenClaw with agentload's tools (MCP), its model
calls going through the proxy to the embedded simulator, recorded and graded.

Needs npm and the npm registry. AGENTLOAD_OPENCLAW_CACHE (default ~/.cache/agentload/openclaw)
keeps the install between runs; AGENTLOAD_OPENCLAW_VERSION picks the version (default: the
one docs/external-agents.md describes). Each OpenClaw turn starts Node and OpenClaw afresh
(tens of seconds on a loaded machine), hence the long timeout and the few episodes.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from agentload.config import build_config
from agentload.results.jsonl import load_jsonl
from agentload.runner import execute_run

pytestmark = pytest.mark.openclaw

VERSION = os.environ.get("AGENTLOAD_OPENCLAW_VERSION", "2026.9.6")
NODE = "24.21.0"  # OpenClaw needs Node >= 24.16 < 25
TASKS = ["airline/000", "airline/001"]


def _npm(prefix: Path, spec: str, path: str) -> None:
    env = {**os.environ, "PATH": path}
    subprocess.run(
        ["npm", "install", "--prefix", str(prefix), "--no-audit", "--no-fund", spec],
        check=True,
        env=env,
        capture_output=True,
        timeout=900,
    )


@pytest.fixture(scope="module")
def openclaw() -> tuple[str, str]:
    """(the openclaw executable, a PATH whose `node` runs it), installed with npm."""
    if shutil.which("npm") is None:
        pytest.skip("npm is not installed")
    cache = Path(
        os.environ.get("AGENTLOAD_OPENCLAW_CACHE", Path.home() / ".cache/agentload/openclaw")
    )
    node_bin = cache / "node" / "node_modules" / ".bin"
    if not (node_bin / "node").exists():
        _npm(cache / "node", f"node@{NODE}", os.environ["PATH"])
    path = f"{node_bin}{os.pathsep}{os.environ['PATH']}"
    claw = cache / f"openclaw-{VERSION}" / "node_modules" / ".bin" / "openclaw"
    if not claw.exists():
        _npm(cache / f"openclaw-{VERSION}", f"openclaw@{VERSION}", path)
    out = subprocess.run(
        [str(claw), "--version"], env={**os.environ, "PATH": path}, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    return str(claw), path


def _quiet(_msg: str) -> None:
    pass


@pytest.mark.timeout(3600)
async def test_openclaw_solves_airline_episodes(openclaw: tuple[str, str], tmp_path: Path) -> None:
    claw, path = openclaw
    out = tmp_path / "results"
    cfg = build_config(
        data={
            "out": str(out),
            "kind": "external",
            "external": {
                "adapter": "openclaw",
                "openclaw": claw,
                "turn_timeout_s": 600,
                "env": {"PATH": path, "HOME": str(tmp_path / "home")},
            },
            # A simulated agent that never slips: a lost episode is the harness's fault.
            "sim": {"profile": "instant", "behaviour_options": {"agent_skill": 1.0}},
            "workload": {"tasks": TASKS},
            "load": {"concurrency": 2},
            "metrics": {"enabled": False},
        }
    )
    outcome = await execute_run(cfg, progress="off", say=_quiet, install_signals=False)
    assert outcome.exit_code == 0
    sessions: list[dict[str, Any]] = list(load_jsonl(out / "sessions.jsonl"))
    calls = list(load_jsonl(out / "calls.jsonl"))
    assert sorted(s["task_id"] for s in sessions) == TASKS
    for s in sessions:
        assert s["agent"] == "external:openclaw"
        assert s["termination"] == "user_stop", s["error"]
        assert s["reward"] == 1.0, s
        agent = [c for c in calls if c["session_id"] == s["session_id"] and c["role"] == "agent"]
        assert len(agent) == s["counts"]["agent_calls"] >= 2
        assert s["counts"]["tool_calls"] >= 1
    for t in load_jsonl(out / "trajectories.jsonl"):
        # OpenClaw offered its model the domain's tools, under its MCP server prefix, only.
        names = {x["function"]["name"] for x in t["tools"]}
        assert names and all(n.startswith("airline__") for n in names), names
        assert any(m["role"] == "tool" for m in t["messages"])
    summary = json.loads((out / "summary.json").read_text())
    assert summary["episodes"]["success_rate"] == 1.0
    assert (out / "report.md").exists()
