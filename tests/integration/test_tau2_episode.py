"""τ² episodes over real loopback HTTP against the embedded simulator: τ²'s orchestration
(greeting, stop markers, hidden user tool calls in telecom), its grading, the judge role,
and a whole `agentload run` with its summary."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from agentload.client import ChatClient, EndpointConfig, RetryPolicy
from agentload.domains import get_domain
from agentload.domains.tau2 import Tau2Domain, configure
from agentload.domains.tau2.prompts import GREETING
from agentload.sim import SimConfig, SimServer
from agentload.workloads import EpisodeOptions, EpisodeSpec, episode_seed, run_episode


@pytest.fixture(autouse=True)
def _data(tau2_data: Path) -> None:
    configure(tau2_data, "base")


@pytest.fixture
async def sim() -> AsyncIterator[SimServer]:
    cfg = SimConfig(port=0, profile="instant", behaviour_options={"agent_skill": 1.0})
    async with SimServer(cfg) as server:
        yield server


def endpoint(base_url: str) -> EndpointConfig:
    return EndpointConfig(
        base_url=base_url,
        model="agentload-sim",
        retry=RetryPolicy(max_attempts=2, backoff_base=0.01, backoff_max=0.02),
    )


def spec(task_id: str, trial: int = 0) -> EpisodeSpec:
    sid = f"s-{task_id.replace('/', '-')}-{trial}"
    return EpisodeSpec(task_id, trial, episode_seed(3, task_id, trial), sid)


def _domain(name: str) -> Tau2Domain:
    d = get_domain(name)
    assert isinstance(d, Tau2Domain)
    return d


async def test_oracle_and_scripted_user_score_one_without_a_model() -> None:
    d = _domain("tau2-airline")
    tasks = [t.id for t in d.tasks()[:12]]
    results = await asyncio.gather(
        *[run_episode(spec(t), {}, EpisodeOptions(agent="oracle", user="scripted")) for t in tasks]
    )
    for res in results:
        s, t = res.session, res.trajectory
        assert s["termination"] == "user_stop", s["error"]
        assert s["reward"] == 1.0, t["grade"]
        assert s["grader_version"] == "tau2-1" and s["data_version"].startswith("tau2-data:")
        msgs = t["tau2"]["messages"]
        assert msgs[0] == {"role": "assistant", "content": GREETING, "tool_calls": None}
        assert "###STOP###" in msgs[-1]["content"]
        gold = [a["name"] for a in d.get_task(s["task_id"]).tau2["evaluation_criteria"]["actions"]]
        made = [c["name"] for m in msgs for c in m.get("tool_calls") or ()]
        assert made == gold
        assert res.calls == []


async def test_noop_agent_scores_zero_on_a_writing_task() -> None:
    d = _domain("tau2-airline")
    task = next(t for t in d.tasks() if t.category == "multi_write")
    res = await run_episode(spec(task.id), {}, EpisodeOptions(agent="noop", user="scripted"))
    assert res.session["termination"] in ("user_stop", "max_steps")
    assert res.session["reward"] == 0.0


async def test_llm_roles_on_the_simulator_measure_every_call(sim: SimServer) -> None:
    records: list[Any] = []
    task = next(t for t in _domain("tau2-airline").tasks() if t.category == "multi_write")
    async with ChatClient(endpoint(sim.base_url), on_record=records.append) as c:
        res = await run_episode(spec(task.id), {"agent": c, "user": c}, EpisodeOptions())
    s, t = res.session, res.trajectory
    assert s["termination"] == "user_stop", s["error"]
    assert s["reward"] == 1.0, t["grade"]
    assert s["counts"]["agent_calls"] == sum(1 for r in res.calls if r.role == "agent") >= 3
    assert s["counts"]["user_calls"] == sum(1 for r in res.calls if r.role == "user") >= 2
    assert len(records) == len(res.calls)
    # The agent saw τ²'s system prompt and schemas, and the greeting before the customer.
    assert t["messages"][0]["content"].startswith("<instructions>\nYou are a customer service")
    assert t["messages"][1] == {"role": "assistant", "content": GREETING}
    assert t["tools"] == _domain("tau2-airline").tool_schemas()
    # The user simulator's prompt is τ²'s guidelines and the scenario.
    user_system = t["tau2"]["user_messages"][0]["content"]
    assert user_system.startswith("# User Simulation Guidelines")
    assert "<scenario>\nPersona:" in user_system or "<scenario>\nInstructions:" in user_system


async def test_telecom_user_tools_run_on_the_phone_and_stay_hidden(sim: SimServer) -> None:
    d = _domain("tau2-telecom")
    task = next(
        t
        for t in d.tasks()
        if any(a.get("requestor") == "user" for a in t.tau2["evaluation_criteria"]["actions"])
    )
    async with ChatClient(endpoint(sim.base_url)) as c:
        res = await run_episode(spec(task.id), {"agent": c, "user": c}, EpisodeOptions())
    s, t = res.session, res.trajectory
    assert s["termination"] == "user_stop", s["error"]
    assert s["reward"] == 1.0, t["grade"]
    assert s["counts"]["user_tool_calls"] >= 1
    user_calls = [
        c["name"]
        for m in t["tau2"]["messages"]
        if m["role"] == "user"
        for c in m.get("tool_calls") or ()
    ]
    assert user_calls and all(
        n in {u["function"]["name"] for u in t["tau2"]["user_tools"]} for n in user_calls
    )
    # The agent's own conversation holds none of the user's tool calls or their results.
    agent_calls = {c["function"]["name"] for m in t["messages"] for c in m.get("tool_calls") or ()}
    assert not agent_calls & set(user_calls)
    assert t["grade"]["reward_breakdown"].get("ENV_ASSERTION") == 1.0


async def test_judge_grades_nl_assertions_and_its_absence_is_partial(sim: SimServer) -> None:
    d = _domain("tau2-retail")
    task = next(t for t in d.tasks() if t.needs_judge)
    async with ChatClient(endpoint(sim.base_url)) as c:
        judged = await run_episode(
            spec(task.id), {"agent": c, "user": c, "judge": c}, EpisodeOptions()
        )
        alone = await run_episode(spec(task.id, 1), {"agent": c, "user": c}, EpisodeOptions())
    g = judged.trajectory["grade"]
    assert g["partial"] is False and g["reward_breakdown"]["NL_ASSERTION"] == 1.0
    nl = task.tau2["evaluation_criteria"]["nl_assertions"]
    assert [c["nl_assertion"] for c in g["nl_assertions"]] == nl
    assert sum(1 for r in judged.calls if r.role == "judge") == 1
    assert judged.session["counts"]["judge_calls"] == 1
    g2 = alone.trajectory["grade"]
    assert g2["partial"] is True and "NL_ASSERTION" not in g2["reward_breakdown"]
    assert alone.session["reward_partial"] is True and g2["judge"] == "no judge endpoint"


async def test_a_strict_judge_fails_the_task(tau2_data: Path) -> None:
    cfg = SimConfig(
        port=0,
        profile="instant",
        behaviour_options={"agent_skill": 1.0, "judge_strict": "Hi"},
    )
    task = next(t for t in _domain("tau2-retail").tasks() if t.needs_judge)
    async with SimServer(cfg) as server, ChatClient(endpoint(server.base_url)) as c:
        res = await run_episode(
            spec(task.id), {"agent": c, "user": c, "judge": c}, EpisodeOptions()
        )
    g = res.trajectory["grade"]
    assert g["reward_breakdown"]["NL_ASSERTION"] == 0.0 and res.session["reward"] == 0.0


def test_run_cli_summary(tmp_path: Path, tau2_data: Path) -> None:
    out = tmp_path / "r"
    cmd = [
        sys.executable, "-m", "agentload", "run", "--tasks", "tau2-mock,tau2-airline/0-5",
        "--tau2-data", str(tau2_data), "--concurrency", "4", "--sim-speedup", "50",
        "--out", str(out), "--json", "--progress", "off", "--no-report",
    ]  # fmt: skip
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=240)
    assert p.returncode in (0, 3), p.stderr[-2000:]
    summary = json.loads((out / "summary.json").read_text())
    ep = summary["episodes"]
    assert ep["episodes"] == 16 and set(ep["by_domain"]) == {"tau2-mock", "tau2-airline"}
    assert ep["terminations"].get("user_stop", 0) >= 12
    sessions = [json.loads(line) for line in (out / "sessions.jsonl").read_text().splitlines()]
    assert {s["data_version"] for s in sessions if s["domain"] == "tau2-airline"} == {
        _domain("tau2-airline").data_version
    }
    files = summary["run"]["tau2"]["files"]
    assert set(files["tau2-airline"]) >= {"airline/db.json", "airline/tasks.json"}
    assert all(len(h) == 64 for h in files["tau2-mock"].values())
    assert summary["run"]["tau2"]["judge"] is False
    r = subprocess.run(
        [sys.executable, "-m", "agentload", "report", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    report = (out / "report.md").read_text()
    assert "τ²-bench" in report and "split base, no judge" in report


def test_missing_data_folder_is_one_line(tmp_path: Path) -> None:
    cmd = [
        sys.executable, "-m", "agentload", "run", "--tasks", "tau2-airline/0",
        "--tau2-data", str(tmp_path / "nowhere"), "--out", str(tmp_path / "r"),
    ]  # fmt: skip
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert p.returncode == 2
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "workload.tau2.data" in lines[0] and "does not exist" in lines[0]
    assert not (tmp_path / "r").exists()


async def test_a_task_with_a_message_history_continues_from_it() -> None:
    d = _domain("tau2-mock")
    task = d.get_task("tau2-mock/update_task_with_message_history")
    history = task.tau2["initial_state"]["message_history"]
    res = await run_episode(spec(task.id), {}, EpisodeOptions(agent="oracle", user="scripted"))
    t = res.trajectory
    msgs = t["tau2"]["messages"]
    assert [m["role"] for m in msgs[: len(history)]] == [h["role"] for h in history]
    assert all(m.get("content") == h.get("content") for m, h in zip(msgs, history, strict=False))
    assert GREETING not in [m.get("content") for m in msgs]
    # The agent saw the history: its user message, its own tool call and the result.
    agent_view = t["messages"]
    assert agent_view[1] == {"role": "user", "content": history[0]["content"]}
    assert agent_view[2]["tool_calls"][0]["function"]["name"] == history[1]["tool_calls"][0]["name"]
    assert agent_view[3]["role"] == "tool"
    assert res.session["termination"] == "user_stop" and res.session["reward"] == 1.0


def test_tasks_grade_and_check_on_tau2(tmp_path: Path, tau2_data: Path) -> None:
    out = tmp_path / "r"
    base = [sys.executable, "-m", "agentload"]
    run = [
        *base, "run", "--tasks", "tau2-airline/0-5,tau2-telecom", "--split", "small",
        "--tau2-data", str(tau2_data), "--sim-speedup", "50", "--concurrency", "6",
        "--out", str(out), "--progress", "off", "--no-report",
    ]  # fmt: skip
    p = subprocess.run(run, capture_output=True, text=True, timeout=240)
    assert p.returncode in (0, 3), p.stderr[-2000:]
    env = {**os.environ, "AGENTLOAD_TAU2_DATA": str(tau2_data)}
    g = subprocess.run([*base, "tasks", "grade", str(out), "--json"], capture_output=True,
                       text=True, timeout=120, env=env)  # fmt: skip
    rows = [json.loads(line) for line in g.stdout.splitlines()]
    assert g.returncode == 0 and len(rows) == 26 and all(r["match"] for r in rows)
    # A stored reward that its messages do not earn is found.
    lines = (out / "trajectories.jsonl").read_text().splitlines()
    t = json.loads(lines[0])
    t["reward"] = 1.0 - t["reward"]
    lines[0] = json.dumps(t)
    (out / "trajectories.jsonl").write_text("\n".join(lines) + "\n")
    g = subprocess.run([*base, "tasks", "grade", str(out)], capture_output=True, text=True,
                       timeout=120, env=env)  # fmt: skip
    assert g.returncode == 1 and "1 of 26 differ" in g.stdout + g.stderr
    c = subprocess.run([*base, "tasks", "check", "-d", "tau2-mock"], capture_output=True,
                       text=True, timeout=120, env=env)  # fmt: skip
    assert c.returncode == 1
    assert c.stdout.count("the gold trajectory scores 0.0") == 2
