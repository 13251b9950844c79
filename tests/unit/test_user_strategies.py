"""τ-bench's user strategies (llm, react, verify, reflection), with a scripted model."""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Sequence
from typing import Any

import pytest

from agentload.agents import STOP, make_user
from agentload.agents.user_strategies import (
    CHECK_PROMPT,
    REACT_FORMAT,
    REFLECTION_ATTEMPTS,
    USER_STRATEGIES,
    VERIFY_ATTEMPTS,
    parse_react,
    strategy_system_prompt,
    transcript,
    user_reply,
    verdict_passes,
)
from agentload.client import CallResult
from agentload.client.record import CallRecord
from agentload.domains.base import Task, UserScenario

CHECK_MARK = CHECK_PROMPT.splitlines()[0]
REFLECT_MARK = "Say briefly what is wrong"


class Model:
    """Answers each call with the next scripted reply: a text, a list of tool calls, or None
    for a failed call. Records every call's messages and tools."""

    def __init__(self, *replies: str | list[dict[str, Any]] | None) -> None:
        self.replies = list(replies)
        self.calls: list[tuple[list[dict[str, Any]], Sequence[dict[str, Any]] | None]] = []

    async def __call__(
        self, messages: list[dict[str, Any]], tools: Sequence[dict[str, Any]] | None
    ) -> CallResult:
        self.calls.append((copy.deepcopy(messages), tools))
        reply = self.replies.pop(0)
        res = CallResult(CallRecord(call_id=f"c{len(self.calls)}", role="user"))
        if reply is None:
            res.record.status, res.record.error_kind = "error", "http_500"
        elif isinstance(reply, list):
            res.tool_calls = reply
        else:
            res.content = reply
        return res

    def kinds(self) -> list[str]:
        """Each call as "draft", "check" or "reflect"."""
        out = []
        for messages, _ in self.calls:
            text = messages[-1]["content"] if len(messages) == 1 else ""
            out.append(
                "check" if CHECK_MARK in text else "reflect" if REFLECT_MARK in text else "draft"
            )
        return out


def conversation() -> list[dict[str, Any]]:
    return [
        {"role": "system", "content": "You are Ana. Your user id is ana_1. Cancel order #W1."},
        {"role": "user", "content": "Hello, how can I help?"},
    ]


TOOL_CALL = [
    {"id": "t1", "type": "function", "function": {"name": "toggle_airplane", "arguments": "{}"}}
]


# --- react -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("Thought:\nI should give my id.\n\nUser Response:\nMy id is ana_1.", "My id is ana_1."),
        ("**Thought:** ask first\n**User Response:** Can you cancel #W1?", "Can you cancel #W1?"),
        ("Thought: done.\nUser Response: ###STOP###", STOP),
        # the last label wins (a model that echoes the format first)
        ("User Response: <x>\nThought: real\nuser response: Hi there", "Hi there"),
        # a stop marker without a label, and a plain message without the format
        ("Thought: the goal is met ###STOP###", STOP),
        ("I want to cancel my order.", "I want to cancel my order."),
        # a thought with no response cannot be sent
        ("Thought: I am not sure what to say yet.", None),
    ],
)
def test_parse_react(text: str, said: str | None) -> None:
    assert parse_react(text) == said


def test_react_prompt_and_reply_keep_the_thought_in_the_users_history() -> None:
    prompt = strategy_system_prompt("react", "Be Ana.")
    assert prompt.startswith("Be Ana.\n\n") and REACT_FORMAT in prompt
    assert "Thought:" in prompt and "User Response:" in prompt
    assert "call it directly" in strategy_system_prompt("react", "Be Ana.", with_tools=True)
    for other in ("llm", "verify", "reflection"):
        assert strategy_system_prompt(other, "Be Ana.") == "Be Ana."

    raw = "Thought:\nGive the order first.\n\nUser Response:\nPlease cancel order #W1."
    model = Model(raw)
    msgs = conversation()
    r = asyncio.run(user_reply("react", msgs, model))
    assert r.ok and r.text == "Please cancel order #W1."
    assert r.message == {"role": "assistant", "content": raw}
    assert len(model.calls) == 1 and model.calls[0][0] == msgs
    assert msgs == conversation()  # the caller appends, not the strategy


