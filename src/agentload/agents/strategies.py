"""Agent strategies: native tool calling, react and act (text actions), and two controls.

- ``tool-calling``: the policy is the system prompt, the tools go in the request's `tools`;
  the model answers with `tool_calls` or text.
- ``react`` / ``act``: the tools are described in the system prompt and the model writes one
  action as JSON in its text (react: a ``Thought:`` first); tool results come back as user
  messages starting with ``Observation:``.
- ``oracle``: no model; executes the task's gold actions one per step, then states the
  required outputs. It scores 1.0 on every task, which checks the domain and the runner.
- ``noop``: no model; always replies the same sentence and never calls a tool. It scores 0.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Sequence
from typing import Any

import orjson

from agentload.agents.actions import ActionParseError, parse_action
from agentload.agents.base import Agent, AgentTurn, LLMCall, ToolCall, ToolOutcome
from agentload.agents.prompts import (
    NOOP_REPLY,
    OBSERVATION_PREFIX,
    PARSE_RETRY,
    text_system_prompt,
)
from agentload.domains.base import Domain, Task
from agentload.plugins import AGENTS

ORACLE_CLOSING = "Thank you for contacting us. Have a good day."


@functools.lru_cache(maxsize=32)
def _schemas(domain_name: str, data_version: str) -> tuple[dict[str, Any], ...]:
    from agentload.domains import get_domain

    return tuple(get_domain(domain_name).tool_schemas())


def tool_schemas(domain: Domain) -> list[dict[str, Any]]:
    """The domain's tool schemas, built once per process for registered domains."""
    try:
        return list(_schemas(domain.name, domain.data_version))
    except KeyError:
        return domain.tool_schemas()


def transfer_tool_name(domain: Domain) -> str | None:
    """The domain's hand-over-to-a-human tool: a `transfer_tool` attribute, or by name."""
    name = getattr(domain, "transfer_tool", None)
    if isinstance(name, str):
        return name
    for tool in domain.tools:
        if tool.name.startswith(("handoff_to_human", "transfer_to_human")):
            return tool.name
    return None


def parse_tool_call(tc: dict[str, Any]) -> ToolCall:
    """A native (OpenAI-shape) tool call, with its arguments decoded or the reason not."""
    fn = tc.get("function") or {}
    name = (fn.get("name") or "").strip()
    raw = fn.get("arguments")
    call = ToolCall(id=str(tc.get("id") or ""), name=name, arguments=None)
    if not name:
        call.error = "tool call without a function name"
        return call
    if raw is None or (isinstance(raw, str) and not raw.strip()):
        call.arguments = {}
        return call
    if isinstance(raw, dict):
        call.arguments = raw
        return call
    try:
        value = orjson.loads(raw)
    except orjson.JSONDecodeError as e:
        call.error = f"arguments of {name} are not valid JSON: {e}"
        return call
    if not isinstance(value, dict):
        call.error = f"arguments of {name} must be a JSON object"
        return call
    call.arguments = value
    return call


class ToolCallingAgent:
    name = "tool-calling"
    uses_llm = True

    def __init__(self, domain: Domain, task: Task, *, keep_reasoning: bool = False) -> None:
        self.keep_reasoning = keep_reasoning
        self.tools: list[dict[str, Any]] | None = tool_schemas(domain)
        self.messages: list[dict[str, Any]] = [
            {"role": "system", "content": domain.system_prompt()}
        ]

    async def step(self, llm: LLMCall) -> AgentTurn:
        res = await llm(self.messages, self.tools)
        if not res.ok:
            return AgentTurn(result=res)
        self.messages.append(res.message(keep_reasoning=self.keep_reasoning))
        return AgentTurn(
            result=res,
            text=res.content,
            tool_calls=[parse_tool_call(tc) for tc in res.tool_calls],
        )

    def add_tool_results(self, outcomes: Sequence[ToolOutcome]) -> None:
        for o in outcomes:
            self.messages.append({"role": "tool", "tool_call_id": o.call.id, "content": o.content})

    def add_user_message(self, text: str) -> None:
        self.messages.append({"role": "user", "content": text})

    def add_parse_retry(self, error: str) -> None:  # native calls have no parse step
        self.messages.append({"role": "user", "content": error})


