"""What every episode loop shares (the built-in one, τ²'s and an external agent's): the
episode's spec, its measured model calls, its ending (`Stop`, `drive`), its call counting and
its records.

A loop ends by raising `Stop(termination, error)`; `drive` runs it under the wall-time budget
and turns every way it can end into (termination, error); `finish` counts the calls, grades
the episode and builds its session and trajectory records (`episode_records`, one form for
every kind of episode).
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import msgspec

from agentload.client import CallRecord, CallResult, ChatClient
from agentload.config import ToolLatencyConfig, WorkloadConfig
from agentload.domains import Environment
from agentload.domains.base import Domain, Grade, Task, grade_db_hash, hash_db
from agentload.results.records import EpisodeSessionLine, EpisodeTrajectoryLine, Line
from agentload.wire import EPISODE_HEADER, ROLE_HEADER, SESSION_HEADER, TASK_HEADER

log = logging.getLogger("agentload.episode")

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
    session: Line  # EpisodeSessionLine
    trajectory: Line  # EpisodeTrajectoryLine
    calls: list[CallRecord]


def episode_seed(base_seed: int, task_id: str, trial: int) -> int:
    """A seed for one (task, trial), stable across processes and Python versions, in the
    range servers accept (31 bits)."""
    digest = hashlib.sha256(f"agentload/episode/{base_seed}/{task_id}/{trial}".encode()).digest()
    return int.from_bytes(digest[:8], "big") & 0x7FFFFFFF


class Tap:
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


def tap(client: ChatClient) -> Tap:
    """The client's tap (installed on first use): one per client, shared by its episodes."""
    return client.record_hook(Tap)


class _Caller(Protocol):
    """What a measured model call needs of an episode (built-in or τ²)."""

    spec: EpisodeSpec
    options: EpisodeOptions
    turns: dict[str, int]
    taps: dict[str, Tap]
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


class Stop(Exception):
    """Ends an episode's loop with a termination reason (and the error that ended it)."""

    def __init__(self, termination: str, error: str | None = None) -> None:
        super().__init__(termination)
        self.termination = termination
        self.error = error


class ModelCalls:
    """The measured model calls of an episode loop (built-in or τ²): `agent_llm` and
    `user_llm` as the strategies call them, `_call` for any role."""

    spec: EpisodeSpec
    options: EpisodeOptions
    agent: Any
    user: Any

    def _connect(self, clients: Mapping[str, ChatClient], roles: Sequence[str]) -> None:
        """The clients the episode calls through (and their taps), and what every call of a
        role sends beside its messages: headers, extra body, request seed. ValueError when
        the agent or user strategy needs a client it was not given."""
        spec, options = self.spec, self.options
        for role, needed in (("agent", self.agent.uses_llm), ("user", self.user.uses_llm)):
            if needed and clients.get(role) is None:
                raise ValueError(
                    f"agent {options.agent!r} / user {options.user!r} needs clients[{role!r}]"
                )
        self.clients = clients
        self.taps = {role: tap(c) for role, c in clients.items() if c is not None}
        self.headers = {
            role: {
                SESSION_HEADER: spec.session_id,
                ROLE_HEADER: role,
                TASK_HEADER: spec.task_id,
                EPISODE_HEADER: str(spec.seed),
            }
            for role in roles
        }
        self.extra_body = (
            {"chat_template_kwargs": options.chat_template_kwargs}
            if options.chat_template_kwargs
            else None
        )
        self.request_seed = request_seed_for(options.request_seed, spec.seed)
        self.latency_rng = options.tool_latency.sampler(spec.seed)

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


async def drive(
    run: Callable[[], Awaitable[None]],
    spec: EpisodeSpec,
    budget_s: float | None,
    *,
    prepare: Callable[[], Awaitable[None]] | None = None,
) -> tuple[str, str | None]:
    """Run an episode's loop to its end under the wall-time budget: (termination, error).
    The loop ends by raising Stop; a bug ends it as `infra_error` and is logged, never
    raised, so that it cannot take the run's other episodes down. `prepare` runs first,
    outside the budget (an external agent's session opening), and may raise Stop too."""
    try:
        if prepare is not None:
            await prepare()
        async with asyncio.timeout(budget_s):
            await run()
    except Stop as stop:
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


