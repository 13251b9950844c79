"""The external agent's LLM traffic: `agentload proxy` in process, recording into the run.

Each episode's agent is pointed at `http://PROXY/s/{session}/v1`. The proxy adds the
session, role (`agent`) and task headers agentload's own agents send — so a router's session
affinity and the embedded simulator see the same requests as in a native run — and hands each
call's record to the run's agent client sink, where native agent calls go too: the same
calls.jsonl, progress line and outage detection.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import quote

from agentload.client.record import CallRecord
from agentload.proxy.caller import ProxyRequest
from agentload.proxy.service import ProxyConfig, ProxyServer
from agentload.proxy.sessions import ProxySession
from agentload.wire import ROLE_HEADER, SESSION_HEADER, TASK_HEADER

log = logging.getLogger("agentload.external")

RecordFn = Callable[[CallRecord], None]


def _drop(rec: CallRecord) -> None:
    pass


class _Sink:
    """Routes each proxied call to the sink of the episode it belongs to."""

    def __init__(self) -> None:
        self.by_session: dict[str, RecordFn] = {}
        self.fallback: RecordFn | None = None
        self.calls: dict[str, list[CallRecord]] = {}

    def record_call(self, rec: CallRecord) -> None:
        sid = rec.session_id or ""
        # The id a native agent call of this session and turn would have.
        rec.call_id = f"{sid}:a{rec.turn}"
        fn = self.by_session.get(sid)
        if fn is None:
            log.warning("agent call of session %r outside its episode", sid)
            fn = self.fallback
        else:
            self.calls.setdefault(sid, []).append(rec)
        if fn is not None:
            fn(rec)

    def add_secrets(self, secrets: Any) -> None:
        # The agent is given the run's own key, which the run's recorder already scrubs.
        pass


class AgentProxy(ProxyServer):
    """The recording proxy, with the episode's headers added to its agent's requests."""

    def __init__(
        self, upstream: str, endpoint: str, headers: Mapping[str, str] | None = None
    ) -> None:
        self.sink = _Sink()
        self.tasks: dict[str, str] = {}
        # The endpoint's own headers and key: added here, so the agent never holds the key.
        self.extra_headers = dict(headers or {})
        # `out` is never written: records go to the sink.
        super().__init__(
            ProxyConfig(upstream=upstream, out=Path("."), endpoint=endpoint), sink=self.sink
        )

    def session_url(self, session_id: str) -> str:
        return f"{self.url}/s/{quote(session_id, safe='')}/v1"

    def open(self, session_id: str, task_id: str, record: RecordFn | None) -> str:
        """Start routing one episode's calls; returns the base URL its agent uses."""
        self.tasks[session_id] = task_id
        fn = record or _drop
        self.sink.by_session[session_id] = fn
        if self.sink.fallback is None:
            self.sink.fallback = fn
        return self.session_url(session_id)

    def close(self, session_id: str) -> tuple[ProxySession | None, list[CallRecord]]:
        """Stop routing the episode; what the proxy saw of it and its calls' records."""
        self.tasks.pop(session_id, None)
        self.sink.by_session.pop(session_id, None)
        return self.sessions.pop(session_id, None), self.sink.calls.pop(session_id, [])

    def _prepare(self, req: ProxyRequest, path_session: str | None) -> None:
        task = self.tasks.get(path_session) if path_session is not None else None
        if path_session is None or task is None:
            return
        for name, value in self.extra_headers.items():
            req.set_header(name, value)
        req.set_header(SESSION_HEADER, path_session)
        req.set_header(TASK_HEADER, task)
        if ROLE_HEADER not in req.view():
            req.set_header(ROLE_HEADER, "agent")
