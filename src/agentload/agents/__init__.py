"""Agent strategies (tool-calling, react, act, and the oracle / noop controls) and user
simulators (an LLM customer, a scripted customer) for live episodes."""

from agentload.agents.actions import ActionParseError, ParsedAction, format_action, parse_action
from agentload.agents.base import Agent, AgentTurn, LLMCall, ToolCall, ToolOutcome
from agentload.agents.prompts import STOP, STOP_TOKENS, user_system_prompt
from agentload.agents.strategies import (
    AGENTS,
    NoopAgent,
    OracleAgent,
    TextActionAgent,
    ToolCallingAgent,
    make_agent,
    transfer_tool_name,
)
from agentload.agents.users import USERS, LlmUser, ScriptedUser, UserTurn, make_user

__all__ = [
    "AGENTS",
    "STOP",
    "STOP_TOKENS",
    "USERS",
    "ActionParseError",
    "Agent",
    "AgentTurn",
    "LLMCall",
    "LlmUser",
    "NoopAgent",
    "OracleAgent",
    "ParsedAction",
    "ScriptedUser",
    "TextActionAgent",
    "ToolCall",
    "ToolCallingAgent",
    "ToolOutcome",
    "UserTurn",
    "format_action",
    "make_agent",
    "make_user",
    "parse_action",
    "transfer_tool_name",
    "user_system_prompt",
]
