"""agentload's τ²-bench mock domain against facts recorded from τ²-bench 1.0.1 itself
(tests/data/tau2/mock.json): both sides' tool schemas, the database hashes, every task's gold
replay from its initial state (initialization data, initialization actions, message
history), and probes, including the state τ²'s set_state leaves when a task merges
initialization data (both sides then share one database)."""

from __future__ import annotations

import hashlib
import json
from functools import cache
from pathlib import Path
from typing import Any

import pytest

import agentload.domains.tau2.mock as tau2_mock
from agentload.domains.tau2.toolkit import Record, World

REF: dict[str, Any] = json.loads(
    (Path(__file__).resolve().parents[1] / "data" / "tau2" / "mock.json").read_text()
)


@cache
def _tasks(folder: Path) -> dict[str, dict[str, Any]]:
    return {str(t["id"]): t for t in json.loads((folder / "tasks.json").read_text())}


def _world(tau2_data: Path) -> World:
    return tau2_mock.make_world(tau2_data / "mock")


def _sha(texts: list[str]) -> str:
    return hashlib.sha256("\n\x00".join(texts).encode()).hexdigest()


def _json_or_text(text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def _mutates(world: World, name: str) -> bool:
    for kit in (world.agent, world.user):
        if kit is not None and name in kit.SPECS:
            return kit.SPECS[name].mutates
    return False


def _initial_world(tau2_data: Path, state: dict[str, Any] | None) -> World:
    """A world with a task's initial state, set as τ²'s Environment.set_state sets it: data
    merged, initialization actions run, the history's state-changing tool calls replayed
    (each answer checked against the recorded one)."""
    world = _world(tau2_data)
    state = state or {}
    data = state.get("initialization_data")
    if data is not None:
        world.update(data.get("agent_data"), data.get("user_data"))
    for action in state.get("initialization_actions") or ():
        world.run_function(action["env_type"], action["func_name"], action["arguments"])
    messages = state.get("message_history") or []
    answers = {m["id"]: m["content"] for m in messages if m["role"] == "tool"}
    for m in messages:
        for call in m.get("tool_calls") or ():
            if not _mutates(world, call["name"]):
                continue  # τ² skips reads and unknown tools in a replay
            requestor = call.get("requestor") or "assistant"
            text, _ = world.call(requestor, call["name"], call["arguments"])
            assert _json_or_text(text) == _json_or_text(answers[call["id"]])
    world.sync()
    return world


def test_tool_schemas_are_tau2s() -> None:
    # Byte for byte, key order included: the agent and the user see this text.
    assert json.dumps(tau2_mock.MockTools.schemas()) == json.dumps(REF["agent_tools"])
    assert json.dumps(tau2_mock.MockUserTools.schemas()) == json.dumps(REF["user_tools"])
    assert tau2_mock.AGENT_KIT is tau2_mock.MockTools
    assert tau2_mock.USER_KIT is tau2_mock.MockUserTools


def test_tool_kinds_are_tau2s() -> None:
    assert {n: (s.kind, s.mutates) for n, s in tau2_mock.MockTools.SPECS.items()} == {
        "create_task": ("write", True),
        "get_users": ("read", False),
        "update_task_status": ("write", True),
        "transfer_to_human_agents": ("generic", False),
    }
    assert {n: (s.kind, s.mutates) for n, s in tau2_mock.MockUserTools.SPECS.items()} == {
        "check_notifications": ("read", False),
        "dismiss_notification": ("write", True),
    }


def test_initial_databases_and_policy(tau2_data: Path) -> None:
    world = _world(tau2_data)
    assert isinstance(world, tau2_mock.MockWorld)
    assert world.db_hash() == REF["initial_db_hash"]
    assert world.user_db_hash() == REF["initial_user_db_hash"]
    text = tau2_mock.policy(tau2_data / "mock")
    assert hashlib.sha256(text.encode()).hexdigest() == REF["policy_sha256"]
    assert world.agent.normalize(world.agent.db) == world.agent.db
    assert world.user is not None
    assert world.user.normalize(world.user.db) == world.user.db


def test_reference_covers_every_task(tau2_data: Path) -> None:
    assert set(_tasks(tau2_data / "mock")) == set(REF["tasks"])
    assert len(REF["tasks"]) == 10


@pytest.mark.parametrize("task_id", sorted(REF["tasks"]))
def test_gold_replay_matches_tau2(tau2_data: Path, task_id: str) -> None:
    task = _tasks(tau2_data / "mock")[task_id]
    world = _initial_world(tau2_data, task.get("initial_state"))
    texts, errors = [], 0
    for a in (task.get("evaluation_criteria") or {}).get("actions") or ():
        text, error = world.call(a.get("requestor") or "assistant", a["name"], a["arguments"])
        texts.append(text)
        errors += error
    want = REF["tasks"][task_id]
    assert (_sha(texts), errors) == (want["outputs_sha256"], want["errors"])
    assert world.db_hash() == want["db_hash"]
    assert world.user_db_hash() == want["user_db_hash"]


@pytest.mark.parametrize("n", range(len(REF["probes"])))
def test_probe_matches_tau2(tau2_data: Path, n: int) -> None:
    """Tool calls by either side and environment functions (assertions, notifications)
    after various initial states: every answer, and both hashes, as τ²'s."""
    probe = REF["probes"][n]
    world = _initial_world(
        tau2_data,
        {
            "initialization_data": probe["initialization_data"],
            "initialization_actions": probe["initialization_actions"],
        },
    )
    texts, errors = [], 0
    for requestor, name, args in probe["steps"]:
        if requestor.startswith("fn:"):
            try:
                result = world.run_function(requestor[3:], name, args)
            except Exception as e:
                texts.append(f"!{e}")
                errors += 1
            else:
                texts.append("=model" if isinstance(result, Record) else f"={result!r}")
        else:
            text, error = world.call(requestor, name, args)
            texts.append(text)
            errors += error
    assert (_sha(texts), errors) == (probe["outputs_sha256"], probe["errors"])
    assert world.db_hash() == probe["db_hash"]
    assert world.user_db_hash() == probe["user_db_hash"]


def test_agent_data_leaves_both_sides_on_one_database(tau2_data: Path) -> None:
    # τ²'s set_state points the user's kit at the agent's rebuilt database: the user
    # database hash becomes the agent's, and the user's tools find no inbox.
    task = _tasks(tau2_data / "mock")["update_task_with_initialization_data"]
    world = _initial_world(tau2_data, task["initial_state"])
    assert world.user is not None
    assert world.user.db is world.agent.db
    assert world.user_db_hash() == world.db_hash()
    assert world.call("user", "check_notifications", {}) == (
        "Error: 'MockDB' object has no attribute 'notifications'",
        True,
    )
    # Without initialization data the two stay apart.
    plain = _world(tau2_data)
    assert plain.user is not None and plain.user.db is not plain.agent.db


def test_error_paths(tau2_data: Path) -> None:
    world = _world(tau2_data)
    assert world.call("assistant", "create_task", {"user_id": "user_9", "title": "A"}) == (
        "Error: User user_9 not found",
        True,
    )
    assert world.call("assistant", "create_task", {"user_id": "user_1", "title": 5}) == (
        "Error: 1 validation error for Task\ntitle\n  Input should be a valid string "
        "[type=string_type, input_value=5, input_type=int]\n"
        "    For further information visit https://errors.pydantic.dev/2.14/v/string_type",
        True,
    )
    assert world.call("assistant", "update_task_status", {"task_id": "task_9", "status": "x"}) == (
        "Error: Task task_9 not found",
        True,
    )
    assert world.call("user", "dismiss_notification", {"notification_id": "n9"}) == (
        "Error: Notification n9 not found",
        True,
    )
    assert world.call("assistant", "check_notifications", {}) == (
        "Error: Tool 'check_notifications' not found.",
        True,
    )
    assert world.db_hash() == REF["initial_db_hash"]
    assert world.user_db_hash() == REF["initial_user_db_hash"]
    text, error = world.call("assistant", "create_task", {"user_id": "user_1", "title": "A"})
    assert (json.loads(text), error) == (
        {"task_id": "task_2", "title": "A", "description": None, "status": "pending"},
        False,
    )
    assert world.run_function(
        "assistant",
        "assert_number_of_tasks",
        {
            "user_id": "user_1",
            "expected_number": 2,
        },
    )
