"""The text action format of the react and act strategies, and its parser.

It lives with the domains because grading reads it too: a stored react/act trajectory's
actions are parsed back from its messages (`domains.base.trajectory_actions`), and the
domain layer must not depend on the agents built on top of it.

An action is one JSON object ``{"name": ..., "arguments": {...}}`` after an ``Action:`` line;
react messages put a ``Thought:`` before it. ``respond`` is the action that talks to the user.
The parser is lenient about layout (code fences, a missing ``Action:`` label, arguments given
as a JSON string) and strict about content, so a parse error always names what was wrong.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

RESPOND = "respond"
# Keys a model may use for the text of a respond action; the first present wins.
RESPOND_KEYS = ("content", "message", "text", "response")

_ACTION_LABEL = re.compile(r"^[ \t>*#_]*action[ \t*_]*:", re.IGNORECASE | re.MULTILINE)
_THOUGHT_LABEL = re.compile(r"^[ \t>*#_]*thought[ \t*_]*:", re.IGNORECASE | re.MULTILINE)
_decoder = json.JSONDecoder()


class ActionParseError(ValueError):
    """The message holds no usable action; the message is shown to the model on retry."""


@dataclass(slots=True)
class ParsedAction:
    name: str
    arguments: dict[str, Any] = field(default_factory=dict)
    thought: str = ""

    @property
    def is_respond(self) -> bool:
        return self.name == RESPOND

    def respond_text(self) -> str:
        for key in RESPOND_KEYS:
            value = self.arguments.get(key)
            if isinstance(value, str):
                return value
        return ""


def _first_object(text: str) -> tuple[Any, str | None]:
    """The first JSON object with a "name" key that starts at a '{' in `text` (braces in
    prose before it are skipped); failing that, the first JSON value found, or the first
    decoding error."""
    first_value: Any = None
    found = False
    error: str | None = None
    start = text.find("{")
    while start != -1:
        try:
            value, _ = _decoder.raw_decode(text, start)
        except json.JSONDecodeError as e:
            if error is None:
                error = f"invalid JSON: {e.msg} (line {e.lineno} column {e.colno})"
        else:
            if isinstance(value, dict) and "name" in value:
                return value, None
            if not found and error is None:
                first_value, found = value, True
        start = text.find("{", start + 1)
    if found:
        return first_value, None
    return None, error or "no JSON object found"


def parse_action(text: str | None, *, require_thought: bool = False) -> ParsedAction:
    """Parse one action from a model message; raises :class:`ActionParseError`."""
    if not text or not text.strip():
        raise ActionParseError("the message is empty; it must contain one action")
    labels = list(_ACTION_LABEL.finditer(text))
    thought = ""
    if labels:
        # The last label wins: models sometimes echo the format before the real action.
        body = text[labels[-1].end() :]
        head = text[: labels[-1].start()]
        m = _THOUGHT_LABEL.search(head)
        thought = (head[m.end() :] if m else head).strip()
    else:
        body = text
        m = _THOUGHT_LABEL.search(text)
        if m:
            brace = text.find("{", m.end())
            thought = text[m.end() : brace if brace != -1 else len(text)].strip()
    if require_thought and not thought:
        raise ActionParseError("missing 'Thought:' before the action")
    value, error = _first_object(body)
    if error is not None:
        where = "after 'Action:'" if labels else "in the message"
        raise ActionParseError(f"{error} {where}")
    if not isinstance(value, dict):
        raise ActionParseError("the action must be a JSON object")
    name = value.get("name")
    if not isinstance(name, str) or not name.strip():
        raise ActionParseError('the action object needs a "name" string')
    args = value.get("arguments", {})
    if args is None:
        args = {}
    if isinstance(args, str):
        # Arguments double-encoded as a JSON string (the native tool-call habit).
        try:
            args = json.loads(args) if args.strip() else {}
        except json.JSONDecodeError as e:
            raise ActionParseError(f'"arguments" is a string that is not JSON: {e.msg}') from None
    if not isinstance(args, dict):
        raise ActionParseError('"arguments" must be a JSON object')
    action = ParsedAction(name=name.strip(), arguments=args, thought=thought)
    if action.is_respond and not action.respond_text().strip():
        raise ActionParseError(
            'a "respond" action needs {"arguments": {"content": "<text for the user>"}}'
        )
    return action


def format_action(name: str, arguments: dict[str, Any]) -> str:
    """An action in the canonical text form (what the prompts show)."""
    return json.dumps({"name": name, "arguments": arguments}, ensure_ascii=False)
