"""Prompts of the agent strategies and the user simulator, written for agentload.

Prompts that depend only on the domain (the react / act system prompts) are built once per
process and cached: a thousand concurrent episodes share one string, and the server sees the
same static prefix on every call, which is what prefix caching needs.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping, Sequence

from agentload.agents.actions import RESPOND
from agentload.domains import get_domain
from agentload.domains.base import Domain, UserScenario

# What the user simulator is told the agent said first; the agent never sees it.
AGENT_GREETING = "Hello, thank you for contacting us. How can I help you today?"

# User stop tokens: any of them ends the episode with termination "user_stop".
STOP = "###STOP###"
TRANSFER = "###TRANSFER###"
OUT_OF_SCOPE = "###OUT-OF-SCOPE###"
STOP_TOKENS = (STOP, TRANSFER, OUT_OF_SCOPE)

NOOP_REPLY = "I am sorry, but I am not able to do anything for you today."

_TEXT_FORMAT = {
    "react": """\
# How to reply

You cannot call tools directly. Every message you write must contain exactly one action, and
nothing after it, in this format:

Thought: <your reasoning about what to do next, in one short paragraph>
Action: {{"name": "<tool name>", "arguments": {{<arguments as a JSON object>}}}}

To send a message to the customer, use the action named "{respond}":

Thought: I have everything I need to answer.
Action: {{"name": "{respond}", "arguments": {{"content": "<your message to the customer>"}}}}

After a tool action, the next message you receive starts with "Observation:" and holds the
tool's result. Messages without that prefix come from the customer. Only the "{respond}"
action reaches the customer; one action per message.""",
    "act": """\
# How to reply

You cannot call tools directly. Every message you write must be exactly one action and
nothing else: a single line of JSON in this format:

Action: {{"name": "<tool name>", "arguments": {{<arguments as a JSON object>}}}}

To send a message to the customer, use the action named "{respond}":

Action: {{"name": "{respond}", "arguments": {{"content": "<your message to the customer>"}}}}

After a tool action, the next message you receive starts with "Observation:" and holds the
tool's result. Messages without that prefix come from the customer. Only the "{respond}"
action reaches the customer; one action per message; do not explain your reasoning.""",
}

PARSE_RETRY = (
    "Your last message could not be read as an action: {error}. Reply again with exactly one "
    'action in the required format, e.g. Action: {{"name": "{respond}", "arguments": '
    '{{"content": "..."}}}}'
)

OBSERVATION_PREFIX = "Observation: "


def render_tools(schemas: Sequence[Mapping]) -> str:
    """The tools as text for a system prompt: name, description, JSON-schema parameters."""
    lines = ["# Tools", ""]
    for schema in schemas:
        fn = schema.get("function", schema)
        params = json.dumps(fn.get("parameters", {}), separators=(",", ":"), sort_keys=True)
        lines.append(f"## {fn['name']}")
        if fn.get("description"):
            lines.append(str(fn["description"]).strip())
        lines.append(f"Arguments (JSON Schema): {params}")
        lines.append("")
    return "\n".join(lines).rstrip()


@functools.lru_cache(maxsize=32)
def _text_system_prompt(domain_name: str, data_version: str, mode: str) -> str:

    domain = get_domain(domain_name)
    return "\n\n".join(
        [
            domain.system_prompt().rstrip(),
            render_tools(domain.tool_schemas()),
            _TEXT_FORMAT[mode].format(respond=RESPOND),
        ]
    )


def text_system_prompt(domain: Domain, mode: str) -> str:
    """Policy + tools described in text + the action format, for "react" or "act"."""
    if mode not in _TEXT_FORMAT:
        raise ValueError(f"no text action format {mode!r}; known: {', '.join(_TEXT_FORMAT)}")
    try:
        return _text_system_prompt(domain.name, domain.data_version, mode)
    except KeyError:
        # A domain outside the registry (tests build their own): no cache.
        return "\n\n".join(
            [
                domain.system_prompt().rstrip(),
                render_tools(domain.tool_schemas()),
                _TEXT_FORMAT[mode].format(respond=RESPOND),
            ]
        )


def _label(key: str) -> str:
    return key.replace("_", " ")


def user_system_prompt(scenario: UserScenario) -> str:
    """The customer's instructions for the LLM user simulator."""
    known = "\n".join(f"- {_label(k)}: {v}" for k, v in scenario.known_info.items())
    unknown = "\n".join(f"- {u}" for u in scenario.unknown_info)
    parts = [
        "You are playing a customer who is chatting with a customer-service agent. You are the "
        "customer, never the agent. Each of your messages is what the customer types next.",
        f"# Who you are\n{scenario.persona}",
        f"# Your situation and what you want\n{scenario.instructions}",
        "# What you know\nShare each fact only when the agent asks for it or when the "
        "conversation cannot move on without it; never list everything at once.\n"
        + (known or "- (nothing beyond your situation above)"),
    ]
    if unknown:
        parts.append(
            "# What you do not know\nIf the agent asks about these, say you do not know.\n"
            + unknown
        )
    parts.append(
        "# Rules\n"
        "- Write short, natural messages: one to three sentences, in your persona's tone.\n"
        "- Never invent facts: no ids, numbers, names, dates or preferences that are not given "
        "above. If asked for something you were not given, say you do not have it.\n"
        "- When the agent describes what it is about to do and asks you to confirm, say yes "
        "only if it matches what you want; otherwise say no and say what you want instead.\n"
        "- Do not ask for anything beyond what your situation describes.\n"
        f"- When what you wanted is done, or the agent has clearly explained why it cannot be "
        f"done, reply with {STOP} and nothing else.\n"
        f"- If the agent hands you over to a human agent, reply with {TRANSFER}.\n"
        f"- If the agent cannot help with your request at all, reply with {OUT_OF_SCOPE}."
    )
    parts.append(
        f"# Your first message\nOpen the conversation in your own words, along the "
        f'lines of: "{scenario.opening}"'
    )
    return "\n\n".join(parts)
