"""τ-bench's user-simulator strategies, for every user simulator that talks through a model.

One function, `user_reply`, turns the user's conversation (OpenAI messages, its system prompt
first, the agent's words as `user` messages) into what the user says next:

- ``llm``: one call; its text is the message.
- ``react``: the user writes ``Thought:`` then ``User Response:`` (the format is added to its
  system prompt by `strategy_system_prompt`); only the response reaches the agent, the whole
  reply stays in the user's own conversation.
- ``verify``: a draft, then a second call asks the model whether the draft follows the user's
  instructions (``true`` / ``false``); a rejected draft is generated again, at most
  `VERIFY_ATTEMPTS` drafts, the last one kept when none passes.
- ``reflection``: as verify, but a rejected draft is first reflected on (one more call) and the
  reflection is shown to the model for the next draft; at most `REFLECTION_ATTEMPTS` drafts,
  the first one kept when none passes.

The attempt counts and what is kept when every check fails are τ-bench's (envs/user.py); the
prompts are agentload's. Every call goes through the `llm` callable, so each one is a measured
call of the user's role. A reply with tool calls (τ² telecom users have tools) is passed
through as it is: it is not parsed, checked or regenerated.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from agentload.agents.base import LLMCall
from agentload.agents.prompts import STOP_TOKENS
from agentload.client import CallResult

USER_STRATEGIES = ("llm", "react", "verify", "reflection")
VERIFY_ATTEMPTS = 3  # drafts per message (τ-bench's VerifyUserSimulationEnv)
REFLECTION_ATTEMPTS = 2  # drafts per message (τ-bench's ReflectionUserSimulationEnv)

REACT_FORMAT = """\
# How to write each message

Write every message in this format:

Thought:
<what you want to do next and why; the agent never sees this part>

