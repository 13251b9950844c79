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
import hashlib
import logging
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from agentload.agents.base import AgentTurn, ToolCall, ToolOutcome
from agentload.agents.strategies import make_agent, transfer_tool_name
from agentload.agents.users import is_stop, make_user
from agentload.client import CallRecord, CallResult, ChatClient
from agentload.config import ToolLatencyConfig, WorkloadConfig
from agentload.domains import Environment, get_domain
from agentload.domains.base import Domain, Grade, Task, grade_db_hash, hash_db
from agentload.wire import EPISODE_HEADER, ROLE_HEADER, SESSION_HEADER, TASK_HEADER

log = logging.getLogger("agentload.episode")

SESSION_SCHEMA = "agentload.session/1"
TRAJECTORY_SCHEMA = "agentload.trajectory/1"

TERMINATIONS = (
    "user_stop",
    "agent_transfer",
    "max_steps",
    "budget_exceeded",
    "too_many_errors",
    "context_overflow",
    "infra_error",
    "protocol_error",
)
COUNT_KEYS = (
    "agent_calls",
    "user_calls",
    "tool_calls",
    "tool_errors",
    "parse_errors",
    "protocol_errors",
    "failed_calls",
    "text_and_tool_messages",
    "parallel_tool_messages",
)

_now_ns = time.perf_counter_ns


# An episode's options are the workload's configuration, declared (with defaults and bounds)
# once, in agentload.config.
EpisodeOptions = WorkloadConfig
ToolLatency = ToolLatencyConfig


def request_seed_for(option: str | int, episode_seed: int) -> int | None:
    """The `seed` a call carries under the `request_seed` option (None: no seed)."""
    if option == "none":
        return None
    if option == "episode":
        return episode_seed
    if isinstance(option, int) and not isinstance(option, bool):
        return option
    raise ValueError(f"request_seed: expected none, episode or an integer, got {option!r}")


@dataclass
class EpisodeSpec:
    task_id: str
    trial: int
    seed: int  # per (task, trial), chosen by the caller (see episode_seed)
    session_id: str


@dataclass
class EpisodeResult:
    session: dict  # "agentload.session/1"
    trajectory: dict  # "agentload.trajectory/1"
    calls: list[CallRecord]


def episode_seed(base_seed: int, task_id: str, trial: int) -> int:
    """A seed for one (task, trial), stable across processes and Python versions, in the
    range servers accept (31 bits)."""
    digest = hashlib.sha256(f"agentload/episode/{base_seed}/{task_id}/{trial}".encode()).digest()
    return int.from_bytes(digest[:8], "big") & 0x7FFFFFFF


class _Tap:
    """Routes the records a client emits to the episode that made the call.

    A call cancelled by the episode budget raises instead of returning its result, but the
    client still hands its record to `on_record`; the tap catches it there, keyed by call id.
    """

    __slots__ = ("inner", "sinks")

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.sinks: dict[str, list[CallRecord]] = {}

    def __call__(self, rec: CallRecord) -> None:
        sink = self.sinks.pop(rec.call_id, None)
        if sink is not None:
            sink.append(rec)
        if self.inner is not None:
            self.inner(rec)


def _tap(client: ChatClient) -> _Tap:
    cb = client.on_record
    if isinstance(cb, _Tap):
        return cb
    tap = _Tap(cb)
    client.on_record = tap
    return tap


class _Caller(Protocol):
    """What a measured model call needs of an episode (built-in or τ²)."""

    spec: EpisodeSpec
    options: EpisodeOptions
    turns: dict[str, int]
    taps: dict[str, _Tap]
    calls: list[CallRecord]
    clients: Mapping[str, ChatClient]
    request_seed: int | None
    extra_body: dict[str, Any] | None
    headers: dict[str, dict[str, str]]


async def measured_call(
    ep: _Caller, role: str, messages: list[dict[str, Any]], tools: Sequence[dict[str, Any]] | None
) -> CallResult:
    """One model call of an episode's `role`, with the session, role and task headers; its
    record goes to the episode's calls, even when the episode budget cancels the call."""
    opts = ep.options
    turn = ep.turns[role]
    ep.turns[role] = turn + 1
    call_id = f"{ep.spec.session_id}:{role[0]}{turn}"
    tap = ep.taps[role]
    tap.sinks[call_id] = ep.calls
    try:
        res = await ep.clients[role].chat(
            messages,
            tools=tools,
            # A judge (τ² domains) answers at the server's default length.
            max_tokens={"agent": opts.agent_max_tokens, "user": opts.user_max_tokens}.get(role),
            temperature=opts.temperature,
            seed=ep.request_seed,
            extra_body=ep.extra_body,
            headers=ep.headers[role],
            session_id=ep.spec.session_id,
            role=role,
            turn=turn,
            call_id=call_id,
        )
    finally:
        undelivered = tap.sinks.pop(call_id, None) is not None
    if undelivered:
        # on_record was replaced after the tap was installed: keep the record anyway.
        ep.calls.append(res.record)
    return res