# --- llm, verify, reflection ------------------------------------------------------------------


def test_llm_is_one_call() -> None:
    model = Model("  I want to cancel #W1.  ")
    r = asyncio.run(user_reply("llm", conversation(), model, [{"type": "function"}]))
    assert r.text == "I want to cancel #W1." and len(r.results) == 1
    assert r.message == {"role": "assistant", "content": "I want to cancel #W1."}
    assert model.calls[0][1] == [{"type": "function"}]  # the user's tools are offered


def test_verify_accepts_a_checked_draft_in_two_calls() -> None:
    model = Model("My id is ana_1.", "true")
    r = asyncio.run(user_reply("verify", conversation(), model))
    assert r.text == "My id is ana_1." and model.kinds() == ["draft", "check"]
    check, tools = model.calls[1]
    assert tools is None and len(check) == 1 and check[0]["role"] == "user"
    # the check sees the instructions, the conversation and the draft
    body = check[0]["content"]
    assert "You are Ana." in body and "Agent: Hello, how can I help?" in body
    assert body.rstrip().endswith("My id is ana_1.")


def test_verify_regenerates_a_rejected_draft() -> None:
    model = Model("My id is bob_9.", "false", "My id is ana_1.", "True.")
    r = asyncio.run(user_reply("verify", conversation(), model))
    assert r.ok and r.text == "My id is ana_1."
    assert model.kinds() == ["draft", "check", "draft", "check"]
    assert model.calls[2][0] == conversation()  # a new draft of the same conversation
    assert "My id is bob_9." in model.calls[1][0][0]["content"]
    assert "My id is ana_1." in model.calls[3][0][0]["content"]


def test_verify_keeps_the_last_draft_when_none_passes() -> None:
    replies: list[str | None] = []
    for i in range(VERIFY_ATTEMPTS):
        replies += [f"draft {i}", "false, it invents a date"]
    model = Model(*replies)
    r = asyncio.run(user_reply("verify", conversation(), model))
    assert r.text == f"draft {VERIFY_ATTEMPTS - 1}" and len(r.results) == 2 * VERIFY_ATTEMPTS


def test_reflection_reflects_before_the_new_draft() -> None:
    model = Model(
        "My id is bob_9.",
        "false",
        "Reflection: the id is invented.\nResponse: My id is ana_1.",
        "My id is ana_1.",
        "true",
    )
    r = asyncio.run(user_reply("reflection", conversation(), model))
    assert r.text == "My id is ana_1." and r.message is not None
    assert model.kinds() == ["draft", "check", "reflect", "draft", "check"]
    reflect = model.calls[2][0][0]["content"]
    assert "You are Ana." in reflect and "My id is bob_9." in reflect
    # the new draft sees the rejected one and the reflection after the conversation
    retry = model.calls[3][0]
    assert retry[:2] == conversation()
    assert retry[2] == {"role": "assistant", "content": "My id is bob_9."}
    assert retry[3]["role"] == "user" and "the id is invented" in retry[3]["content"]
    # the user's history keeps the accepted draft only, not the note
    assert r.message == {"role": "assistant", "content": "My id is ana_1."}


def test_reflection_keeps_the_first_draft_when_none_passes() -> None:
    model = Model("first", "false", "Reflection: bad", "second", "false")
    r = asyncio.run(user_reply("reflection", conversation(), model))
    # draft and check, then a reflection, a draft and a check per further attempt
    assert r.text == "first" and len(r.results) == 2 + 3 * (REFLECTION_ATTEMPTS - 1)
    assert model.kinds() == ["draft", "check", "reflect", "draft", "check"]