User Response:
<the message the agent reads, in your own words; when your instructions say to end the \
conversation, only the end marker (such as ###STOP###)>"""

REACT_TOOLS = (
    "\n\nTo use one of your own tools, call it directly instead; a tool call needs no Thought "
    "or User Response."
)

CHECK_PROMPT = """\
You review the messages of a simulated user who is talking to a customer-service agent. \
Below are the user's instructions, the conversation so far, and the user's next message.

Decide whether the next message is acceptable: it follows the instructions, fits the \
conversation, invents no facts (ids, numbers, names, dates) that the instructions do not \
give, reveals no more than the agent needs at this point, and ends the conversation only \
when the instructions say it should.

Answer with one word: true if the message is acceptable, false if it is not.

# Instructions
{instructions}

# Conversation
{transcript}

# Next message
{draft}"""

REFLECT_PROMPT = """\
You review the messages of a simulated user who is talking to a customer-service agent. \
Below are the user's instructions, the conversation so far, and the user's next message, \
which was found not to follow the instructions.

Say briefly what is wrong with the message and what the user should say instead, in this \
format:

Reflection:
<what is wrong>

Response:
<a better next message>

# Instructions
{instructions}

# Conversation
{transcript}

# Next message
{draft}"""

# The reflection reaches the next draft as a message after the rejected one: the user's
# conversation then alternates as chat templates expect, and its system prompt (the cached
# prefix of every user call) is left alone.
REFLECTION_NOTE = (
    "(A note from the reviewer, not from the agent.) Your last message does not follow your "
    "instructions:\n{reflection}\n\nWrite your message to the agent again, following your "
    "instructions."
)

_RESPONSE_LABEL = re.compile(r"\buser[ \t]+response\b[ \t*_]*:[ \t*_]*", re.IGNORECASE)
_THOUGHT_LABEL = re.compile(r"\bthought\b[ \t*_]*:", re.IGNORECASE)
_VERDICT = re.compile(r"\b(true|false)\b", re.IGNORECASE)


@dataclass(slots=True)
class UserReply:
    """What the user says next, and the calls that made it."""

    text: str  # what the agent hears; "" when the user calls tools or a call failed
    message: dict[str, Any] | None  # to append to the user's conversation; None on failure
    tool_calls: list[dict[str, Any]] = field(default_factory=list)  # OpenAI shape, untouched
    results: list[CallResult] = field(default_factory=list)  # every call, in order

    @property
    def result(self) -> CallResult | None:
        """The last call: the failed one when a call failed."""
        return self.results[-1] if self.results else None

    @property
    def ok(self) -> bool:
        return all(r.ok for r in self.results)


def check_strategy(strategy: str) -> str:
    if strategy not in USER_STRATEGIES:
        raise ValueError(f"unknown user strategy {strategy!r}; known: {', '.join(USER_STRATEGIES)}")
    return strategy


def strategy_system_prompt(strategy: str, prompt: str, *, with_tools: bool = False) -> str:
    """The user's system prompt under `strategy`: react appends its reply format, the other
    strategies leave it as it is."""
    if check_strategy(strategy) != "react":
        return prompt
    return f"{prompt.rstrip()}\n\n{REACT_FORMAT}{REACT_TOOLS if with_tools else ''}"


def parse_react(text: str) -> str | None:
    """The user response of a react reply.

    The text after the last ``User Response:`` label; without one, a stop marker written
    anywhere; without either, the whole text if the model wrote no ``Thought:`` (it ignored
    the format but wrote a message). None: a thought without a response.
    """
    labels = list(_RESPONSE_LABEL.finditer(text))
    if labels:
        return text[labels[-1].end() :].strip()
    for token in STOP_TOKENS:
        if token in text:
            return token
    if _THOUGHT_LABEL.search(text) is None:
        return text.strip()
    return None


def verdict_passes(text: str) -> bool:
    """A check's answer: its first ``true`` / ``false``; neither counts as a rejection."""
    m = _VERDICT.search(text)
    return m is not None and m.group(1).lower() == "true"


def _content(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, list):  # content parts
        return "".join(p.get("text", "") for p in value if isinstance(p, Mapping))
    return orjson.dumps(value).decode()


def transcript(messages: Sequence[Mapping[str, Any]]) -> str:
    """The user's conversation (after its system prompt) as text, from the agent's and the
    user's side, for the check and the reflection."""
    lines = []
    for m in messages:
        role = m.get("role")
        text = _content(m.get("content")).strip()
        if role == "user":
            lines.append(f"Agent: {text}")
        elif role == "assistant":
            if text:
                lines.append(f"User: {text}")
            for tc in m.get("tool_calls") or ():
                fn = tc.get("function") or {}
                args = fn.get("arguments")
                if not isinstance(args, str):
                    args = orjson.dumps(args or {}).decode()
                lines.append(f"User (tool call): {fn.get('name', '')} {args}")
        elif role == "tool":
            lines.append(f"Tool result: {text}")
    return "\n".join(lines) or "(nothing yet: the user speaks first)"


def _review(template: str, messages: Sequence[Mapping[str, Any]], draft: str) -> list[dict]:
    system = messages[0] if messages and messages[0].get("role") == "system" else None
    rest = messages[1:] if system is not None else messages
    prompt = template.format(
        instructions=_content(system.get("content")).strip() if system else "(none)",
        transcript=transcript(rest),
        draft=draft or "(an empty message)",
    )
    return [{"role": "user", "content": prompt}]


@dataclass(slots=True)
class _Draft:
    text: str
    message: dict[str, Any]
    tool_calls: list[dict[str, Any]]


def _draft(strategy: str, res: CallResult) -> _Draft:
    if res.tool_calls:
        # The customer's reasoning is never kept: it is not part of the conversation.
        return _Draft(res.content.strip(), res.message(keep_reasoning=False), res.tool_calls)
    raw = res.content.strip()
    text = (parse_react(raw) or "") if strategy == "react" else raw
    # react keeps its thought in its own history: the next reply follows the same format.
    return _Draft(text, {"role": "assistant", "content": raw}, [])


def _reply(draft: _Draft, results: list[CallResult]) -> UserReply:
    return UserReply(draft.text, draft.message, list(draft.tool_calls), results)


async def user_reply(
    strategy: str,
    messages: list[dict[str, Any]],
    llm: LLMCall,
    tools: Sequence[dict[str, Any]] | None = None,
) -> UserReply:
    """What the user says next under `strategy` (see the module docs).

    `messages` is the user's conversation, system prompt first; it is not changed: the caller
    appends `message` when the reply is ok. The first failed call ends the reply (`ok` false,
    `result` the failed call).
    """
    check_strategy(strategy)
    turn = _Turn(strategy, messages, llm, tools)
    if strategy in ("llm", "react"):  # no check: the first draft is the reply
        res = await turn.call(messages, True)
        return turn.reply(_draft(strategy, res)) if res.ok else turn.failed()
    first = await turn.attempt(messages)
    if isinstance(first, UserReply):
        return first
    if strategy == "verify":
        return await turn.verify(first)
    return await turn.reflect(first)


class _Turn:
    """One reply in the making: its calls, in order, and the steps of each strategy."""

    def __init__(
        self,
        strategy: str,
        messages: list[dict[str, Any]],
        llm: LLMCall,
        tools: Sequence[dict[str, Any]] | None,
    ) -> None:
        self.strategy = strategy
        self.messages = messages
        self.llm = llm
        self.tools = tools
        self.results: list[CallResult] = []

    async def call(self, msgs: list[dict[str, Any]], with_tools: bool) -> CallResult:
        res = await self.llm(msgs, (self.tools or None) if with_tools else None)
        self.results.append(res)
        return res

    def failed(self) -> UserReply:
        return UserReply("", None, [], self.results)

    def reply(self, draft: _Draft) -> UserReply:
        return _reply(draft, self.results)

    async def accepted(self, draft: _Draft) -> bool | None:
        """The check's verdict on a draft; None when the check call failed."""
        res = await self.call(_review(CHECK_PROMPT, self.messages, draft.text), False)
        return verdict_passes(res.content) if res.ok else None

    async def attempt(self, msgs: list[dict[str, Any]]) -> UserReply | _Draft:
        """A draft and its check: the reply when that settles it (a failed call, a tool
        call, a draft that passes), else the draft the check rejected."""
        res = await self.call(msgs, True)
        if not res.ok:
            return self.failed()
        draft = _draft(self.strategy, res)
        if draft.tool_calls:
            return self.reply(draft)
        verdict = await self.accepted(draft)
        if verdict is None:
            return self.failed()
        return self.reply(draft) if verdict else draft

    async def verify(self, first: _Draft) -> UserReply:
        """Draft again from scratch until a draft passes the check."""
        draft = first
        for _ in range(VERIFY_ATTEMPTS - 1):
            got = await self.attempt(self.messages)
            if isinstance(got, UserReply):
                return got
            draft = got
        return self.reply(draft)  # τ-bench keeps the last draft when none passes

    async def reflect(self, first: _Draft) -> UserReply:
        """Reflect on the rejected draft and draft again with that note, until one passes."""
        rejected = first
        for _ in range(REFLECTION_ATTEMPTS - 1):
            res = await self.call(_review(REFLECT_PROMPT, self.messages, rejected.text), False)
            if not res.ok:
                return self.failed()
            note = REFLECTION_NOTE.format(reflection=res.content.strip() or "(no reflection)")
            got = await self.attempt(
                [*self.messages, rejected.message, {"role": "user", "content": note}]
            )
            if isinstance(got, UserReply):
                return got
            rejected = got
        return self.reply(first)  # τ-bench keeps the first draft when none passes
