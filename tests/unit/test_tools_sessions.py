"""The tool server's sessions without a transport: environments, argument checks, grading."""

from __future__ import annotations

import pytest

from agentload.domains import Environment, get_domain, grade
from agentload.tools import (
    NotGradable,
    SessionStore,
    ToolsError,
    UnknownDomain,
    UnknownSession,
    UnknownTask,
    UnknownTool,
)


def test_a_session_replays_gold_and_grades_as_the_domain() -> None:
    store = SessionStore("airline")
    task = next(t for t in store.domain.tasks() if t.category == "multi_write")
    s = store.create(task.id)
    for a in task.gold_actions:
        assert s.call(a.name, a.arguments).ok
    replies = [" ".join(task.required_outputs)]
    got, want = s.grade(replies), grade(get_domain("airline"), task, task.gold_actions, replies)
    assert got == want and got.reward == 1.0
    assert s.calls == len(task.gold_actions) and s.errors == 0
    assert s.info()["actions"] == [a.to_dict() for a in task.gold_actions]


def test_sessions_are_separate_environments() -> None:
    store = SessionStore("retail")
    task = next(t for t in store.domain.tasks() if t.category == "single_write")
    one, two = store.create(task.id), store.create(task.id)
    for a in task.gold_actions:
        one.call(a.name, a.arguments)
    fresh = Environment(store.domain).db_hash()
    assert one.env.db_hash() != fresh and two.env.db_hash() == fresh
    assert len(store) == 2 and {s.sid for s in store} == {one.sid, two.sid}


def test_arguments_are_checked_before_the_environment() -> None:
    s = SessionStore("airline").create()
    with pytest.raises(UnknownTool, match="unknown tool 'nope'") as e:
        s.call("nope", {})
    assert e.value.status == 404 and e.value.field == "name"
    with pytest.raises(ToolsError, match="reservation_id") as e:
        s.call("get_booking", {})
    assert e.value.field == "arguments/reservation_id"
    with pytest.raises(ToolsError) as e:
        s.call("get_booking", {"reservation_id": "A", "extra": 1})
    assert "extra" in str(e.value)
    with pytest.raises(ToolsError, match="not valid JSON"):
        s.call("get_booking", "{oops")
    with pytest.raises(ToolsError, match="must be a JSON object"):
        s.call("get_booking", [1])
    assert s.env.actions == [] and s.calls == s.errors == 5
    assert not any(c.reached for c in s.log)
    assert s.log[0].content.startswith("Error: unknown tool 'nope'")
    assert s.log[3].arguments == "{oops"  # as the agent sent it
    # JSON text and None are accepted as arguments; a tool's refusal is a result.
    assert s.call("list_airports", None).ok
    r = s.call("get_booking", '{"reservation_id": "NOPE00"}')
    assert not r.ok and r.content.startswith("Error:")
    assert (s.calls, s.errors) == (7, 6)
    assert [(c.name, c.ok, c.reached) for c in s.log[5:]] == [
        ("list_airports", True, True),
        ("get_booking", False, True),
    ]
    assert s.log[6].arguments == {"reservation_id": "NOPE00"}
    assert s.log[6].content == r.content
    assert all(c.elapsed_s >= 0 and c.start > 0 for c in s.log)


def test_store_errors() -> None:
    store = SessionStore("airline", max_sessions=2)
    assert store.create("012").task_id == "airline/012"  # the domain prefix may be left out
    with pytest.raises(UnknownTask) as e:
        store.create("airline/999")
    assert e.value.field == "task_id" and e.value.status == 404
    s = store.create(sid="mine")
    with pytest.raises(ToolsError, match="too many open sessions"):
        store.create()
    with pytest.raises(NotGradable, match="without a task"):
        s.grade()
    store.delete("mine")
    with pytest.raises(UnknownSession, match="unknown session 'mine'"):
        store.get("mine")
    with pytest.raises(UnknownDomain, match="nope"):
        SessionStore("nope")