class Ended(Protocol):
    """What an episode loop (built-in or τ²) hands to `_finish` and `tally_calls` (read
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


def finish(
    ep: Ended,
    termination: str,
    error: str | None,
    started_at: float,
    start_ns: int,
    end_ns: int,
    grade: dict[str, Any] | None = None,
    **more: Any,
) -> EpisodeResult:
    """The episode's records (graded here unless its `grade` is given) and its calls;
    `more`: the fields a kind adds to them (`episode_records`)."""
    llm_s, user_s = tally_calls(ep.counts, ep.calls, steps=ep.steps, user_turns=ep.user_turns)
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
        **more,
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
    end: EpisodeEnd,
    grade: dict[str, Any] | None = None,
    *,
    reward_partial: bool | msgspec.UnsetType = msgspec.UNSET,
    tau2_termination: str | msgspec.UnsetType = msgspec.UNSET,
    tau2: dict[str, Any] | msgspec.UnsetType = msgspec.UNSET,
) -> tuple[Line, Line]:
    """Grade the episode (unless its `grade` is given) and build its session and trajectory
    records; `reward_partial`, `tau2_termination` and `tau2` are τ²'s own fields."""
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
    session = EpisodeSessionLine(
        session_id=spec.session_id,
        domain=end.domain.name,
        task_id=spec.task_id,
        trial=spec.trial,
        seed=spec.seed,
        agent=end.agent,
        user=end.user,
        reward=reward,
        reward_breakdown={
            "db_match": grade_dict.get("db_match"),
            "outputs_ok": grade_dict.get("outputs_ok"),
            "missing_outputs": grade_dict.get("missing_outputs"),
        },
        grader_version=grade_dict.get("grader_version"),
        data_version=end.domain.data_version,
        termination=end.termination,
        error=end.error,
        counts=counts,
        durations={
            "total_s": (end.end_ns - end.start_ns) / 1e9,
            "llm_s": end.llm_s,
            "tool_s": end.tool_s,
            "user_s": end.user_s,
        },
        started_at=end.started_at,
        start_ns=end.start_ns,
        end_ns=end.end_ns,
        num_messages=len(end.messages),
        category=end.task.category,
        db_seed=end.db_seed,
        reward_partial=reward_partial,
        tau2_termination=tau2_termination,
    )
    trajectory = EpisodeTrajectoryLine(
        session_id=spec.session_id,
        domain=end.domain.name,
        task_id=spec.task_id,
        trial=spec.trial,
        seed=spec.seed,
        db_seed=end.db_seed,
        messages=end.messages,
        tools=end.tools,
        action_format=end.action_format,
        reward=reward,
        termination=end.termination,
        grade=grade_dict,
        tau2=tau2,
    )
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


def tally_calls(
    counts: dict[str, int], calls: Sequence[CallRecord], *, steps: int, user_turns: int
) -> tuple[float, float]:
    """Count an episode's calls by role and outcome into `counts` (with its steps and user
    turns); returns the seconds spent in agent and in user calls."""
    llm_s = user_s = 0.0
    for rec in calls:
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
    counts["steps"] = steps
    counts["user_turns"] = user_turns
    return llm_s, user_s


def failed(res: CallResult, role: str) -> Stop:
    """The stop a failed agent or user call ends the episode with."""
    rec = res.record
    kind = rec.error_kind or "error"
    termination = "context_overflow" if kind == "context_overflow" else "infra_error"
    detail = f": {rec.error_message}" if rec.error_message else ""
    return Stop(termination, f"{role} call {kind}{detail}")


class _UserSide(Protocol):
    """What a simulated user's turn needs of an episode (native or external)."""

    user: Any
    user_turns: int
    options: Any

    async def user_llm(self, messages: list[dict[str, Any]], tools: Any) -> CallResult: ...


async def next_user_message(ep: _UserSide, agent_text: str | None) -> str:
    """The simulated user's next message (counted in `ep.user_turns`); raises Stop when the
    user cannot go on: the turn limit, a failed user call, or an empty message."""
    if ep.user_turns >= ep.options.max_user_turns:
        raise Stop("max_steps", f"user turn limit ({ep.options.max_user_turns}) reached")
    ut = await ep.user.reply(agent_text, ep.user_llm)
    if ut.result is not None and not ut.result.ok:
        raise failed(ut.result, "user")
    ep.user_turns += 1
    if not ut.text.strip():
        why = ut.result.record.finish_reason if ut.result is not None else None
        raise Stop(
            "protocol_error", "user: empty message" + (f" (finish_reason {why})" if why else "")
        )
    return ut.text