class _Stop(Exception):
    """Ends the loop with a termination reason."""

    def __init__(self, termination: str, error: str | None = None) -> None:
        super().__init__(termination)
        self.termination = termination
        self.error = error


class ModelCalls:
    """The measured model calls of an episode loop (built-in or τ²): `agent_llm` and
    `user_llm` as the strategies call them, `_call` for any role."""

    async def _call(
        self, role: str, messages: list[dict[str, Any]], tools: Sequence[dict[str, Any]] | None
    ) -> CallResult:
        return await measured_call(self, role, messages, tools)  # type: ignore[arg-type]

    async def agent_llm(
        self, messages: list[dict[str, Any]], tools: Sequence[dict[str, Any]] | None
    ) -> CallResult:
        return await self._call("agent", messages, tools)

    async def user_llm(
        self, messages: list[dict[str, Any]], tools: Sequence[dict[str, Any]] | None
    ) -> CallResult:
        return await self._call("user", messages, tools)


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
        self.clients = clients
        for role, needed in (("agent", self.agent.uses_llm), ("user", self.user.uses_llm)):
            if needed and clients.get(role) is None:
                raise ValueError(
                    f"agent {options.agent!r} / user {options.user!r} needs clients[{role!r}]"
                )
        self.taps = {role: _tap(c) for role, c in clients.items() if c is not None}
        self.headers = {
            role: {
                SESSION_HEADER: spec.session_id,
                ROLE_HEADER: role,
                TASK_HEADER: spec.task_id,
                EPISODE_HEADER: str(spec.seed),
            }
            for role in ("agent", "user")
        }
        self.extra_body = (
            {"chat_template_kwargs": options.chat_template_kwargs}
            if options.chat_template_kwargs
            else None
        )
        self.env: Environment | None = None
        self.transfer_tool = transfer_tool_name(self.domain)
        self.latency_rng = options.tool_latency.sampler(spec.seed)
        self.request_seed = request_seed_for(options.request_seed, spec.seed)
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
            raise _Stop("user_stop")
        retried = False
        while True:
            if self.steps >= self.options.max_steps:
                raise _Stop("max_steps", f"{self.options.max_steps} agent steps")
            turn: AgentTurn = await agent.step(self.agent_llm)
            self.steps += 1
            if turn.result is not None and not turn.result.ok:
                raise _failed(turn.result, "agent")
            if turn.parse_error is not None:
                self.counts["parse_errors"] += 1
                self.errors += 1
                if retried:
                    raise _Stop(
                        "protocol_error", f"agent: unparsable action twice: {turn.parse_error}"
                    )
                self._check_errors()
                agent.add_parse_retry(turn.parse_error)
                retried = True
                continue
            retried = False
            if turn.empty:
                why = turn.result.record.finish_reason if turn.result is not None else None
                raise _Stop(
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
                    raise _Stop("agent_transfer")
                self._check_errors()
                continue
            self.replies.append(turn.text)
            answer = await self.user_says(turn.text)
            agent.add_user_message(answer)
            if is_stop(answer):
                raise _Stop("user_stop")

    def _check_errors(self) -> None:
        if self.errors > self.options.max_errors:
            raise _Stop(
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
    return _finish(ep, termination, error, started_at, start_ns, end_ns)


async def drive(
    run: Callable[[], Awaitable[None]], spec: EpisodeSpec, budget_s: float | None
) -> tuple[str, str | None]:
    """Run an episode's loop to its end under the wall-time budget: (termination, error).
    The loop ends by raising _Stop; a bug ends it as `infra_error` and is logged, never
    raised, so that it cannot take the run's other episodes down."""
    try:
        async with asyncio.timeout(budget_s):
            await run()
    except _Stop as stop:
        return stop.termination, stop.error
    except TimeoutError:
        return "budget_exceeded", f"episode wall time over {budget_s} s"
    except Exception as e:
        log.exception("episode %s (%s) failed", spec.session_id, spec.task_id)
        return "infra_error", f"internal error: {type(e).__name__}: {e}"
    return "infra_error", "the episode loop returned without an ending"


_BASE_HASHES: dict[tuple[str, str, int], str] = {}


def _base_hash(domain: Domain, seed: int) -> str:
    key = (domain.name, domain.data_version, seed)
    h = _BASE_HASHES.get(key)
    if h is None:
        h = _BASE_HASHES[key] = hash_db(domain.fresh_db(seed))
    return h


def grade_environment(
    domain: Domain, task: Task, env: Environment | None, replies: Sequence[str], seed: int
) -> Grade:
    """The same Grade as `domains.grade(domain, task, env.actions, replies, seed)`, without
    replaying the episode on a second database copy: the episode's own environment already
    holds the result of its actions (tools are deterministic), and an episode that ran no
    write tool left the database as generated, whose hash is cached."""
    if env is None:
        actual = _base_hash(domain, seed)
    elif any(getattr(domain.tool(a.name), "writes", True) for a in env.actions):
        actual = env.db_hash()
    else:
        actual = _base_hash(domain, seed)
    return grade_db_hash(domain, task, actual, replies, seed)


class _Ended(Protocol):
    """What an episode loop (built-in or τ²) hands to `_finish` and `_tally_calls` (read
    only: each loop keeps its own, narrower types)."""

    counts: dict[str, int]

    @property
    def spec(self) -> EpisodeSpec: ...
    @property
    def domain(self) -> Domain: ...
    @property
    def task(self) -> Task: ...
    @property
    def db_seed(self) -> int: ...
    @property
    def env(self) -> Environment | None: ...
    @property
    def replies(self) -> list[str]: ...
    @property
    def options(self) -> EpisodeOptions: ...
    @property
    def agent(self) -> Any: ...
    @property
    def tool_s(self) -> float: ...
    @property
    def calls(self) -> list[CallRecord]: ...
    @property
    def steps(self) -> int: ...
    @property
    def user_turns(self) -> int: ...


def _finish(
    ep: _Ended,
    termination: str,
    error: str | None,
    started_at: float,
    start_ns: int,
    end_ns: int,
    grade: dict[str, Any] | None = None,
) -> EpisodeResult:
    """The episode's records (graded here unless its `grade` is given) and its calls."""
    llm_s, user_s = _tally_calls(ep)
    session, trajectory = episode_records(
        EpisodeEnd(
            spec=ep.spec,
            domain=ep.domain,
            task=ep.task,
            db_seed=ep.db_seed,
            env=ep.env,
            replies=ep.replies,
            agent=ep.options.agent,
            user=ep.options.user,
            counts=ep.counts,
            messages=ep.agent.messages,
            tools=ep.agent.tools or [],
            # "native": tools sent as `tools`; "text": described in the system prompt
            action_format=getattr(ep.agent, "action_format", "native"),
            termination=termination,
            error=error,
            started_at=started_at,
            start_ns=start_ns,
            end_ns=end_ns,
            llm_s=llm_s,
            tool_s=ep.tool_s,
            user_s=user_s,
        ),
        grade=grade,
    )
    return EpisodeResult(session=session, trajectory=trajectory, calls=ep.calls)


@dataclass
class EpisodeEnd:
    """What an episode leaves behind: the input of `episode_records`. A native episode and
    an external agent's episode both end with one, so their records have one form."""

    spec: EpisodeSpec
    domain: Domain
    task: Task
    db_seed: int
    env: Environment | None  # the episode's database (None: no tool was called)
    replies: Sequence[str]  # the agent's messages to the user (required outputs are in them)
    agent: str
    user: str
    counts: dict[str, int]
    messages: list[Any]
    tools: list[Any]
    action_format: str
    termination: str
    error: str | None
    started_at: float
    start_ns: int
    end_ns: int
    llm_s: float
    tool_s: float
    user_s: float


def episode_records(
    end: EpisodeEnd, grade: dict[str, Any] | None = None
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Grade the episode (unless its `grade` is given) and build its session and trajectory
    records."""
    if grade is None:
        grade_dict, reward = _grade(end)
    else:
        grade_dict, reward = grade, float(grade.get("reward", 0.0))
    spec = end.spec
    counts = dict(end.counts)
    if end.termination == "protocol_error":
        # The error that ended it (an empty message, an action unparsable twice) counts too;
        # the places that count protocol_errors are bad tool calls, which never end it.
        counts["protocol_errors"] = counts.get("protocol_errors", 0) + 1
    identity = {
        "session_id": spec.session_id,
        "domain": end.domain.name,
        "task_id": spec.task_id,
        "trial": spec.trial,
        "seed": spec.seed,
    }
    session = {
        "schema": SESSION_SCHEMA,
        **identity,
        "agent": end.agent,
        "user": end.user,
        "reward": reward,
        "reward_breakdown": {
            "db_match": grade_dict.get("db_match"),
            "outputs_ok": grade_dict.get("outputs_ok"),
            "missing_outputs": grade_dict.get("missing_outputs"),
        },
        "grader_version": grade_dict.get("grader_version"),
        "data_version": end.domain.data_version,
        "termination": end.termination,
        "error": end.error,
        "counts": counts,
        "durations": {
            "total_s": (end.end_ns - end.start_ns) / 1e9,
            "llm_s": end.llm_s,
            "tool_s": end.tool_s,
            "user_s": end.user_s,
        },
        "started_at": end.started_at,
        "start_ns": end.start_ns,
        "end_ns": end.end_ns,
        "num_messages": len(end.messages),
        "category": end.task.category,
        "db_seed": end.db_seed,
    }
    trajectory = {
        "schema": TRAJECTORY_SCHEMA,
        **identity,
        "db_seed": end.db_seed,
        "messages": end.messages,
        "tools": end.tools,
        "action_format": end.action_format,
        "reward": reward,
        "termination": end.termination,
        "grade": grade_dict,
    }
    return session, trajectory


def _grade(end: EpisodeEnd) -> tuple[dict[str, Any], float]:
    """The episode's grade as a dict, and its reward; a grader bug is recorded, not raised."""
    try:
        g = grade_environment(end.domain, end.task, end.env, end.replies, end.db_seed)
        return g.to_dict(), float(g.reward)
    except Exception as e:  # a grader bug must not take the run down
        log.exception("grading %s failed", end.spec.task_id)
        grade_dict = {
            "reward": 0.0,
            "db_match": False,
            "outputs_ok": False,
            "missing_outputs": list(end.task.required_outputs),
            "error": repr(e),
        }
        return grade_dict, 0.0


def _tally_calls(ep: _Ended) -> tuple[float, float]:
    """Count the episode's calls by role and outcome into `ep.counts` (with its steps and
    user turns); returns the seconds spent in agent and in user calls."""
    counts = ep.counts
    llm_s = user_s = 0.0
    for rec in ep.calls:
        if rec.role == "user":
            counts["user_calls"] += 1
            user_s += rec.total_s
        elif rec.role == "judge":
            counts["judge_calls"] = counts.get("judge_calls", 0) + 1
        else:
            counts["agent_calls"] += 1
            llm_s += rec.total_s
        if rec.status != "ok":
            counts["failed_calls"] += 1
    counts["steps"] = ep.steps
    counts["user_turns"] = ep.user_turns
    return llm_s, user_s


def _failed(res: CallResult, role: str) -> _Stop:
    """The stop a failed agent or user call ends the episode with."""
    rec = res.record
    kind = rec.error_kind or "error"
    termination = "context_overflow" if kind == "context_overflow" else "infra_error"
    detail = f": {rec.error_message}" if rec.error_message else ""
    return _Stop(termination, f"{role} call {kind}{detail}")


class _UserSide(Protocol):
    """What a simulated user's turn needs of an episode (native or external)."""

    user: Any
    user_turns: int
    options: Any

    async def user_llm(self, messages: list[dict[str, Any]], tools: Any) -> CallResult: ...


async def next_user_message(ep: _UserSide, agent_text: str | None) -> str:
    """The simulated user's next message (counted in `ep.user_turns`); raises _Stop when the
    user cannot go on: the turn limit, a failed user call, or an empty message."""
    if ep.user_turns >= ep.options.max_user_turns:
        raise _Stop("max_steps", f"user turn limit ({ep.options.max_user_turns}) reached")
    ut = await ep.user.reply(agent_text, ep.user_llm)
    if ut.result is not None and not ut.result.ok:
        raise _failed(ut.result, "user")
    ep.user_turns += 1
    if not ut.text.strip():
        why = ut.result.record.finish_reason if ut.result is not None else None
        raise _Stop(
            "protocol_error", "user: empty message" + (f" (finish_reason {why})" if why else "")
        )
    return ut.text
