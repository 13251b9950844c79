"""An external agent's episode is graded and recorded by the same function as a native one,
so its session and trajectory lines have the same form, down to the grader-failure record."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import agentload.domains.base as domains_base
from agentload.config import build_config
from agentload.domains import get_domain
from agentload.results.jsonl import load_jsonl
from agentload.runner import execute_run
from agentload.sim import SimConfig, SimServer

TASK = "airline/000"


@pytest.fixture
async def sim() -> Any:
    async with SimServer(SimConfig(port=0, profile="instant")) as server:
        yield server


def _shape(obj: Any) -> Any:
    """The nested keys of a record (what a reader of the line relies on), values aside."""
    if isinstance(obj, dict):
        return {k: _shape(v) for k, v in obj.items()}
    return None


async def _run(out: Path, sim: SimServer, external: dict[str, Any] | None) -> None:
    data: dict[str, Any] = {
        "out": str(out),
        "kind": "external" if external else "episodes",
        "endpoints": {"agent": {"base_url": sim.url, "model": sim.config.model}},
        "workload": {"tasks": [TASK], "user": "scripted"},
        "metrics": {"enabled": False},
        "preflight": False,
        "report": False,
    }
    if external:
        data["external"] = external
    await execute_run(build_config(data=data), progress="off", say=lambda _m: None)


def _line(out: Path, name: str) -> dict[str, Any]:
    (rec,) = list(load_jsonl(out / name))
    return rec


@pytest.mark.timeout(120)
async def test_a_grader_failure_is_recorded_alike(
    sim: SimServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(*_a: Any, **_k: Any) -> str:
        raise RuntimeError("grader broke")

    monkeypatch.setattr(domains_base, "gold_hash", broken)
    native, ext = tmp_path / "native", tmp_path / "ext"
    await _run(native, sim, None)
    # An agent command that answers nothing: the episode ends at once, and is still graded.
    await _run(ext, sim, {"adapter": "command", "command": "true"})
    required = list(get_domain("airline").get_task(TASK).required_outputs)
    for out in (native, ext):
        s, t = _line(out, "sessions.jsonl"), _line(out, "trajectories.jsonl")
        assert s["reward"] == 0.0 and t["grade"]["error"] == "RuntimeError('grader broke')"
        assert s["reward_breakdown"] == {
            "db_match": False,
            "outputs_ok": False,
            "missing_outputs": required,
        }
        assert t["grade"]["missing_outputs"] == required
    assert _line(ext, "sessions.jsonl")["agent"] == "external:command"
    for name in ("sessions.jsonl", "trajectories.jsonl"):
        assert _shape(_line(ext, name)) == _shape(_line(native, name)), name
