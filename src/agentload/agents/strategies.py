"""Agent strategies: native tool calling, react and act (text actions), and two controls.

- ``tool-calling``: the policy is the system prompt, the tools go in the request's `tools`;
  the model answers with `tool_calls` or text.
- ``react`` / ``act``: the tools are described in the system prompt and the model writes one
  action as JSON in its text (react: a ``Thought:`` first); tool results come back as user
  messages starting with ``Observation:``.
- ``few-shot``: tool-calling with example conversations after the policy in the system
  prompt, read from a JSONL file (τ-bench's few-shot agent; see `load_few_shot`).
- ``oracle``: no model; executes the task's gold actions one per step, then states the
  required outputs. It scores 1.0 on every task, which checks the domain and the runner.
- ``noop``: no model; always replies the same sentence and never calls a tool. It scores 0.
"""

from __future__ import annotations

import functools
import json
import random
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
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
from agentload.domains import get_domain
from agentload.domains.base import Domain, Task
from agentload.plugins import AGENTS

ORACLE_CLOSING = "Thank you for contacting us. Have a good day."


@functools.lru_cache(maxsize=32)
def _schemas(domain_name: str, data_version: str) -> tuple[dict[str, Any], ...]:

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


FEW_SHOT_EXAMPLES = 5  # examples shown per episode (τ-bench's few-shot agent)
FEW_SHOT_MISSING = (
    "agent 'few-shot' needs a file of example conversations: set workload.few_shot "
    "(--few-shot FILE)"
)


class FewShotError(ValueError):
    """A few-shot examples file that cannot be used; the message names the file (and the
    line)."""


def load_few_shot(path: str | Path) -> tuple[str, ...]:
    """The examples of a few-shot file, read once per path and version of the file.

    JSONL, one example a line (blank lines skipped), each a JSON object with either
    ``"messages_display"``: the conversation as text (τ-bench's few-shot files), or
    ``"messages"``: OpenAI chat messages, shown one a line as ``role: content`` (system
    messages left out, tool calls as ``assistant (tool call): name {arguments}``), so that a
    line of an agentload trajectories.jsonl is an example too. Other keys are ignored.
    """
    p = Path(path)
    try:
        st = p.stat()
    except OSError as e:
        raise FewShotError(f"few-shot file {p}: cannot read it ({e.strerror})") from None
    return _load_few_shot(str(p), st.st_mtime_ns, st.st_size)


@functools.lru_cache(maxsize=8)
def _load_few_shot(path: str, mtime_ns: int, size: int) -> tuple[str, ...]:
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        why = e.strerror if isinstance(e, OSError) else "not UTF-8 text"
        raise FewShotError(f"few-shot file {path}: cannot read it ({why})") from None
    examples = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            obj = orjson.loads(line)
        except orjson.JSONDecodeError as e:
            raise FewShotError(f"few-shot file {path}, line {n}: not valid JSON ({e})") from None
        try:
            examples.append(_example(obj))
        except ValueError as e:
            raise FewShotError(f"few-shot file {path}, line {n}: {e}") from None
    if not examples:
        raise FewShotError(f"few-shot file {path}: no examples (one JSON object a line)")
    return tuple(examples)


def _example(obj: Any) -> str:
    if isinstance(obj, Mapping):
        shown = obj.get("messages_display")
        if isinstance(shown, str) and shown.strip():
            return shown.strip()
        messages = obj.get("messages")
        if isinstance(messages, list) and messages:
            return _render_messages(messages)
    raise ValueError('expected a JSON object with a "messages_display" text or a "messages" list')


def _render_messages(messages: list[Any]) -> str:
    lines = []
    for i, m in enumerate(messages, 1):
        if not isinstance(m, Mapping) or not isinstance(m.get("role"), str):
            raise ValueError(f'"messages" item {i} is not a message with a "role"')
        role = m["role"]
        if role == "system":  # the policy is in the prompt already
            continue
        content = m.get("content")
        if isinstance(content, list):
            content = "".join(p.get("text", "") for p in content if isinstance(p, Mapping))
        if content:
            lines.append(f"{role}: {content if isinstance(content, str) else json.dumps(content)}")
        for tc in m.get("tool_calls") or ():
            fn = (tc.get("function") or {}) if isinstance(tc, Mapping) else {}
            args = fn.get("arguments")
            args = args if isinstance(args, str) else json.dumps(args or {})
            lines.append(f"{role} (tool call): {fn.get('name', '')} {args}")
    if not lines:
        raise ValueError('"messages" holds no conversation (only system messages)')
    return "\n".join(lines)


def few_shot_system_prompt(policy: str, examples: Sequence[str], task_id: str) -> str:
    """The policy, then `FEW_SHOT_EXAMPLES` of the examples (all of them when there are no
    more), as τ-bench lays them out. τ-bench draws them anew for every episode; here the draw is
    seeded by the task, so every trial of a task sees the same ones and a run is repeatable."""
    chosen = list(examples)
    if len(chosen) > FEW_SHOT_EXAMPLES:
        chosen = random.Random(f"agentload/few-shot/{task_id}").sample(chosen, FEW_SHOT_EXAMPLES)
    shown = "\n\n".join(f"Example {i}:\n{e}" for i, e in enumerate(chosen, 1))
    return f"{policy.rstrip()}\n\n{shown}"


class FewShotAgent(ToolCallingAgent):
    """tool-calling, with example conversations after the policy in the system prompt."""

    name = "few-shot"

    def __init__(
        self, domain: Domain, task: Task, examples: Sequence[str], *, keep_reasoning: bool = False
    ) -> None:
        super().__init__(domain, task, keep_reasoning=keep_reasoning)
        self.messages[0]["content"] = few_shot_system_prompt(
            domain.system_prompt(), examples, task.id
        )


class FewShotFactory:
    """The ``few-shot`` registry entry.

    Its examples file is a setting of the entry (`examples_file`, set by `use_few_shot_file`,
    which `EpisodeOptions(few_shot=...)` calls) rather than an argument, so the factory keeps
    the `factory(domain, task, *, keep_reasoning)` form of every strategy and both episode
    loops (built-in and τ²) build it through `make_agent` unchanged.
    """

    def __init__(self) -> None:
        self.examples_file: str | None = None

    def __call__(self, domain: Domain, task: Task, *, keep_reasoning: bool = False) -> Agent:
        if self.examples_file is None:
            raise ValueError(FEW_SHOT_MISSING)
        examples = load_few_shot(self.examples_file)
        return FewShotAgent(domain, task, examples, keep_reasoning=keep_reasoning)


few_shot_agent = FewShotFactory()


def use_few_shot_file(path: str | Path | None) -> None:
    """Point the ``few-shot`` strategy of this process at an examples file (read and checked
    now: FewShotError names the file and line), or at none."""
    if path is not None:
        load_few_shot(path)
    few_shot_agent.examples_file = None if path is None else str(path)


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
