"""What the episode runner and the agent strategies exchange.

The runner owns the loop (tools, user, termination); a strategy owns the conversation as its
model sees it (`messages`) and turns one model call into an :class:`AgentTurn`. Strategies
never execute tools nor talk to the user themselves, so every strategy is measured and
terminated by the same code.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from agentload.client import CallResult

LLMCall = Callable[[list[dict[str, Any]], Sequence[dict[str, Any]] | None], Awaitable[CallResult]]
"""`await llm(messages, tools)`: one measured call of the agent's model (headers, seed, turn
index and options are the runner's business)."""


@dataclass(slots=True)
class ToolCall:
    """One tool call the agent asked for, as parsed from its message."""

    id: str
    name: str
    arguments: dict[str, Any] | None
    error: str | None = None  # why the call is malformed (bad JSON, no name); not executed


@dataclass(slots=True)
class AgentTurn:
    """The outcome of one agent step.

    - `result` is None when no model was called (oracle, noop);
    - a failed call (`result.ok` false) ends the episode, nothing else is looked at;
    - `parse_error`: react / act message without a usable action;
    - otherwise `tool_calls` are executed, and `text` goes to the user only when there are no
      tool calls (text beside tool calls stays in the history).
    """

    result: CallResult | None = None
    text: str = ""
    tool_calls: list[ToolCall] = field(default_factory=list)
    parse_error: str | None = None

    @property
    def empty(self) -> bool:
        return not self.tool_calls and not self.text.strip() and self.parse_error is None


@dataclass(slots=True)
class ToolOutcome:
    call: ToolCall
    content: str  # what goes back to the model
    ok: bool


class Agent(Protocol):
    name: str
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None  # the `tools` of the trajectory (schemas offered)
    uses_llm: bool
    # Optional `action_format`: "native" (tools sent as `tools`, the default) or "text".

    async def step(self, llm: LLMCall) -> AgentTurn: ...

    def add_tool_results(self, outcomes: Sequence[ToolOutcome]) -> None: ...

    def add_user_message(self, text: str) -> None: ...

    def add_parse_retry(self, error: str) -> None: ...
