"""A τ² episode, orchestrated as τ²-bench's half-duplex orchestrator runs one.

- The agent opens with τ²'s greeting; the user simulator answers it.
- Each message passed (agent, user, or a message's tool results) is one step; the episode
  ends at `max_steps` steps (τ²: 200) or once `max_errors` tool calls have failed (τ²: 10),
  both checked only when no tool results are pending.
- A user message holding a stop marker (###STOP###, ###TRANSFER###, ###OUT-OF-SCOPE###) ends
  it; the hand-over tool does not (the user decides).
- In telecom the user has tools of its own (its phone); its tool calls run on the user's
  side of the world and are hidden from the agent.
- Grading is τ²'s (`grading`); natural-language assertions go to the `judge` role when the
  run has one.

Every model call goes through the run's measured clients with the session, role and task
headers, as in every agentload episode, so the serving figures of a τ² run are as complete
as those of a built-in one.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Mapping, Sequence
from typing import Any

import orjson

from agentload.agents.base import AgentTurn, LLMCall, ToolCall, ToolOutcome
from agentload.agents.strategies import OracleAgent, make_agent, parse_tool_call
from agentload.agents.user_strategies import strategy_system_prompt, user_reply
from agentload.client import CallRecord, CallResult, ChatClient
from agentload.domains import get_domain
from agentload.domains.tau2 import Tau2Domain, Tau2Task
from agentload.domains.tau2 import oracle as O
from agentload.domains.tau2.grading import grade
from agentload.domains.tau2.prompts import (
    GREETING,
    JUDGE_SYSTEM_PROMPT,
    is_user_stop,
    judge_user_prompt,
    user_system_prompt,
)
from agentload.domains.tau2.toolkit import World
from agentload.workloads.episode_core import (
    COUNT_KEYS,
    EpisodeOptions,
    EpisodeResult,
    EpisodeSpec,
    ModelCalls,
    Stop,
    drive,
    failed,
    finish,
)

log = logging.getLogger("agentload.tau2")

_now_ns = time.perf_counter_ns

# agentload's termination names for τ²'s endings (τ²'s own name is kept beside it).
TAU2_TERMINATION = {
    "user_stop": "user_stop",
    "agent_stop": "agent_stop",
    "max_steps": "max_steps",
    "too_many_errors": "too_many_errors",
    "budget_exceeded": "timeout",
    "protocol_error": "agent_error",
    "infra_error": "infrastructure_error",
    "context_overflow": "context_window_exceeded",
}


class Tau2OracleAgent(OracleAgent):
    """`oracle` on a τ² task: the scripted agent of `domains.tau2.oracle`, faithful (no
    mistakes); the conversation is kept as the built-in oracle keeps it."""

    def __init__(self, domain: Tau2Domain, task: Tau2Task) -> None:
        self.tools = domain.tool_schemas()
        self.messages = [{"role": "system", "content": domain.system_prompt()}]
        self.steps, _ = O.plan(domain, task)
        self._calls = 0

    async def step(self, llm: LLMCall) -> AgentTurn:
        step = O.agent_step(self.steps, self.messages)
        if step.kind != "call":
            self.messages.append({"role": "assistant", "content": step.text})
            return AgentTurn(text=step.text)
        calls = []
        for a in step.actions:
            self._calls += 1
            calls.append(ToolCall(f"oracle_{self._calls}", a["name"], dict(a["arguments"])))
        self.messages.append({"role": "assistant", "content": None, "tool_calls": _openai(calls)})
        return AgentTurn(tool_calls=calls)


def _openai(calls: Sequence[ToolCall]) -> list[dict[str, Any]]:
    """Tool calls as an OpenAI assistant message carries them."""
    return [
        {
            "id": c.id,
            "type": "function",
            "function": {"name": c.name, "arguments": json.dumps(c.arguments or {})},
        }
        for c in calls
    ]


class _UserTurn:
    __slots__ = ("calls", "result", "text")

    def __init__(
        self, text: str, calls: list[ToolCall] | None = None, result: CallResult | None = None
    ) -> None:
        self.text = text
        self.calls = calls or []
        self.result = result


class Tau2User:
    """τ²'s user simulator: its system prompt (τ²'s guidelines and the task's scenario), the
    conversation with the roles flipped, and its own tools when the domain gives it some.
    `strategy` is a τ-bench user strategy (`agents.user_strategies`: llm, react, verify,
    reflection) or `scripted`, the oracle customer (`oracle.user_step`) instead of a model."""

    STRATEGIES = ("llm", "react", "verify", "reflection", "scripted")

    def __init__(
        self, domain: Tau2Domain, task: Tau2Task, *, scripted: bool = False, strategy: str = "llm"
    ) -> None:
        self.strategy = "scripted" if scripted else strategy
        if self.strategy not in self.STRATEGIES:
            raise ValueError(
                f"user {strategy!r} is not available for τ² tasks ({', '.join(self.STRATEGIES)})"
            )
        self.task = task
        self.scripted = self.strategy == "scripted"
        self.tools = domain.user_tool_schemas() or None
        self.tool_names = [t["function"]["name"] for t in self.tools or ()]
        self.uses_llm = not self.scripted
        prompt = user_system_prompt(task.scenario.instructions, self.tools is not None)
        if not self.scripted:
            prompt = strategy_system_prompt(
                self.strategy, prompt, with_tools=self.tools is not None
            )
        self.messages: list[dict[str, Any]] = [{"role": "system", "content": prompt}]
        self._calls = 0

    def hear(self, text: str) -> None:
        """An agent text message (the user reads it as a `user` message)."""
        self.messages.append({"role": "user", "content": text})

    def add_tool_results(self, outcomes: Sequence[ToolOutcome]) -> None:
        for o in outcomes:
            self.messages.append({"role": "tool", "tool_call_id": o.call.id, "content": o.content})

    async def step(self, llm: LLMCall) -> _UserTurn:
        if self.scripted:
            text, asked = O.user_step(self.task, self.messages, self.tool_names)
            if asked:
                calls = []
                for name, args in asked:
                    self._calls += 1
                    calls.append(ToolCall(id=f"user_{self._calls}", name=name, arguments=args))
                self.messages.append(
                    {"role": "assistant", "content": None, "tool_calls": _openai(calls)}
                )
                return _UserTurn("", calls)
            self.messages.append({"role": "assistant", "content": text})
            return _UserTurn(text)
        # The strategy's extra calls (checks, reflections, new drafts) are user calls too.
        said = await user_reply(self.strategy, self.messages, llm, self.tools)
        if not said.ok or said.message is None:
            return _UserTurn("", result=said.result)
        # The customer's reasoning is never kept: it is not part of the conversation.
        self.messages.append(said.message)
        calls = [parse_tool_call(tc) for tc in said.tool_calls]
        return _UserTurn(said.text, calls, said.result)


def _wire_calls(calls: Sequence[ToolCall], requestor: str) -> list[dict[str, Any]]:
    return [
        {
            "id": c.id,
            "name": c.name,
            "arguments": c.arguments if c.arguments is not None else {},
            "requestor": requestor,
        }
        for c in calls
    ]


class Tau2Episode(ModelCalls):
    def __init__(
        self, spec: EpisodeSpec, clients: Mapping[str, ChatClient], options: EpisodeOptions
    ) -> None:
        self.spec = spec
        self.options = options
        domain = get_domain(spec.task_id.partition("/")[0])
        assert isinstance(domain, Tau2Domain)
        self.domain = domain
        self.task: Tau2Task = domain.get_task(spec.task_id)
        self.db_seed = 0
        self.env = None  # the built-in Environment: τ² grading reads `world` instead
        if options.agent == "oracle":
            self.agent: Any = Tau2OracleAgent(domain, self.task)
        else:
            self.agent = make_agent(
                options.agent, domain, self.task, keep_reasoning=options.keep_reasoning
            )
        self.user = Tau2User(domain, self.task, strategy=options.user)
        self._connect(clients, ("agent", "user", "judge"))
        self.world: World | None = None
        self.trajectory: list[dict[str, Any]] = []  # τ²'s messages, user tool calls included
        self.calls: list[CallRecord] = []
        self.turns = {"agent": 0, "user": 0, "judge": 0}
        self.counts = dict.fromkeys(COUNT_KEYS, 0)
        self.counts["user_tool_calls"] = 0
        self.steps = 0  # τ²'s steps: messages passed
        self.user_turns = 0
        self.errors = 0  # failed tool calls, agent's and user's
        self.tool_s = 0.0
        self.replies: list[str] = []
        self.max_steps = options.tau2.max_steps
        self.max_errors = options.tau2.max_errors

    # --- the loop ---------------------------------------------------------------------------

    def _step(self) -> None:
        self.steps += 1

    def _check_limits(self) -> None:
        if self.steps >= self.max_steps:
            raise Stop("max_steps", f"{self.max_steps} steps")
        if self.errors >= self.max_errors:
            raise Stop(
                "too_many_errors",
                f"{self.errors} tool errors (max_errors={self.max_errors})",
            )

    async def run(self) -> None:
        self.world = self.domain.task_world(self.task)
        history = (self.task.tau2.get("initial_state") or {}).get("message_history") or ()
        agent_next = self._continue(history) if history else False
        if not history:
            self.trajectory.append({"role": "assistant", "content": GREETING, "tool_calls": None})
            self.agent.messages.append({"role": "assistant", "content": GREETING})
            self.user.hear(GREETING)
        if agent_next:
            await self.agent_turn()
        while True:
            await self.user_turn()
            await self.agent_turn()

    def _continue(self, history: Sequence[Mapping[str, Any]]) -> bool:
        """Start from a task's message history, as τ² does: the trajectory begins with it,
        the agent and the user each see their side of it (its state changes are already in
        the world). True when the agent speaks next, False when the user does."""
        agent, user = self.agent.messages, self.user.messages
        for h in history:
            role, text = h.get("role"), h.get("content")
            calls = [
                ToolCall(str(c.get("id") or ""), c["name"], dict(c.get("arguments") or {}))
                for c in h.get("tool_calls") or ()
            ]
            if role == "tool":
                msg = {"role": "tool", "tool_call_id": str(h.get("id") or ""), "content": text}
                requestor = h.get("requestor") or "assistant"
                (agent if requestor == "assistant" else user).append(msg)
                self.trajectory.append(
                    {
                        "role": "tool",
                        "id": str(h.get("id") or ""),
                        "content": text,
                        "requestor": requestor,
                        "error": bool(h.get("error")),
                    }
                )
                continue
            wire = {"role": "assistant", "content": text, "tool_calls": _openai(calls)}
            if role == "assistant":
                if calls:
                    agent.append(wire)
                else:
                    agent.append({"role": "assistant", "content": text})
                    self.user.hear(text or "")
            elif role == "user":
                if calls:
                    user.append(wire)
                else:
                    agent.append({"role": "user", "content": text})
                    user.append({"role": "assistant", "content": text})
            self.trajectory.append(
                {
                    "role": role,
                    "content": text,
                    "tool_calls": _wire_calls(calls, "user" if role == "user" else "assistant")
                    or None,
                }
            )
        last = history[-1]
        if last.get("role") == "tool":
            return (last.get("requestor") or "assistant") == "assistant"
        if last.get("role") == "user":
            if is_user_stop(last.get("content")):
                raise Stop("user_stop")
            return not last.get("tool_calls")
        return bool(last.get("tool_calls"))

    async def user_turn(self) -> None:
        """The user speaks (running its own tools first, as often as it calls them)."""
        while True:
            ut = await self.user.step(self.user_llm)
            if ut.result is not None and not ut.result.ok:
                raise failed(ut.result, "user")
            self.user_turns += 1
            calls = [c for c in ut.calls]
            self.trajectory.append(
                {
                    "role": "user",
                    "content": ut.text or None,
                    "tool_calls": _wire_calls(calls, "user") or None,
                }
            )
            self._step()
            if calls:
                outcomes = await self.run_tools(calls, "user")
                self.user.add_tool_results(outcomes)
                self._step()
                self._check_limits()
                continue
            if not ut.text.strip():
                raise Stop("protocol_error", "user: empty message")
            if is_user_stop(ut.text):
                raise Stop("user_stop")
            self.agent.add_user_message(ut.text)
            self._check_limits()
            return

    async def agent_turn(self) -> None:
        """The agent acts until it says something to the user."""
        while True:
            turn: AgentTurn = await self.agent.step(self.agent_llm)
            if turn.result is not None and not turn.result.ok:
                raise failed(turn.result, "agent")
            if turn.parse_error is not None:
                # react / act: an unparsable action is one failed step, as a failed call
                self.counts["parse_errors"] += 1
                self.errors += 1
                self.trajectory.append(
                    {"role": "assistant", "content": turn.text, "tool_calls": None}
                )
                self._step()
                self._check_limits()
                self.agent.add_parse_retry(turn.parse_error)
                continue
            if turn.empty:
                raise Stop("protocol_error", "agent: empty message (no text, no tool call)")
            self.trajectory.append(
                {
                    "role": "assistant",
                    "content": turn.text or None,
                    "tool_calls": _wire_calls(turn.tool_calls, "assistant") or None,
                }
            )
            self._step()
            if turn.tool_calls:
                if turn.text.strip():
                    self.counts["text_and_tool_messages"] += 1
                if len(turn.tool_calls) > 1:
                    self.counts["parallel_tool_messages"] += 1
                outcomes = await self.run_tools(turn.tool_calls, "assistant")
                self.agent.add_tool_results(outcomes)
                self._step()
                self._check_limits()
                continue
            self.replies.append(turn.text)
            self.user.hear(turn.text)
            self._check_limits()
            return

    async def run_tools(self, calls: Sequence[ToolCall], requestor: str) -> list[ToolOutcome]:
        world = self.world
        assert world is not None
        counts = self.counts
        outcomes: list[ToolOutcome] = []
        t0 = _now_ns()
        for call in calls:
            counts["tool_calls" if requestor == "assistant" else "user_tool_calls"] += 1
            if call.error is not None:
                text, error = f"Error: {call.error}", True
                counts["protocol_errors"] += 1
            else:
                text, error = world.call(requestor, call.name, call.arguments or {})
                if error:
                    counts["tool_errors"] += 1
            if error:
                self.errors += 1
            self.trajectory.append(
                {
                    "role": "tool",
                    "id": call.id,
                    "content": text,
                    "requestor": requestor,
                    "error": error,
                }
            )
            outcomes.append(ToolOutcome(call, text, not error))
        rng = self.latency_rng
        if rng is not None and requestor == "assistant":
            await asyncio.sleep(max(self.options.tool_latency.draw(rng) for _ in calls))
        self.tool_s += (_now_ns() - t0) / 1e9
        return outcomes

    # --- the end ----------------------------------------------------------------------------

    async def judge(self, termination: str) -> tuple[list[dict[str, Any]] | None, str | None]:
        """The judge's verdicts on the task's NL assertions: (None, why) when not asked."""
        crit = self.task.tau2.get("evaluation_criteria") or {}
        assertions = list(crit.get("nl_assertions") or ())
        if not self.task.needs_judge or termination not in ("user_stop", "agent_stop"):
            return None, None
        client = self.clients.get("judge")
        if client is None:
            return None, "no judge endpoint"
        conversation = "\n".join(f"{m['role']}: {m.get('content')}" for m in self.trajectory)
        messages = [
            {"role": "system", "content": JUDGE_SYSTEM_PROMPT},
            {"role": "user", "content": judge_user_prompt(conversation, assertions)},
        ]
        res = await self._call("judge", messages, None)
        if not res.ok:
            return None, f"judge call failed: {res.record.error_kind}"
        try:
            verdict = orjson.loads(_json_body(res.content))
            checks = [
                {
                    "nl_assertion": r["expectedOutcome"],
                    "met": bool(r["metExpectation"]),
                    "justification": r.get("reasoning", ""),
                }
                for r in verdict.get("results", [])
            ]
        except (orjson.JSONDecodeError, KeyError, TypeError, AttributeError) as e:
            return None, f"judge answer is not τ²'s JSON verdict: {type(e).__name__}"
        return checks, None


def _json_body(text: str) -> str:
    """The JSON object of a judge's answer (models often wrap it in a code fence)."""
    start, end = text.find("{"), text.rfind("}")
    return text[start : end + 1] if start >= 0 and end > start else text


