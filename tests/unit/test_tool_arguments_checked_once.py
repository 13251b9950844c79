"""A tool call through the tool server has its arguments checked once (by the domain's
`check_arguments`), and each caller keeps the message its agent is told."""

from __future__ import annotations

from typing import Any

import pytest

from agentload.domains import Environment, get_domain
from agentload.tools import SessionStore, ToolsError


@pytest.fixture
def validations(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The tool names whose schema validator was asked for, call by call."""
    domain = get_domain("airline")
    seen: list[str] = []
    real = type(domain).validator

    def counting(self: Any, tool: Any) -> Any:
        seen.append(tool.name)
        return real(self, tool)

    monkeypatch.setattr(type(domain), "validator", counting)
    return seen


def test_a_tool_server_call_is_validated_once(validations: list[str]) -> None:
    s = SessionStore("airline").create()
    assert s.call("get_booking", {"reservation_id": "NOPE00"}).content.startswith("Error:")
    assert s.call("list_airports", None).ok
    with pytest.raises(ToolsError):
        s.call("get_booking", {})
    assert validations == ["get_booking", "list_airports", "get_booking"]
    assert len(s.env.actions) == 2


def test_each_caller_keeps_its_message(validations: list[str]) -> None:
    env = Environment(get_domain("airline"))
    r = env.execute("get_booking", {})
    assert not r.ok
    assert r.content == (
        "Error: invalid arguments for get_booking: 'reservation_id' is a required property"
    )
    s = SessionStore("airline").create()
    with pytest.raises(ToolsError) as e:
        s.call("get_booking", {})
    assert str(e.value) == (
        "invalid arguments for get_booking: reservation_id: 'reservation_id' is a required property"
    )
    assert e.value.field == "arguments/reservation_id"
    with pytest.raises(ToolsError) as e:
        s.call("get_booking", {"reservation_id": 7})
    assert (
        str(e.value)
        == "invalid arguments for get_booking: reservation_id: 7 is not of type 'string'"
    )
    assert env.execute("get_booking", {"reservation_id": 7}).content == (
        "Error: invalid arguments for get_booking: reservation_id: 7 is not of type 'string'"
    )
    assert e.value.field == "arguments/reservation_id"
    assert s.log[0].content == (
        "Error: invalid arguments for get_booking: reservation_id: "
        "'reservation_id' is a required property"
    )
