"""The text action format of the react and act strategies (defined in
`agentload.domains.text_actions`, which grading shares; re-exported here for the agents)."""

from agentload.domains.text_actions import (
    RESPOND,
    RESPOND_KEYS,
    ActionParseError,
    ParsedAction,
    format_action,
    parse_action,
)

__all__ = [
    "RESPOND",
    "RESPOND_KEYS",
    "ActionParseError",
    "ParsedAction",
    "format_action",
    "parse_action",
]
