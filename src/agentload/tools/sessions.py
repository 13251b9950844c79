"""Tool sessions: one domain environment per session, created for a task so it can be graded.

Transport-free: the MCP server, the HTTP/JSON endpoint and the stdio server all go through a
`SessionStore`, so a tool call behaves (and is recorded) the same whichever way it arrives.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from agentload.domains import Domain, Environment, Grade, Task, ToolResult, get_domain
from agentload.domains.base import BadArguments, Tool, check_arguments, grade_db_hash


class ToolsError(Exception):
    """A request the tool server refuses; `status` is the HTTP status it maps to."""

    status = 400

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"error": str(self)}
        if self.field is not None:
            d["field"] = self.field
        return d


class UnknownSession(ToolsError):
    status = 404


class UnknownTool(ToolsError):
    status = 404


class UnknownTask(ToolsError):
    status = 404


class UnknownDomain(ToolsError):
    status = 404


class NotGradable(ToolsError):
    status = 409


@dataclass
class ToolCall:
    """One tool call as the agent made it, whether or not it reached the environment."""

    name: str
    arguments: Any  # as received (a JSON object, or text that did not parse)
    ok: bool
    content: str  # the tool's result, or "Error: ..." (a refusal or a rejected request)
    reached: bool  # False: rejected before the environment (unknown tool, bad arguments)
    start: float  # Unix time
    elapsed_s: float

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class ToolSession:
    """One episode's environment: its task (None: tools only, no grade) and its tool calls."""

    sid: str
    domain: Domain
    task: Task | None
    env: Environment
    created: float = field(default_factory=time.time)
    log: list[ToolCall] = field(default_factory=list)  # every call, in order

    @property
    def task_id(self) -> str | None:
        return self.task.id if self.task else None

    def call(self, name: str, arguments: Any) -> ToolResult:
        """Run one tool call after checking the name and the arguments against the tool's
        schema; raises UnknownTool / ToolsError (naming the field) for a call that cannot
        reach the tool. A tool's own refusal is an ordinary result with ok=False. Every call
        goes into `log`."""
        start, t0 = time.time(), time.perf_counter()
        try:
            tool, checked = self._check(name, arguments)
        except ToolsError as e:
            elapsed = time.perf_counter() - t0
            self.log.append(ToolCall(name, arguments, False, f"Error: {e}", False, start, elapsed))
            raise
        result = self.env.run(tool, checked)
        elapsed = time.perf_counter() - t0
        self.log.append(ToolCall(name, checked, result.ok, result.content, True, start, elapsed))
        return result

    def _check(self, name: str, arguments: Any) -> tuple[Tool, dict[str, Any]]:
        tool = self.domain.tool(name)
        if tool is None:
            known = ", ".join(t.name for t in self.domain.tools)
            raise UnknownTool(
                f"unknown tool {name!r} in domain {self.domain.name!r} (tools: {known})",
                field="name",
            )
        try:
            return tool, check_arguments(self.domain, tool, arguments)
        except BadArguments as e:
            raise ToolsError(e.detail, field=e.field) from None

    @property
    def calls(self) -> int:
        return len(self.log)

    @property
    def errors(self) -> int:
        """Calls whose result was an error: refusals by a tool and rejected requests."""
        return sum(not c.ok for c in self.log)

    def grade(self, replies: Sequence[str] = ()) -> Grade:
        """The domain grader on this session's database and the agent's replies to the user
        (required outputs are looked for in `replies`)."""
        if self.task is None:
            raise NotGradable(f"session {self.sid} was created without a task; nothing to grade")
        return grade_db_hash(self.domain, self.task, self.env.db_hash(), replies, self.env.seed)

    def info(self) -> dict[str, Any]:
        return {
            "session": self.sid,
            "domain": self.domain.name,
            "task_id": self.task_id,
            "seed": self.env.seed,
            "created": self.created,
            "calls": self.calls,
            "errors": self.errors,
            "actions": [a.to_dict() for a in self.env.actions],
            "tool_calls": [c.to_dict() for c in self.log],
        }


class SessionStore:
    """The sessions of one tool server, all of one domain."""

    def __init__(self, domain: str | Domain, *, seed: int = 0, max_sessions: int = 100_000):
        try:
            self.domain = domain if isinstance(domain, Domain) else get_domain(domain)
        except KeyError as e:
            raise UnknownDomain(str(e).strip("\"'"), field="domain") from None
        self.seed = seed
        self.max_sessions = max_sessions
        self._sessions: dict[str, ToolSession] = {}

    def task(self, task_id: str | None) -> Task | None:
        if task_id is None:
            return None
        if not isinstance(task_id, str):
            raise ToolsError("task_id must be a string", field="task_id")
        if "/" not in task_id:  # "007" is accepted for "airline/007"
            task_id = f"{self.domain.name}/{task_id}"
        try:
            return self.domain.get_task(task_id)
        except KeyError:
            raise UnknownTask(
                f"unknown task {task_id!r} in domain {self.domain.name!r}", field="task_id"
            ) from None

    def create(
        self, task_id: str | None = None, *, seed: int | None = None, sid: str | None = None
    ) -> ToolSession:
        """A new session on a fresh database; `sid` is generated unless given."""
        task = self.task(task_id)
        if sid is None:
            sid = secrets.token_hex(8)
        elif sid in self._sessions:
            raise ToolsError(f"session {sid!r} already exists", field="session")
        if len(self._sessions) >= self.max_sessions:
            raise ToolsError(f"too many open sessions ({self.max_sessions}); delete some first")
        s = self.seed if seed is None else seed
        session = ToolSession(sid, self.domain, task, Environment(self.domain, s))
        self._sessions[sid] = session
        return session

    def get(self, sid: str) -> ToolSession:
        try:
            return self._sessions[sid]
        except KeyError:
            raise UnknownSession(f"unknown session {sid!r}", field="session") from None

    def find(self, sid: str) -> ToolSession | None:
        return self._sessions.get(sid)

    def delete(self, sid: str) -> ToolSession:
        session = self.get(sid)
        del self._sessions[sid]
        return session

    def __len__(self) -> int:
        return len(self._sessions)

    def __iter__(self) -> Any:
        return iter(list(self._sessions.values()))
