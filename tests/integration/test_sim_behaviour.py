"""The behaviour hook: generic answers, schema-valid arguments, roles, options, lazy modules."""

from __future__ import annotations

import random
import sys
import types
from typing import Any

import jsonschema
import pytest
from openai import AsyncOpenAI

from agentload.sim import ResponsePlan, SimConfig, SimServer, ToolCallPlan, register_behaviour
from agentload.sim import behaviour as bh
from agentload.sim.behaviour import (
    GenericBehaviour,
    RequestView,
    example_from_schema,
    lognormal_tokens,
    unregister_behaviour,
)

MODEL = "sim-model"

SCHEMAS: list[dict[str, Any]] = [
    {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]},
    {
        "type": "object",
        "properties": {
            "n": {"type": "integer", "minimum": 3, "maximum": 5},
            "x": {"type": "number", "exclusiveMinimum": 0, "maximum": 1},
            "tags": {"type": "array", "items": {"type": "string"}, "minItems": 2},
            "when": {"type": "string", "format": "date"},
            "mail": {"type": "string", "format": "email"},
            "kind": {"enum": ["a", "b"]},
            "fixed": {"const": 7},
            "maybe": {"type": ["string", "null"]},
            "either": {"anyOf": [{"type": "integer"}, {"type": "null"}]},
            "nested": {
                "type": "object",
                "properties": {"ok": {"type": "boolean"}},
                "required": ["ok"],
                "additionalProperties": False,
            },
            "short": {"type": "string", "minLength": 2, "maxLength": 3},
        },
        "required": [
            "n",
            "x",
            "tags",
            "when",
            "mail",
            "kind",
            "fixed",
            "maybe",
            "either",
            "nested",
            "short",
        ],
        "additionalProperties": False,
    },
    {"type": "object", "properties": {}},
    {
        "type": "object",
        "properties": {
            "ratio": {"type": "number", "exclusiveMinimum": 0.5, "maximum": 1},
            "count": {"type": "integer", "exclusiveMinimum": 2, "exclusiveMaximum": 5},
            "tiny": {"type": "number", "minimum": 0.01, "exclusiveMaximum": 0.02},
        },
        "required": ["ratio", "count", "tiny"],
    },
]


@pytest.mark.parametrize("schema", SCHEMAS)
def test_generated_arguments_validate(schema: dict[str, Any]) -> None:
    for seed in range(30):
        value = example_from_schema(schema, random.Random(seed))
        jsonschema.validate(value, schema, format_checker=jsonschema.FormatChecker())


def test_lognormal_length_mean_and_cap() -> None:
    rng = random.Random(0)
    draws = [lognormal_tokens(100, 0.6, rng, 10_000) for _ in range(4000)]
    assert 90 < sum(draws) / len(draws) < 110
    assert max(lognormal_tokens(100, 0.6, rng, 50) for _ in range(200)) == 50


def view(**kw: Any) -> RequestView:
    base: dict[str, Any] = {
        "body": {},
        "messages": [{"role": "user", "content": "hi"}],
        "tools": [],
        "tool_choice": "auto",
        "max_tokens": 200,
        "rng": random.Random(1),
        "headers": {},
        "settings": SimConfig(tool_call_probability=0.0),
    }
    base.update(kw)
    return RequestView(**base)


def test_generic_behaviour_respects_tool_choice() -> None:
    tool = {"type": "function", "function": {"name": "f", "parameters": SCHEMAS[0]}}
    g = GenericBehaviour(SimConfig())
    assert g.respond(view()).content
    assert not g.respond(view(tools=[tool], tool_choice="none")).tool_calls
    # probability 0, but required forces a call
    plan = g.respond(view(tools=[tool], tool_choice="required"))
    assert [c.name for c in plan.tool_calls] == ["f"] and plan.content is None
    named = {"type": "function", "function": {"name": "g"}}
    other = {"type": "function", "function": {"name": "g", "parameters": SCHEMAS[2]}}
    assert [c.name for c in g.respond(view(tools=[tool, other], tool_choice=named)).tool_calls] == [
        "g"
    ]
    settings = SimConfig(tool_call_probability=1.0, parallel_tool_call_probability=1.0)
    plan = g.respond(view(tools=[tool], settings=settings))
    assert 2 <= len(plan.tool_calls) <= 3
    plan = g.respond(view(tools=[tool], settings=settings, parallel_tool_calls=False))
    assert len(plan.tool_calls) == 1
    thinking = g.respond(view(thinking=True))
    assert thinking.reasoning and thinking.content


