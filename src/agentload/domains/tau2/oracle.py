"""Scripted players of a τ² task, with no model: an agent that follows the task's gold actions
and a user that follows its scenario (and runs its own gold actions on its phone in telecom).

Both are pure functions of the conversation as the player sees it (OpenAI-format messages),
so the embedded simulator plays them statelessly call by call, and the in-process `oracle`
agent and `scripted` user use the very same functions.

The agent's plan: ask for the customer's details; the gold agent actions in order, one tool
call a step, with a confirmation asked before the first change; each run of the user's own
gold actions asked for in one message that lists them as `name(arguments)`; then a closing
message that states every `communicate_info` string. A perturbed plan (the simulator's
`agent_skill` below 1) makes one mistake: a wrong argument in a change, a skipped change, or
a piece of required information left out.
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from agentload.domains.tau2 import Tau2Domain, Tau2Task
from agentload.domains.tau2.prompts import STOP

DETAILS = (
    "I can help you with that. To get started, could you please give me the details of "
    "your account and your request?"
)
CONFIRM = "Thank you. I have everything I need to make the change you asked for. Shall I proceed?"
ASK_LEAD = "To continue, please do the following on your phone:"
ASK_TAIL = "Let me know once you have done it."
CLOSING = "Is there anything else I can help you with?"
GOODBYE = "Thank you for contacting us. Goodbye."
USER_YES = "Yes, please proceed."
USER_DONE = "Done. I did what you asked."
USER_UNSURE = "I'm not sure about that. Could you please help me with my request?"
USER_MAX_TURNS = 30
MISTAKES = ("wrong_argument", "skipped_write", "omitted_output")


@dataclass(frozen=True)
class Step:
    kind: str  # details | confirm | call | ask | final
    actions: tuple[Mapping[str, Any], ...] = ()
    text: str = ""


def _is_write(domain: Tau2Domain, action: Mapping[str, Any]) -> bool:
    return domain._mutates(action["name"], action.get("requestor", "assistant"))


def plan(
    domain: Tau2Domain, task: Tau2Task, rng: random.Random | None = None, skill: float = 1.0
) -> tuple[list[Step], str | None]:
    """The agent's steps, and the mistake it makes (None for a faithful plan)."""
    crit = task.tau2.get("evaluation_criteria") or {}
    actions = [dict(a) for a in crit.get("actions") or ()]
    infos = list(crit.get("communicate_info") or ())
    mistake = None
    if rng is not None and rng.random() >= skill:
        writes = [
            i
            for i, a in enumerate(actions)
            if a.get("requestor", "assistant") == "assistant" and _is_write(domain, a)
        ]
        choices = (["wrong_argument", "skipped_write"] if writes else []) + (
            ["omitted_output"] if infos else []
        )
        if choices:
            mistake = rng.choice(choices)
            if mistake == "wrong_argument":
                i = rng.choice(writes)
                actions[i] = {**actions[i], "arguments": _perturbed(actions[i]["arguments"], rng)}
            elif mistake == "skipped_write":
                del actions[rng.choice(writes)]
            else:
                del infos[rng.randrange(len(infos))]
    steps = [Step("details", text=DETAILS)]
    confirmed = False
    i = 0
    while i < len(actions):
        a = actions[i]
        if a.get("requestor", "assistant") == "user":
            group = []
            while i < len(actions) and actions[i].get("requestor") == "user":
                group.append(actions[i])
                i += 1
            steps.append(Step("ask", tuple(group), ask_text(group)))
            continue
        if not confirmed and _is_write(domain, a):
            steps.append(Step("confirm", text=CONFIRM))
            confirmed = True
        steps.append(Step("call", (a,)))
        i += 1
    outcome = ("Here is the outcome of your request: " + "; ".join(infos) + ". ") if infos else ""
    steps.append(Step("final", text=outcome + CLOSING))
    return steps, mistake


def _perturbed(arguments: Mapping[str, Any], rng: random.Random) -> dict[str, Any]:
    """One argument changed the way a careless agent changes it."""
    args = json.loads(json.dumps(arguments))
    keys = [k for k, v in args.items() if isinstance(v, str | int | float | bool) and v != ""]
    if not keys:
        return {**args, "note": "x"} if args else {"note": "x"}
    k = rng.choice(keys)
    v = args[k]
    if isinstance(v, bool):
        args[k] = not v
    elif isinstance(v, int | float):
        args[k] = v + 1
    else:
        last = v[-1]
        args[k] = v[:-1] + ("0" if last == "9" else chr(ord(last) + 1) if last.isalnum() else "x")
    return args


def ask_text(group: Sequence[Mapping[str, Any]]) -> str:
    calls = ", ".join(f"{a['name']}({json.dumps(a.get('arguments') or {})})" for a in group)
    return f"{ASK_LEAD} {calls}. {ASK_TAIL}"


_CALL_RE = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)\((\{.*?\})\)")


def asked_calls(text: str) -> list[tuple[str, dict[str, Any]]]:
    """The user actions an agent message asks for (the `ask_text` form)."""
    if ASK_LEAD not in text:
        return []
    out = []
    for m in _CALL_RE.finditer(text.split(ASK_LEAD, 1)[1]):
        try:
            args = json.loads(m.group(2))
        except json.JSONDecodeError:
            continue
        if isinstance(args, dict):
            out.append((m.group(1), args))
    return out


def _content(m: Mapping[str, Any]) -> str:
    c = m.get("content")
    if isinstance(c, list):
        return "".join(p.get("text", "") for p in c if isinstance(p, Mapping))
    return c if isinstance(c, str) else ""


def agent_step(steps: Sequence[Step], messages: Sequence[Mapping[str, Any]]) -> Step:
    """The agent's next step: one step per assistant message it has sent (the greeting
    excluded); after the plan, a goodbye."""
    sent = sum(1 for m in messages if m.get("role") == "assistant") - 1
    sent = max(sent, 0)
    return steps[sent] if sent < len(steps) else Step("final", text=GOODBYE)


def opening(task: Tau2Task) -> str:
    reason = task.scenario.opening.strip() or "I need help with my account."
    return f"Hi! {reason}"


def details(task: Tau2Task) -> str:
    scen = task.tau2.get("user_scenario") or {}
    instr = scen.get("instructions")
    known = instr.get("known_info") if isinstance(instr, dict) else None
    return f"Sure. {known.strip()}" if known else "Sure, here are my details as I know them."


def user_step(
    task: Tau2Task, messages: Sequence[Mapping[str, Any]], user_tools: Sequence[str]
) -> tuple[str, list[tuple[str, dict[str, Any]]]]:
    """The customer's next message (text, or its own tool calls) from its side of the
    conversation: the agent's words as `user` messages, its own as `assistant`."""
    own = [m for m in messages if m.get("role") == "assistant"]
    heard = [m for m in messages if m.get("role") == "user"]
    if not own and len(heard) <= 1:
        return opening(task), []
    if len(own) >= USER_MAX_TURNS:
        return STOP, []
    last_heard = max(i for i, m in enumerate(messages) if m.get("role") == "user")
    since = messages[last_heard + 1 :]
    said = _content(messages[last_heard])
    asked = [(n, a) for n, a in asked_calls(said) if n in user_tools]
    if asked:
        if not any(m.get("role") == "assistant" and m.get("tool_calls") for m in since):
            return "", asked
        return USER_DONE, []
    if said.startswith(DETAILS[:20]):
        return details(task), []
    if said == CONFIRM:
        return USER_YES, []
    if CLOSING in said or said == GOODBYE:
        return f"No, that's all. Thank you! {STOP}", []
    return USER_UNSURE, []
