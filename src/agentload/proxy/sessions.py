"""Which session a proxied call belongs to, and what a session keeps for its records."""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass, field
from typing import Any

from agentload.client.record import CallRecord
from agentload.results.records import Line, ProxySessionLine, ProxyTrajectoryLine
from agentload.wire import SESSION_HEADER

SESSION_PREFIX = "/s/"
ANONYMOUS = "anonymous"


def split_session_path(path: str) -> tuple[str | None, str]:
    """`/s/{session}/v1/...` -> (session, `/v1/...`); other paths come back unchanged."""
    if not path.startswith(SESSION_PREFIX):
        return None, path
    session, sep, rest = path[len(SESSION_PREFIX) :].partition("/")
    if not session:
        return None, path
    return session, "/" + rest if sep else "/"


def bearer_key(headers: Any) -> str | None:
    """The caller's API key from `Authorization: Bearer KEY` (or `api-key`), if any."""
    auth = headers.get("Authorization")
    if auth:
        scheme, _, value = auth.partition(" ")
        if scheme.lower() == "bearer" and value.strip():
            return value.strip()
    return headers.get("api-key") or None


def key_session(key: str) -> str:
    """A stable session id for an API key that does not reveal it."""
    return "key-" + hashlib.sha256(key.encode()).hexdigest()[:12]


def session_for(headers: Any, path_session: str | None) -> str:
    """X-Session-ID, else the path prefix, else a hash of the API key, else `anonymous`."""
    sid = headers.get(SESSION_HEADER)
    if sid:
        return sid
    if path_session:
        return path_session
    key = bearer_key(headers)
    return key_session(key) if key else ANONYMOUS


@dataclass(slots=True)
class ProxySession:
    """What the proxy has seen of one session so far."""

    session_id: str
    started_at: float = field(default_factory=time.time)
    start_ns: int = 0
    end_ns: int = 0
    calls: int = 0
    failed: int = 0
    tool_calls: int = 0
    llm_s: float = 0.0
    models: set[str] = field(default_factory=set)
    # The last call's request (as the agent sent it) and its answer: the trajectory.
    messages: list[Any] = field(default_factory=list)
    tools: list[Any] = field(default_factory=list)
    answer: dict[str, Any] | None = None
    last_error: str | None = None

    def add(
        self,
        rec: CallRecord,
        messages: list[Any],
        tools: list[Any],
        answer: dict[str, Any] | None,
    ) -> None:
        if self.calls == 0:
            self.started_at, self.start_ns = rec.started_at, rec.start_ns
        self.calls += 1
        self.end_ns = max(self.end_ns, rec.end_ns)
        self.llm_s += rec.total_s
        self.tool_calls += rec.num_tool_calls
        if rec.model:
            self.models.add(rec.model)
        if rec.status != "ok":
            self.failed += 1
            self.last_error = rec.error_kind
        self.messages, self.tools = messages, tools
        self.answer = answer if rec.status == "ok" else None

    def records(self, run_id: str) -> tuple[Line, Line]:
        """(session line, trajectory line) in the results contract."""
        termination = "error" if self.answer is None else "agent_stop"
        session = ProxySessionLine(
            kind="proxy",
            run_id=run_id,
            session_id=self.session_id,
            task_id=self.session_id,
            trial=0,
            warmup=False,
            termination=termination,
            error=self.last_error if self.answer is None else None,
            models=sorted(self.models),
            counts={
                "agent_calls": self.calls,
                "failed_calls": self.failed,
                "tool_calls": self.tool_calls,
            },
            durations={"total_s": (self.end_ns - self.start_ns) / 1e9, "llm_s": self.llm_s},
            started_at=self.started_at,
            start_ns=self.start_ns,
            end_ns=self.end_ns,
        )
        messages = list(self.messages)
        if self.answer is not None:
            messages.append(self.answer)
        trajectory = ProxyTrajectoryLine(
            kind="proxy",
            run_id=run_id,
            session_id=self.session_id,
            task_id=self.session_id,
            trial=0,
            messages=messages,
            tools=self.tools,
            termination=termination,
        )
        return session, trajectory