class TextActionAgent:
    """react (Thought + Action) or act (Action only): actions parsed from the text."""

    uses_llm = True
    action_format = "text"  # tools described in the system prompt, not sent as `tools`

    def __init__(
        self, domain: Domain, task: Task, *, mode: str = "react", keep_reasoning: bool = False
    ) -> None:
        self.name = mode
        self.keep_reasoning = keep_reasoning
        # Not sent as `tools` (the prompt describes them); kept for the trajectory.
        self.tools = tool_schemas(domain)
        self.messages: list[dict[str, Any]] = [
            {"role": "system", "content": text_system_prompt(domain, mode)}
        ]
        self._actions = 0

    async def step(self, llm: LLMCall) -> AgentTurn:
        res = await llm(self.messages, None)
        if not res.ok:
            return AgentTurn(result=res)
        self.messages.append(res.message(keep_reasoning=self.keep_reasoning))
        if not res.content.strip() and not res.tool_calls:
            return AgentTurn(result=res)  # empty: the runner ends the episode
        if res.tool_calls and not res.content.strip():
            # A server that parsed the JSON into native calls anyway: take them as they are.
            return AgentTurn(result=res, tool_calls=[parse_tool_call(tc) for tc in res.tool_calls])
        try:
            action = parse_action(res.content)
        except ActionParseError as e:
            return AgentTurn(result=res, parse_error=str(e))
        if action.is_respond:
            return AgentTurn(result=res, text=action.respond_text())
        self._actions += 1
        return AgentTurn(
            result=res,
            tool_calls=[
                ToolCall(id=f"action_{self._actions}", name=action.name, arguments=action.arguments)
            ],
        )

    def add_tool_results(self, outcomes: Sequence[ToolOutcome]) -> None:
        if len(outcomes) == 1:
            text = OBSERVATION_PREFIX + outcomes[0].content
        else:
            text = OBSERVATION_PREFIX + "\n".join(f"[{o.call.name}] {o.content}" for o in outcomes)
        self.messages.append({"role": "user", "content": text})

    def add_user_message(self, text: str) -> None:
        self.messages.append({"role": "user", "content": text})

    def add_parse_retry(self, error: str) -> None:
        self.messages.append(
            {"role": "user", "content": PARSE_RETRY.format(error=error, respond="respond")}
        )


class OracleAgent:
    """Executes the gold actions (one per step), then states the required outputs.

    A hand-over to a human comes after the answer, so the outputs are said first.
    """

    name = "oracle"
    uses_llm = False

    def __init__(self, domain: Domain, task: Task, *, keep_reasoning: bool = False) -> None:
        self.tools = tool_schemas(domain)
        self.messages: list[dict[str, Any]] = [
            {"role": "system", "content": domain.system_prompt()}
        ]
        transfer = transfer_tool_name(domain)
        if task.required_outputs:
            answer = "Here is the outcome of your request: " + "; ".join(task.required_outputs)
        else:
            answer = "Your request has been taken care of."
        plan: list[Any] = [a for a in task.gold_actions if a.name != transfer]
        plan.append(answer + ".")
        plan.extend(a for a in task.gold_actions if a.name == transfer)
        self._plan = plan
        self._i = 0

    async def step(self, llm: LLMCall) -> AgentTurn:
        item: Any = self._plan[self._i] if self._i < len(self._plan) else ORACLE_CLOSING
        self._i += 1
        if isinstance(item, str):
            self.messages.append({"role": "assistant", "content": item})
            return AgentTurn(text=item)
        call_id = f"oracle_{self._i}"
        self.messages.append(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": call_id,
                        "type": "function",
                        "function": {"name": item.name, "arguments": json.dumps(item.arguments)},
                    }
                ],
            }
        )
        return AgentTurn(
            tool_calls=[ToolCall(id=call_id, name=item.name, arguments=dict(item.arguments))]
        )

    def add_tool_results(self, outcomes: Sequence[ToolOutcome]) -> None:
        for o in outcomes:
            self.messages.append({"role": "tool", "tool_call_id": o.call.id, "content": o.content})

    def add_user_message(self, text: str) -> None:
        self.messages.append({"role": "user", "content": text})

    def add_parse_retry(self, error: str) -> None:
        self.messages.append({"role": "user", "content": error})


class NoopAgent:
    name = "noop"
    uses_llm = False

    def __init__(self, domain: Domain, task: Task, *, keep_reasoning: bool = False) -> None:
        self.tools = tool_schemas(domain)
        self.messages: list[dict[str, Any]] = [
            {"role": "system", "content": domain.system_prompt()}
        ]

    async def step(self, llm: LLMCall) -> AgentTurn:
        self.messages.append({"role": "assistant", "content": NOOP_REPLY})
        return AgentTurn(text=NOOP_REPLY)

    def add_tool_results(self, outcomes: Sequence[ToolOutcome]) -> None:  # never calls tools
        pass

    def add_user_message(self, text: str) -> None:
        self.messages.append({"role": "user", "content": text})

    def add_parse_retry(self, error: str) -> None:
        pass


def react_agent(domain: Domain, task: Task, *, keep_reasoning: bool = False) -> TextActionAgent:
    return TextActionAgent(domain, task, mode="react", keep_reasoning=keep_reasoning)


def act_agent(domain: Domain, task: Task, *, keep_reasoning: bool = False) -> TextActionAgent:
    return TextActionAgent(domain, task, mode="act", keep_reasoning=keep_reasoning)


AgentFactory = Callable[..., Agent]
"""`factory(domain, task, *, keep_reasoning=False)`: a fresh agent for one episode (an Agent
class is such a factory)."""


def make_agent(name: str, domain: Domain, task: Task, *, keep_reasoning: bool = False) -> Agent:
    """A fresh agent of strategy `name` for one episode."""
    try:
        factory = AGENTS.get(name)
    except KeyError as e:
        raise ValueError(str(e)) from None
    return factory(domain, task, keep_reasoning=keep_reasoning)