@pytest.mark.parametrize("strategy", ["verify", "reflection", "react"])
def test_tool_calls_pass_through_unchecked(strategy: str) -> None:
    model = Model(TOOL_CALL)
    r = asyncio.run(user_reply(strategy, conversation(), model, [{"type": "function"}]))
    assert r.ok and r.tool_calls == TOOL_CALL and r.text == "" and len(r.results) == 1
    assert r.message is not None and r.message["tool_calls"][0]["id"] == "t1"


def test_a_new_draft_with_tool_calls_passes_through() -> None:
    model = Model("I don't know.", "false", TOOL_CALL)
    r = asyncio.run(user_reply("verify", conversation(), model, [{"type": "function"}]))
    assert r.tool_calls == TOOL_CALL and model.kinds() == ["draft", "check", "draft"]


@pytest.mark.parametrize(
    ("strategy", "replies", "calls"),
    [
        ("llm", [None], 1),
        ("verify", ["hi", None], 2),
        ("verify", ["hi", "false", None], 3),
        ("reflection", ["hi", "false", None], 3),
        ("reflection", ["hi", "false", "Reflection: x", None], 4),
    ],
)
def test_a_failed_call_ends_the_reply(strategy: str, replies: list[Any], calls: int) -> None:
    r = asyncio.run(user_reply(strategy, conversation(), Model(*replies)))
    assert not r.ok and r.message is None and r.text == "" and len(r.results) == calls
    assert r.result is not None and r.result.record.error_kind == "http_500"


def test_verdicts_and_transcript() -> None:
    assert verdict_passes("true") and verdict_passes("**True** - it follows the rules")
    assert not verdict_passes("false") and not verdict_passes("False; it is not true")
    assert not verdict_passes("I cannot tell.")  # neither: a rejection
    text = transcript(
        [
            {"role": "user", "content": "Restart your phone."},
            {"role": "assistant", "content": None, "tool_calls": TOOL_CALL},
            {"role": "tool", "tool_call_id": "t1", "content": "Airplane mode: off"},
            {"role": "assistant", "content": "Done."},
        ]
    )
    assert text.splitlines() == [
        "Agent: Restart your phone.",
        "User (tool call): toggle_airplane {}",
        "Tool result: Airplane mode: off",
        "User: Done.",
    ]


def test_unknown_strategy() -> None:
    with pytest.raises(ValueError, match="unknown user strategy 'shy'; known: llm, react"):
        asyncio.run(user_reply("shy", conversation(), Model("x")))
    assert USER_STRATEGIES == ("llm", "react", "verify", "reflection")


# --- the built-in LLM user -----------------------------------------------------------------


def _task() -> Task:
    scenario = UserScenario(
        persona="Ana, brisk.",
        instructions="Cancel order #W1.",
        known_info={"user_id": "ana_1"},
        unknown_info=[],
        opening="I want to cancel an order.",
    )
    return Task(
        id="test/000",
        domain="test",
        category="single_write",
        scenario=scenario,
        gold_actions=(),
        required_outputs=(),
    )


@pytest.mark.parametrize("name", ["react", "verify", "reflection"])
def test_registered_users_follow_their_strategy(name: str) -> None:
    user = make_user(name, _task())
    assert user.name == name and user.uses_llm
    assert ("User Response:" in user.messages[0]["content"]) == (name == "react")
    replies = {
        "react": ["Thought: open\nUser Response: Cancel #W1 please."],
        "verify": ["Cancel #W1 please.", "false", "Cancel #W1 please.", "true"],
        "reflection": ["Cancel it.", "false", "Reflection: vague", "Cancel #W1 please.", "true"],
    }[name]
    model = Model(*replies)
    turn = asyncio.run(user.reply(None, model))
    assert turn.text == "Cancel #W1 please." and turn.result is not None and turn.result.ok
    assert len(model.calls) == len(replies)
    assert user.messages[-1]["role"] == "assistant"
    assert [m["role"] for m in user.messages] == ["system", "user", "assistant"]
    turn = asyncio.run(user.reply("Done, anything else?", Model(*replies)))
    assert turn.text == "Cancel #W1 please."
    roles = [m["role"] for m in user.messages]
    assert roles == ["system", "user", "assistant", "user", "assistant"]