class EchoOptions:
    """Answers with what it was configured with and what the request carried."""

    def __init__(self, config: SimConfig) -> None:
        self.skill = config.behaviour_options.get("agent_skill")

    def respond(self, request: RequestView) -> ResponsePlan:
        return ResponsePlan(
            content=f"skill={self.skill} task={request.task} session={request.session_id} "
            f"opt={request.options.get('agent_skill')}",
            tool_calls=[ToolCallPlan("f", '{"a": "x"}')] if request.tools else [],
        )


async def test_role_header_selects_a_registered_behaviour() -> None:
    register_behaviour("echo", EchoOptions)
    try:
        config = SimConfig(
            port=0, model=MODEL, profile="instant", behaviour_options={"agent_skill": 0.8}
        )
        async with SimServer(config) as server:
            client = AsyncOpenAI(base_url=server.base_url, api_key="x", max_retries=0)
            res = await client.chat.completions.create(
                model=MODEL,
                messages=[{"role": "user", "content": "hi"}],
                extra_headers={
                    "X-Agentload-Role": "echo",
                    "X-Agentload-Task": "t-7",
                    "X-Session-ID": "s-1",
                },
            )
            assert res.choices[0].message.content == "skill=0.8 task=t-7 session=s-1 opt=0.8"
            assert res.choices[0].finish_reason == "stop"
            # no or unknown role: the generic behaviour
            for headers in ({}, {"X-Agentload-Role": "nobody"}):
                res = await client.chat.completions.create(
                    model=MODEL, messages=[{"role": "user", "content": "hi"}], extra_headers=headers
                )
                assert not (res.choices[0].message.content or "").startswith("skill=")
            await client.close()
    finally:
        unregister_behaviour("echo")


def test_behaviours_registered_by_path_load_lazily_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    module = types.ModuleType("agentload_test_roles")
    calls: list[str] = []

    class Planner:
        def __init__(self, config: SimConfig) -> None:
            calls.append("init")

        def respond(self, request: RequestView) -> ResponsePlan:
            return ResponsePlan(content="planned")

    module.Planner = Planner  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "agentload_test_roles", module)
    register_behaviour("planner", "agentload_test_roles:Planner")
    register_behaviour("missing", "agentload_missing_roles_module:Nothing")
    try:
        assert "planner" in bh.BEHAVIOURS.names()
        factory = bh.behaviour_factory("planner")
        assert factory is Planner
        behaviours = bh.BehaviourSet(SimConfig())
        assert behaviours.for_role("planner").respond(view()).content == "planned"
        behaviours.for_role("planner")
        assert calls == ["init"]
        assert bh.behaviour_factory(None) is GenericBehaviour
        assert bh.behaviour_factory("no-such-role") is GenericBehaviour
        with pytest.raises(ImportError, match="agentload_missing_roles_module"):
            bh.behaviour_factory("missing")
    finally:
        unregister_behaviour("planner")
        unregister_behaviour("missing")


class Broken:
    def __init__(self, config: SimConfig) -> None:
        pass

    def respond(self, request: RequestView) -> ResponsePlan:
        raise RuntimeError("no plan")


async def test_failing_behaviour_is_a_500_in_openai_shape() -> None:
    import openai

    register_behaviour("broken", Broken)
    try:
        async with SimServer(SimConfig(port=0, model=MODEL, profile="instant")) as server:
            client = AsyncOpenAI(base_url=server.base_url, api_key="x", max_retries=0)
            with pytest.raises(openai.InternalServerError) as info:
                await client.chat.completions.create(
                    model=MODEL,
                    messages=[{"role": "user", "content": "hi"}],
                    extra_headers={"X-Agentload-Role": "broken"},
                )
            assert "no plan" in info.value.message
            await client.close()
    finally:
        unregister_behaviour("broken")
