"""Offline grading: a stored trajectory re-grades to the grade it got live."""

from __future__ import annotations

import asyncio
import copy

import orjson
import pytest
from typer.testing import CliRunner

from agentload.cli import app
from agentload.client import ChatClient, EndpointConfig
from agentload.domains import get_task, grade_trajectory, trajectory_actions
from agentload.sim import SimConfig, SimServer
from agentload.workloads.episode import EpisodeOptions, EpisodeSpec, run_episode

TASKS = ["airline/003", "airline/020", "retail/010", "retail/040", "airline/050", "retail/060"]


async def _trajectories(agent: str, skill: float) -> list[dict]:
    cfg = SimConfig(port=0, profile="instant", behaviour_options={"agent_skill": skill})
    async with SimServer(cfg) as sim:
        ep = EndpointConfig(base_url=sim.base_url, model="agentload-sim", stream=False)
        async with ChatClient(ep) as client:
            out = []
            for i, task_id in enumerate(TASKS):
                spec = EpisodeSpec(task_id=task_id, trial=0, seed=i, session_id=f"g-{agent}-{i}")
                res = await run_episode(
                    spec, {"agent": client, "user": client}, EpisodeOptions(agent=agent)
                )
                out.append(res.trajectory)
            return out


@pytest.mark.parametrize(
    ("agent", "skill"), [("tool-calling", 0.5), ("react", 0.5), ("oracle", 1.0), ("noop", 1.0)]
)
def test_regrade_matches_live_grade(agent: str, skill: float) -> None:
    trajectories = asyncio.run(_trajectories(agent, skill))
    rewards = []
    for t in trajectories:
        # Through JSON, as read back from trajectories.jsonl.
        stored = orjson.loads(orjson.dumps(t.line()))
        g = grade_trajectory(stored)
        assert g.to_dict() == t["grade"], t["task_id"]
        rewards.append(g.reward)
    if agent == "oracle":
        assert rewards == [1.0] * len(TASKS)
    if agent == "noop":
        assert rewards == [0.0] * len(TASKS)


def test_tampered_trajectory_fails_the_regrade() -> None:
    oracle = {t["task_id"]: t for t in asyncio.run(_trajectories("oracle", 1.0))}
    t = oracle["retail/010"]  # a multi-write task
    actions, _ = trajectory_actions(t)
    assert [a.name for a in actions] == [a.name for a in get_task("retail/010").gold_actions]
    assert grade_trajectory(t).reward == 1.0
    # Drop the last write: the database no longer matches the gold one.
    bad = copy.deepcopy(t)
    last = max(i for i, m in enumerate(bad["messages"]) if m.get("tool_calls"))
    del bad["messages"][last]["tool_calls"][-1]
    g = grade_trajectory(bad)
    assert g.reward == 0.0 and not g.db_match
    # Silence the agent on a task with required outputs: they are missing.
    said = next(x for x in oracle.values() if get_task(x["task_id"]).required_outputs)
    _, replies = trajectory_actions(said)
    outputs = get_task(said["task_id"]).required_outputs
    assert all(o.lower() in " ".join(replies).lower() for o in outputs)
    mute = copy.deepcopy(said)
    for m in mute["messages"]:
        if m["role"] == "assistant" and not m.get("tool_calls"):
            m["content"] = "Done."
    g = grade_trajectory(mute)
    assert g.db_match and not g.outputs_ok and g.missing_outputs


def test_tasks_grade_cli(tmp_path) -> None:
    trajectories = asyncio.run(_trajectories("tool-calling", 0.5))
    path = tmp_path / "trajectories.jsonl"
    path.write_bytes(b"".join(orjson.dumps(t.line()) + b"\n" for t in trajectories))
    runner = CliRunner()
    r = runner.invoke(app, ["tasks", "grade", str(path), "--json"])
    assert r.exit_code == 0, r.output
    rows = [orjson.loads(line) for line in r.stdout.splitlines()]
    assert [row["task_id"] for row in rows] == TASKS
    assert all(row["match"] for row in rows)
    assert [row["reward"] for row in rows] == [t["reward"] for t in trajectories]
    # A stored reward that the replay does not reproduce is reported, with exit code 1.
    lines = [t.line() for t in trajectories]
    lines[0]["reward"] = 1.0 - lines[0]["reward"]
    path.write_bytes(b"".join(orjson.dumps(t) + b"\n" for t in lines))
    r = runner.invoke(app, ["tasks", "grade", str(path)])
    assert r.exit_code == 1
    assert "1 of 6" in r.output
