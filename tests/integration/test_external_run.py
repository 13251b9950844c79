"""The `external` workload kind end to end: airline episodes solved by agentload's reference
external agent (openai SDK + MCP client) through the `command` and `openai-agent` adapters,
its model calls going through the recording proxy to the simulator, its tools served by the
tool server, graded; and the same run's records compared in form with a native run's."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from typer.testing import CliRunner

from agentload.cli import app
from agentload.config import ConfigError, build_config
from agentload.domains import get_domain
from agentload.results.jsonl import load_jsonl
from agentload.runner import execute_run
from agentload.sim import SimConfig, SimServer

TASKS = ["airline/000", "airline/001"]


def _quiet(_msg: str) -> None:
    pass


@pytest.fixture
async def sim() -> Any:
    """The simulator playing an agent that never slips: every episode of a capable agent
    is solved, so a reward below 1 is the harness's fault."""
    cfg = SimConfig(port=0, profile="instant", behaviour_options={"agent_skill": 1.0})
    async with SimServer(cfg) as server:
        yield server


def _cfg(out: Path, sim: SimServer, tasks: list[str], **external: Any) -> Any:
    data: dict[str, Any] = {
        "out": str(out),
        "kind": "external" if external else "episodes",
        "endpoints": {"agent": {"base_url": sim.url, "model": sim.config.model}},
        "workload": {"tasks": tasks, "user": "llm"},
        "load": {"concurrency": 2},
        "metrics": {"enabled": False},
        "preflight": False,
    }
    if external:
        data["external"] = external
    return build_config(data=data)


async def _run(cfg: Any) -> Any:
    return await execute_run(cfg, progress="off", say=_quiet, install_signals=False)


def _read(out: Path, name: str) -> list[dict[str, Any]]:
    return list(load_jsonl(out / name))


def _check_solved(out: Path, tasks: list[str], adapter: str) -> None:
    sessions = {s["task_id"]: s for s in _read(out, "sessions.jsonl")}
    assert sorted(sessions) == tasks
    calls = _read(out, "calls.jsonl")
    for task, s in sessions.items():
        assert s["agent"] == f"external:{adapter}"
        assert s["termination"] == "user_stop", s["error"]
        assert s["reward"] == 1.0 and s["reward_breakdown"]["db_match"] is True, task
        mine = [c for c in calls if c["session_id"] == s["session_id"]]
        agent = [c for c in mine if c["role"] == "agent"]
        user = [c for c in mine if c["role"] == "user"]
        # Every model call the agent made went through the proxy and is in the run's calls,
        # measured like a native call; the user simulator's calls are native ones.
        assert len(agent) == s["counts"]["agent_calls"] >= 2
        assert len(user) == s["counts"]["user_calls"] == s["counts"]["user_turns"] >= 2
        assert [c["turn"] for c in agent] == list(range(len(agent)))
        assert all(c["status"] == "ok" and c["ttft_s"] > 0 for c in agent)
        assert all(c["prompt_tokens"] > 0 and c["completion_tokens"] > 0 for c in agent)
        assert {c["call_id"] for c in agent} == {
            f"{s['session_id']}:a{i}" for i in range(len(agent))
        }
        assert sum(c["num_tool_calls"] for c in agent) == s["counts"]["tool_calls"] >= 1
    trajectories = {t["task_id"]: t for t in _read(out, "trajectories.jsonl")}
    for task, t in trajectories.items():
        roles = [m["role"] for m in t["messages"]]
        assert roles[0] == "system" and "tool" in roles and roles[-1] == "assistant"
        assert any(m.get("tool_calls") for m in t["messages"] if m["role"] == "assistant")
        # The tools the agent offered its model are the domain's, as the tool server gave them.
        offered = {x["function"]["name"] for x in t["tools"]}
        assert offered == {tool.name for tool in get_domain("airline").tools}
        assert t["reward"] == 1.0 and t["grade"]["db_match"] is True, task
    summary = json.loads((out / "summary.json").read_text())
    assert summary["episodes"]["success_rate"] == 1.0
    assert summary["episodes"]["pass_hat_k"] == {"1": 1.0}
    by_role = summary["calls"]["by_role"]
    assert set(by_role) == {"agent", "user"}
    assert by_role["agent"]["calls"] == len([c for c in calls if c["role"] == "agent"])