async def run_tau2_episode(
    spec: EpisodeSpec, clients: Mapping[str, ChatClient], options: EpisodeOptions
) -> EpisodeResult:
    """Run one τ² episode to its end (the contract of `workloads.episode.run_episode`)."""
    try:
        ep = Tau2Episode(spec, clients, options)
    except KeyError as e:
        raise ValueError(str(e.args[0]) if e.args else str(e)) from None
    started_at = time.time()
    start_ns = _now_ns()
    termination, error = await drive(ep.run, spec, options.budget_s)
    tau2_termination = TAU2_TERMINATION.get(termination, termination)
    nl_checks, judge_note = await ep.judge(tau2_termination)
    end_ns = _now_ns()
    try:
        reward_info = grade(
            ep.domain,
            ep.task,
            ep.trajectory,
            tau2_termination,
            world=ep.world,
            nl_checks=nl_checks,
        )
    except Exception as e:  # a grader bug must not take the run down
        log.exception("grading %s failed", spec.task_id)
        reward_info = {"reward": 0.0, "error": repr(e), "partial": False}
    if judge_note:
        reward_info["judge"] = judge_note
    tau2 = {
        "task_id": ep.task.tau2_id,
        "domain": ep.domain.key,
        "messages": ep.trajectory,
        "termination_reason": tau2_termination,
        "reward_info": reward_info,
        "user_messages": ep.user.messages,
        "user_tools": ep.user.tools or [],
    }
    return finish(
        ep,
        termination,
        error,
        started_at,
        start_ns,
        end_ns,
        grade=reward_info,
        reward_partial=bool(reward_info.get("partial")),
        tau2_termination=tau2_termination,
        tau2=tau2,
    )
