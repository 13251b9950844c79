"""Live episodes: an agent serves a simulated customer with a domain's tools, measured call
by call.

The loop: the user's opening goes to the agent; each agent step is one model call (or one
scripted step for the oracle / noop controls); its tool calls are executed in order against
the episode's environment and their results go back to the agent; a text reply without tool
calls goes to the user simulator, whose answer goes back to the agent; until a termination
reason (see `TERMINATIONS` and docs/episodes.md). Every model call goes through a
`ChatClient` with the session, role and task headers, and the episode ends with a session
record, a trajectory and the calls' records.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping

from agentload.agents.base import AgentTurn, ToolCall, ToolOutcome
from agentload.agents.strategies import make_agent, transfer_tool_name
from agentload.agents.users import is_stop, make_user
from agentload.client import CallRecord, ChatClient
from agentload.domains import Environment, get_domain
from agentload.results.records import SESSION_SCHEMA, TRAJECTORY_SCHEMA

# The parts every episode loop shares live in episode_core (below τ²'s loop, which this
# module runs); they are importable from here too, where the episode's users find them.
from agentload.workloads.episode_core import (
    COUNT_KEYS,
    TERMINATIONS,
    EpisodeEnd,
    EpisodeOptions,
    EpisodeResult,
    EpisodeSpec,
    ModelCalls,
    Stop,
    ToolLatency,
    drive,
    episode_records,
    episode_seed,
    failed,
    finish,
    grade_environment,
    next_user_message,
    request_seed_for,
)

__all__ = [
    "COUNT_KEYS",
    "SESSION_SCHEMA",
    "TERMINATIONS",
    "TRAJECTORY_SCHEMA",
    "EpisodeEnd",
    "EpisodeOptions",
    "EpisodeResult",
    "EpisodeSpec",
    "ModelCalls",
    "Stop",
    "ToolLatency",
    "drive",
    "episode_records",
    "episode_seed",
    "grade_environment",
    "next_user_message",
    "request_seed_for",
    "run_episode",
]

log = logging.getLogger("agentload.episode")

_now_ns = time.perf_counter_ns


class _Episode(ModelCalls):
    def __init__(
        self, spec: EpisodeSpec, clients: Mapping[str, ChatClient], options: EpisodeOptions
    ) -> None:
        self.spec = spec
        self.options = options
        domain_name, sep, _ = spec.task_id.partition("/")
        if not sep:
            raise ValueError(f"task id {spec.task_id!r} is not of the form <domain>/<NNN>")
        self.domain = get_domain(domain_name)
        self.task = self.domain.get_task(spec.task_id)
        # Tasks are written against one database; the episode seed drives sampling only.
        self.db_seed = int(getattr(self.task, "db_seed", 0))
        self.agent = make_agent(
            options.agent, self.domain, self.task, keep_reasoning=options.keep_reasoning
        )
        self.user = make_user(options.user, self.task, max_turns=options.max_user_turns)
        self._connect(clients, ("agent", "user"))
        self.env: Environment | None = None
        self.transfer_tool = transfer_tool_name(self.domain)
        self.calls: list[CallRecord] = []
        self.turns = {"agent": 0, "user": 0}
        self.counts = dict.fromkeys(COUNT_KEYS, 0)
        self.steps = 0
        self.user_turns = 0
        self.errors = 0
        self.tool_s = 0.0
        self.replies: list[str] = []

    # --- the loop -------------------------------------------------------------------------

    async def user_says(self, agent_text: str | None) -> str:
        return await next_user_message(self, agent_text)

    async def run(self) -> None:
        agent = self.agent
        opening = await self.user_says(None)
        agent.add_user_message(opening)
        if is_stop(opening):
            raise Stop("user_stop")
        retried = False
        while True:
            if self.steps >= self.options.max_steps:
                raise Stop("max_steps", f"{self.options.max_steps} agent steps")
            turn: AgentTurn = await agent.step(self.agent_llm)
            self.steps += 1
            if turn.result is not None and not turn.result.ok:
                raise failed(turn.result, "agent")
            if turn.parse_error is not None:
                self.counts["parse_errors"] += 1
                self.errors += 1
                if retried:
                    raise Stop(
                        "protocol_error", f"agent: unparsable action twice: {turn.parse_error}"
                    )
                self._check_errors()
                agent.add_parse_retry(turn.parse_error)
                retried = True
                continue
            retried = False
            if turn.empty:
                why = turn.result.record.finish_reason if turn.result is not None else None
                raise Stop(
                    "protocol_error",
                    "agent: empty message (no text, no tool call"
                    + (f"; finish_reason {why})" if why else ")"),
                )
            if turn.tool_calls:
                if turn.text.strip():
                    self.counts["text_and_tool_messages"] += 1
                if len(turn.tool_calls) > 1:
                    self.counts["parallel_tool_messages"] += 1
                transferred = await self.run_tools(turn.tool_calls)
                if transferred:
                    raise Stop("agent_transfer")
                self._check_errors()
                continue
            self.replies.append(turn.text)
            answer = await self.user_says(turn.text)
            agent.add_user_message(answer)
            if is_stop(answer):
                raise Stop("user_stop")

    def _check_errors(self) -> None:
        if self.errors > self.options.max_errors:
            raise Stop(
                "too_many_errors",
                f"{self.errors} tool/protocol errors (max_errors={self.options.max_errors})",
            )

    async def run_tools(self, calls: list[ToolCall]) -> bool:
        """Execute every call of one message in order (none is dropped); True when the
        hand-over tool was among them."""
        env = self.env
        if env is None:
            # Created on the first tool call: a conversation without tools never pays for
            # a database copy.
            env = self.env = Environment(self.domain, self.db_seed)
        counts = self.counts
        outcomes: list[ToolOutcome] = []
        transferred = False
        t0 = _now_ns()
        for call in calls:
            counts["tool_calls"] += 1
            if call.error is not None:
                counts["protocol_errors"] += 1
                self.errors += 1
                outcomes.append(ToolOutcome(call, f"Error: {call.error}", False))
                continue
            if self.domain.tool(call.name) is None:
                counts["protocol_errors"] += 1
                self.errors += 1
                outcomes.append(ToolOutcome(call, f"Error: unknown tool {call.name!r}", False))
                continue
            r = env.execute(call.name, call.arguments)
            if not r.ok:
                counts["tool_errors"] += 1
                self.errors += 1
            if call.name == self.transfer_tool:
                transferred = True
            outcomes.append(ToolOutcome(call, r.content, r.ok))
        rng = self.latency_rng
        if rng is not None:
            # Calls of one message run concurrently in a real system: the slowest one counts.
            await asyncio.sleep(max(self.options.tool_latency.draw(rng) for _ in calls))
        self.tool_s += (_now_ns() - t0) / 1e9
        self.agent.add_tool_results(outcomes)
        return transferred


async def run_episode(
    spec: EpisodeSpec, clients: Mapping[str, ChatClient], options: EpisodeOptions
) -> EpisodeResult:
    """Run one episode to its end; see the module docs.

    Raises ValueError, before any call, for an unknown task, agent or user or a missing
    client; afterwards never raises except on cancellation (a bug inside the loop ends the
    episode as `infra_error` with the exception in `error`).
    """
    if spec.task_id.startswith("tau2-"):
        # lazy: start-up: τ²'s loop and domains load only for a run of τ² tasks.
        from agentload.workloads.tau2_episode import run_tau2_episode

        return await run_tau2_episode(spec, clients, options)
    try:
        ep = _Episode(spec, clients, options)
    except KeyError as e:
        raise ValueError(str(e.args[0]) if e.args else str(e)) from None
    started_at = time.time()
    start_ns = _now_ns()
    termination, error = await drive(ep.run, spec, options.budget_s)
    end_ns = _now_ns()
    return finish(ep, termination, error, started_at, start_ns, end_ns)