@pytest.mark.slow
@pytest.mark.timeout(300)
async def test_reference_agent_through_the_command_adapter(sim: SimServer, tmp_path: Path) -> None:
    out = tmp_path / "ext"
    # No command: the reference agent is the command adapter's default.
    outcome = await _run(_cfg(out, sim, TASKS, adapter="command"))
    assert outcome.exit_code == 0
    _check_solved(out, TASKS, "command")
    run = json.loads((out / "run.json").read_text())
    assert run["kind"] == "external" and run["external"] == {"adapter": "command"}
    # `agentload report` renders the folder like a native run's.
    assert (out / "report.md").exists()
    res = CliRunner().invoke(app, ["report", str(out)])
    assert res.exit_code == 0, res.output
    report = (out / "report.md").read_text()
    assert "agent" in report and "user" in report and "100.0%" in report

    # Indistinguishable in form from a native run of the same tasks.
    native = tmp_path / "native"
    assert (await _run(_cfg(native, sim, TASKS))).exit_code == 0
    for name in ("sessions.jsonl", "trajectories.jsonl", "calls.jsonl"):
        ext_keys = {k for r in _read(out, name) for k in r}
        nat_keys = {k for r in _read(native, name) for k in r}
        assert ext_keys == nat_keys, (name, ext_keys ^ nat_keys)
    ext_sum = json.loads((out / "summary.json").read_text())
    nat_sum = json.loads((native / "summary.json").read_text())
    assert set(ext_sum["episodes"]) == set(nat_sum["episodes"])


@pytest.mark.timeout(180)
async def test_reference_agent_served_through_the_openai_agent_adapter(
    sim: SimServer, tmp_path: Path
) -> None:
    from agentload.external.reference_agent import agent_app

    runner = web.AppRunner(agent_app())
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        out = tmp_path / "ext"
        cfg = _cfg(out, sim, TASKS[:1], adapter="openai-agent", url=f"http://127.0.0.1:{port}")
        assert (await _run(cfg)).exit_code == 0
    finally:
        await runner.cleanup()
    _check_solved(out, TASKS[:1], "openai-agent")


@pytest.mark.parametrize(
    ("command", "turn_timeout", "error"),
    [
        ("sh -c 'echo boom >&2; exit 3'", 30, "exited with status 3: boom"),
        ("sh -c 'sleep 30'", 0.5, "longer than 0.5 s"),
        ("true", 30, "printed no reply"),
        ("/nonexistent/agent", 30, "cannot start the agent command"),
    ],
)
async def test_a_failing_agent_ends_its_episode_with_the_reason(
    sim: SimServer, tmp_path: Path, command: str, turn_timeout: float, error: str
) -> None:
    out = tmp_path / "ext"
    cfg = _cfg(out, sim, TASKS[:1], adapter="command", command=command, turn_timeout_s=turn_timeout)
    await _run(cfg)
    (s,) = _read(out, "sessions.jsonl")
    assert s["termination"] == "protocol_error"
    assert error in s["error"] and s["reward"] == 0.0
    assert s["counts"]["agent_calls"] == 0 and s["counts"]["user_calls"] == 1


@pytest.mark.parametrize(
    ("external", "message"),
    [
        ({"adapter": "nope"}, "unknown adapter 'nope' (known: command, openai-agent, openclaw)"),
        ({"adapter": "command", "command": "agent {bogus}"}, "unknown placeholder {bogus}"),
        ({"adapter": "openai-agent"}, "needs the agent's http(s) URL"),
    ],
)
def test_bad_adapter_settings_are_refused_before_the_run(
    tmp_path: Path, external: dict[str, Any], message: str
) -> None:
    from agentload.workloads.base import make_workload

    cfg = build_config(data={"out": str(tmp_path / "r"), "kind": "external", "external": external})
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        make_workload(cfg)
    assert not (tmp_path / "r").exists()


def test_cli_refuses_an_unknown_adapter_with_one_line(tmp_path: Path) -> None:
    res = CliRunner().invoke(
        app,
        [
            "run",
            "--workload",
            "external",
            "--agent-adapter",
            "nope",
            "--out",
            str(tmp_path / "r"),
            "-q",
        ],
    )
    assert res.exit_code == 2
    assert "unknown adapter 'nope'" in res.output
    assert "Traceback" not in res.output
