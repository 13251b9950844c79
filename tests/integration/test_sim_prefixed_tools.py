"""The simulator's skilled agent with tools offered under an MCP client's prefixed names
(`server__tool`, as OpenClaw names a server's tools): it calls them by the offered name and
reads its own earlier calls back under that name."""

from __future__ import annotations

import json
from typing import Any

import aiohttp
import pytest

from agentload.domains import get_domain
from agentload.sim import SimConfig, SimServer
from agentload.wire import ROLE_HEADER, SESSION_HEADER, TASK_HEADER

TASK = "airline/000"  # flight status: the agent asks for the date, then checks the flight


@pytest.fixture
async def sim() -> Any:
    cfg = SimConfig(port=0, profile="instant", behaviour_options={"agent_skill": 1.0})
    async with SimServer(cfg) as server:
        yield server


def _tools(prefix: str) -> list[dict[str, Any]]:
    out = []
    for schema in get_domain("airline").tool_schemas():
        fn = schema["function"]
        out.append({**schema, "function": {**fn, "name": prefix + fn["name"]}})
    return out


async def _step(sim: SimServer, messages: list[dict[str, Any]], prefix: str) -> dict[str, Any]:
    body = {
        "model": sim.config.model,
        "messages": messages,
        "tools": _tools(prefix),
        "stream": False,
    }
    headers = {SESSION_HEADER: "prefixed-1", ROLE_HEADER: "agent", TASK_HEADER: TASK}
    async with (
        aiohttp.ClientSession() as http,
        http.post(f"{sim.url}/v1/chat/completions", json=body, headers=headers) as r,
    ):
        assert r.status == 200
        return (await r.json())["choices"][0]["message"]


def _opening() -> list[dict[str, Any]]:
    task = get_domain("airline").get_task(TASK)
    return [
        {"role": "system", "content": get_domain("airline").system_prompt()},
        {"role": "user", "content": task.scenario.opening},
    ]


@pytest.mark.parametrize("prefix", ["airline__", "mcp__airline__"])
async def test_prefixed_tools_are_called_by_their_offered_names(
    sim: SimServer, prefix: str
) -> None:
    # The same conversation with the domain's own names and with prefixed ones.
    plain = await _drive(sim, "")
    prefixed = await _drive(sim, prefix)
    names = [
        c["function"]["name"] for m in prefixed if m.get("tool_calls") for c in m["tool_calls"]
    ]
    assert names and all(n.startswith(prefix) for n in names)
    # Prefixes aside, the simulator played the same conversation: it saw its earlier calls
    # (it did not call the same tool again) and answered the same way.
    assert _unprefix(prefixed, prefix) == _unprefix(plain)


async def _drive(sim: SimServer, prefix: str) -> list[dict[str, Any]]:
    """Agent steps until a text reply that follows a tool result, answering the agent's
    question for the date once."""
    messages = _opening()
    for _ in range(6):
        said = await _step(sim, messages, prefix)
        said.pop("reasoning_content", None)
        messages.append(said)
        if said.get("tool_calls"):
            for call in said["tool_calls"]:
                result = {"status": "delayed", "args": json.loads(call["function"]["arguments"])}
                messages.append(
                    {"role": "tool", "tool_call_id": call["id"], "content": json.dumps(result)}
                )
        elif any(m["role"] == "tool" for m in messages):
            return messages[2:]
        else:
            messages.append({"role": "user", "content": "The date is 2025-06-16."})
    raise AssertionError(f"no tool call and answer in 6 steps: {messages}")


def _unprefix(messages: list[dict[str, Any]], prefix: str = "") -> list[dict[str, Any]]:
    """The messages with the prefix taken off the call names, and without the call ids
    (random per response)."""
    out = []
    for m in messages:
        m = {k: v for k, v in m.items() if k != "tool_call_id"}
        if m.get("tool_calls"):
            calls = [
                {"function": {**c["function"], "name": c["function"]["name"][len(prefix) :]}}
                for c in m["tool_calls"]
            ]
            m = {**m, "tool_calls": calls}
        out.append(m)
    return out
