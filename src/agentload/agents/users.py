"""User simulators: an LLM playing the customer, or a scripted customer with no LLM.

Both answer the agent's text replies one at a time; `reply(None, ...)` gives the customer's
opening message. A reply containing a stop token (see `prompts.STOP_TOKENS`) ends the episode.
The LLM customer follows one of τ-bench's user strategies (llm, react, verify, reflection;
`agentload.agents.user_strategies`), each registered under its own name.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from agentload.agents.base import LLMCall
from agentload.agents.prompts import AGENT_GREETING, STOP, STOP_TOKENS, user_system_prompt
from agentload.agents.user_strategies import check_strategy, strategy_system_prompt, user_reply
from agentload.client import CallResult
from agentload.domains.base import Task, UserScenario
from agentload.plugins import USERS


@dataclass(slots=True)
class UserTurn:
    text: str
    result: CallResult | None = None  # None when no model was called

    @property
    def stop(self) -> bool:
        return is_stop(self.text)


def is_stop(text: str) -> bool:
    return any(tok in text for tok in STOP_TOKENS)


class LlmUser:
    """An LLM plays the customer from the scenario prompt; it sees the conversation with the
    roles flipped (the agent's replies are its `user` messages). `strategy` is one of
    `user_strategies.USER_STRATEGIES`; its extra calls (checks, reflections, new drafts) are
    user calls like the first."""

    uses_llm = True

    def __init__(self, task: Task, *, strategy: str = "llm") -> None:
        self.name = self.strategy = check_strategy(strategy)
        prompt = strategy_system_prompt(strategy, user_system_prompt(task.scenario))
        self.messages: list[dict[str, Any]] = [
            {"role": "system", "content": prompt},
            {"role": "user", "content": AGENT_GREETING},
        ]

    async def reply(self, agent_text: str | None, llm: LLMCall) -> UserTurn:
        if agent_text is not None:
            self.messages.append({"role": "user", "content": agent_text})
        said = await user_reply(self.strategy, self.messages, llm)
        if not said.ok or said.message is None:
            return UserTurn("", said.result)
        # Reasoning is never kept: the customer's thoughts are not part of the conversation.
        self.messages.append(said.message)
        return UserTurn(said.text, said.result)


_SPACES = re.compile(r"\s+")
# The agent asks the customer to approve an action.
_CONFIRM = re.compile(
    r"\b(confirm|proceed|go ahead|shall i|should i|would you like me to|do you want me to"
    r"|may i|ok to|okay to|yes or no|yes/no|is that (?:ok|okay|correct|right|fine)"
    r"|do you agree|would you like to)\b"
)
# The agent closes the conversation rather than asking for something.
_CLOSING = re.compile(
    r"anything else|something else|further (?:assist|help)|help you with (?:anything|today)"
    r"|have a (?:good|great|nice)|goodbye"
)
_GENERIC = {"id", "number", "code", "name", "value", "no"}
_ID_NOUN = r"(?:ids?\b|numbers?\b|codes?\b|no\b|#)"


def _norm(text: str) -> str:
    return _SPACES.sub(" ", text.lower().replace("_", " "))


def _label(key: str) -> str:
    return key.replace("_", " ").lower()


def _full_pattern(label: str) -> re.Pattern[str]:
    """The fact named in full, as words ("date" is not in "update"); a label ending in id /
    number / code also matches with any of those ("order number" asks for the order id)."""
    words = label.split()
    alts = [r"\b" + re.escape(label) + r"s?\b"]
    if len(words) > 1 and words[-1] in ("id", "number", "code"):
        alts.append(r"\b" + re.escape(" ".join(words[:-1])) + r" " + _ID_NOUN)
    return re.compile("|".join(alts))


class ScriptedUser:
    """A deterministic customer for pure serving benchmarks (no user LLM).

    Opening: the scenario's opening line. Then, for each agent reply, in order:
    a known fact named in full ("user id") and not given yet -> that fact; a confirmation
    question -> "yes"; a known fact named in part ("your reservation?") -> that fact; a
    closing or a statement (no question mark) -> the agent's final answer -> ``###STOP###``;
    any other question -> "I don't know". ``###STOP###`` at the latest on turn `max_turns`.
    """

    name = "scripted"
    uses_llm = False

    def __init__(self, task: Task, *, max_turns: int = 20) -> None:
        self.scenario: UserScenario = task.scenario
        self.max_turns = max(1, max_turns)
        self.turns = 0
        self.given: set[str] = set()
        self._labels: Mapping[str, str] = {k: _label(k) for k in self.scenario.known_info}
        self._full = {k: _full_pattern(lab) for k, lab in self._labels.items()}
        self._parts: Mapping[str, list[str]] = {
            k: [w for w in lab.split() if w not in _GENERIC] for k, lab in self._labels.items()
        }

    async def reply(self, agent_text: str | None, llm: LLMCall) -> UserTurn:
        return UserTurn(self.answer(agent_text))

    def answer(self, agent_text: str | None) -> str:
        self.turns += 1
        if agent_text is None:
            return self.scenario.opening
        if self.turns >= self.max_turns:
            return STOP
        text = _norm(agent_text)
        words = set(re.findall(r"[a-z0-9]+", text))
        full = [k for k, pat in self._full.items() if pat.search(text)]
        fresh = [k for k in full if k not in self.given]
        if fresh:
            return self._facts(fresh)
        if _CONFIRM.search(text):
            return "Yes, please go ahead."
        partial = [
            k
            for k in self._labels
            if k not in full and self._parts[k] and all(w in words for w in self._parts[k])
        ]
        asking = "?" in text
        if asking and (full or partial):
            return self._facts(full + partial)
        if not asking or _CLOSING.search(text):
            return STOP
        return "I'm sorry, I don't know that."

    def _facts(self, keys: list[str]) -> str:
        self.given.update(keys)
        info = self.scenario.known_info
        return " ".join(f"My {self._labels[k]} is {info[k]}." for k in keys)


def scripted_user(task: Task, *, max_turns: int = 20) -> ScriptedUser:
    return ScriptedUser(task, max_turns=max_turns)


def llm_user(task: Task, *, max_turns: int = 20) -> LlmUser:
    return LlmUser(task)


def react_user(task: Task, *, max_turns: int = 20) -> LlmUser:
    return LlmUser(task, strategy="react")


def verify_user(task: Task, *, max_turns: int = 20) -> LlmUser:
    return LlmUser(task, strategy="verify")


def reflection_user(task: Task, *, max_turns: int = 20) -> LlmUser:
    return LlmUser(task, strategy="reflection")


UserFactory = Callable[..., Any]
"""`factory(task, *, max_turns)`: a fresh user simulator for one episode."""


def make_user(name: str, task: Task, *, max_turns: int = 20) -> Any:
    """A fresh user simulator `name` for one episode."""
    try:
        factory = USERS.get(name)
    except KeyError as e:
        raise ValueError(str(e)) from None
    return factory(task, max_turns=max_turns)
