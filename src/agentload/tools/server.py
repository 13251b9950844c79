"""`ToolServer`: a domain's tools over HTTP, as MCP (streamable HTTP) and as plain JSON.

One Starlette app under uvicorn, run inside the caller's event loop:

- MCP at `/sessions/{sid}/mcp` acts on a session created beforehand (`POST /sessions` or
  `ToolServer.create_session`); MCP at `/mcp` gets one fresh environment per MCP session (the
  `Mcp-Session-Id` the SDK assigns), for the task named by `?task=` or the server's default
  task, listed as session `mcp-<Mcp-Session-Id>`.
- JSON: `GET /healthz`, `GET /tools`, `GET /policy`, `POST /sessions`, `GET /sessions`,
  `GET|DELETE /sessions/{sid}`, `GET /sessions/{sid}/tools`,
  `POST /sessions/{sid}/tools/{name}`, `POST /sessions/{sid}/tool_calls`,
  `POST /sessions/{sid}/grade`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import socket
from collections.abc import Sequence
from typing import Any

import orjson
import uvicorn
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecurityMiddleware, TransportSecuritySettings
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import Message, Receive, Scope, Send
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from agentload.domains import Domain, Grade
from agentload.http_limits import ConnectionCap, ConnectionGuard, ServiceLimits, connection_budget
from agentload.tools.mcp_server import build_mcp_server
from agentload.tools.sessions import SessionStore, ToolsError, ToolSession, UnknownSession

log = logging.getLogger(__name__)

_LOOPBACK = ("127.0.0.1", "localhost", "::1")
TOOLS_MAX_BODY = 4 << 20
"""Largest request body by default: tool arguments and grading replies are small."""


class BodyTooLarge(ToolsError):
    status = 413


class _DropClientGone(logging.Filter):
    """The SDK logs a traceback ("Error in standalone SSE writer") whenever a client ends its
    MCP session while its notification stream is open: an ordinary disconnect, not an error."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        return not (
            record.getMessage().startswith("Error in standalone SSE writer")
            and type(exc).__name__ in ("ClosedResourceError", "BrokenResourceError")
        )


logging.getLogger("mcp.server.streamable_http").addFilter(_DropClientGone())

_SESSION_MCP = re.compile(r"^/sessions/([^/]+)/mcp/?$")
MCP_PREFIX = "mcp-"


def _json(obj: Any, status: int = 200) -> Response:
    return Response(orjson.dumps(obj), status_code=status, media_type="application/json")


def _fail(e: ToolsError) -> Response:
    return _json(e.to_dict(), e.status)


async def _body(request: Request, *, default: Any = None) -> Any:
    raw = await request.body()
    if not raw.strip():
        return default
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError as e:
        raise ToolsError(f"request body is not valid JSON: {e}", field="body") from None


class ToolServer:
    """A domain's tools served over HTTP (MCP and JSON) on `host:port` (0: a free port).

    `async with ToolServer("airline") as ts:` or `await ts.start()` / `await ts.stop()`;
    `ts.url` is its root URL once started. Sessions can be created and graded in-process
    (`create_session`, `grade`) as well as over HTTP."""

    def __init__(
        self,
        domain: str | Domain,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        seed: int = 0,
        default_task: str | None = None,
        grade_tool: bool = False,
        max_sessions: int = 100_000,
        limits: ServiceLimits | None = None,
    ) -> None:
        """`limits`: header, body and idle deadlines, the largest body and the connection cap
        (default: `ServiceLimits` with a 4 MiB body)."""
        self.store = SessionStore(domain, seed=seed, max_sessions=max_sessions)
        self.domain = self.store.domain
        self.default_task = default_task
        if default_task is not None:
            self.store.task(default_task)  # fail now, not at the first MCP call
        self.host, self.port = host, port
        self.limits = limits or ServiceLimits(max_body_bytes=TOOLS_MAX_BODY)
        self.cap: ConnectionCap | None = None
        # One Host/Origin policy for every route, the SDK's own (see `_security`).
        self._host_check = TransportSecurityMiddleware(_security(host))
        self._mcp = build_mcp_server(
            self._resolve,
            self.domain.tools,
            instructions=self.domain.system_prompt() or None,
            grade_tool=grade_tool,
        )
        # Plain JSON answers to MCP POSTs (the spec lets the server choose JSON or an SSE
        # stream; every client accepts both): about half the server CPU of a stream per call
        # (benchmarks/tools_latency.py). Nothing here sends notifications mid-call.
        self._manager = StreamableHTTPSessionManager(
            self._mcp, json_response=True, security_settings=_security(host)
        )
        self._json_app = self._build_json_app()
        self._uvicorn: uvicorn.Server | None = None
        self._task: asyncio.Task[None] | None = None

    # --- in-process API ---

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    def mcp_url(self, sid: str | None = None) -> str:
        """The MCP endpoint: of session `sid`, or the one that opens a session per client."""
        return f"{self.url}/sessions/{sid}/mcp" if sid else f"{self.url}/mcp"

    def create_session(self, task_id: str | None = None, *, seed: int | None = None) -> str:
        """A new session (fresh environment) for `task_id`; returns its id."""
        return self.store.create(task_id, seed=seed).sid

    def session(self, sid: str) -> ToolSession:
        return self.store.get(sid)

    def grade(self, sid: str, replies: Sequence[str] = ()) -> Grade:
        return self.store.get(sid).grade(replies)

    def close_session(self, sid: str) -> ToolSession:
        return self.store.delete(sid)

    # --- lifecycle ---

    async def start(self) -> ToolServer:
        """Bind and start serving; raises OSError when the address cannot be bound."""
        if self._uvicorn is not None:  # the SDK's session manager runs once per instance
            raise RuntimeError("a ToolServer starts once; make a new one")
        family = socket.AF_INET6 if ":" in self.host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((self.host, self.port))
        except OSError:
            sock.close()
            raise
        self.port = sock.getsockname()[1]
        self.cap = ConnectionCap(connection_budget(self.limits.max_connections))
        config = uvicorn.Config(
            self._asgi,
            interface="asgi3",
            lifespan="off",
            log_config=None,  # leave the embedding program's logging alone
            access_log=False,
            loop="none",
            http=_guarded_protocol(self.limits, self.cap),
            timeout_keep_alive=max(1, round(self.limits.keepalive_timeout_s)),
            backlog=1024,
            # Agents may still hold MCP notification streams open when the server stops.
            timeout_graceful_shutdown=2,
        )
        self._uvicorn = server = _QuietServer(config)
        self._task = asyncio.create_task(self._run(server, sock), name="agentload-tools")
        while not server.started:
            if self._task.done():
                self._task.result()  # raises what stopped it
                raise RuntimeError("tool server stopped while starting")
            await asyncio.sleep(0.01)
        return self

    async def _run(self, server: uvicorn.Server, sock: socket.socket) -> None:
        # The MCP session manager's task group lives in this task, for its whole life.
        async with self._manager.run():
            await server.serve(sockets=[sock])

    async def stop(self) -> None:
        if self._task is None or self._uvicorn is None:
            return
        self._uvicorn.should_exit = True
        task, self._task = self._task, None
        try:
            await asyncio.wait_for(asyncio.shield(task), 5)
        except TimeoutError:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def __aenter__(self) -> ToolServer:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def serve_forever(self) -> None:
        """Start (if needed) and serve until cancelled."""
        if self._task is None:
            await self.start()
        assert self._task is not None
        try:
            await asyncio.shield(self._task)
        finally:
            await self.stop()

    # --- routing ---

    async def _asgi(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            refused = await self._refusal(scope)
            if refused is not None:
                await refused(scope, receive, send)
                return
            receive = _bounded(receive, self.limits.max_body_bytes)
        path = scope.get("path", "") if scope["type"] == "http" else ""
        if path in ("/mcp", "/mcp/"):
            await self._manager.handle_request(scope, receive, send)
            return
        m = _SESSION_MCP.match(path)
        if m:
            if self.store.find(m.group(1)) is None:
                err = UnknownSession(f"unknown session {m.group(1)!r}", field="session")
                await _fail(err)(scope, receive, send)
                return
            await self._manager.handle_request(scope, receive, send)
            return
        await self._json_app(scope, receive, send)

    async def _refusal(self, scope: Scope) -> Response | None:
        """The answer to a request refused before it reaches a route: a foreign Host or Origin
        (DNS rebinding), or a declared body over the limit, refused before it is read."""
        refused = await self._host_check.validate_request(Request(scope), is_post=False)
        if refused is not None:
            return refused
        for name, value in scope.get("headers", ()):
            if name == b"content-length":
                v = value.strip()
                if v.isdigit() and int(v) > self.limits.max_body_bytes:
                    err = BodyTooLarge(
                        f"request body of {int(v)} bytes is over {self.limits.max_body_bytes}",
                        field="body",
                    )
                    # Close rather than read the body it declared only to discard it.
                    return Response(
                        orjson.dumps(err.to_dict()),
                        status_code=413,
                        media_type="application/json",
                        headers={"Connection": "close"},
                    )
        return None

    def _resolve(self, request: Any) -> ToolSession:
        """The session an MCP call acts on (see the module docstring)."""
        if request is None:
            raise ToolsError("no HTTP request behind this MCP call")
        m = _SESSION_MCP.match(request.url.path)
        if m:
            return self.store.get(m.group(1))
        mcp_sid = request.headers.get("mcp-session-id")
        if not mcp_sid:
            raise ToolsError("MCP request without an Mcp-Session-Id")
        sid = MCP_PREFIX + mcp_sid
        found = self.store.find(sid)
        if found is not None:
            return found
        task = request.query_params.get("task") or self.default_task
        return self.store.create(task, sid=sid)

    def _build_json_app(self) -> Starlette:
        routes = [
            Route("/healthz", self._healthz, methods=["GET"]),
            Route("/tools", self._domain_tools, methods=["GET"]),
            Route("/policy", self._policy, methods=["GET"]),
            Route("/sessions", self._create, methods=["POST"]),
            Route("/sessions", self._list, methods=["GET"]),
            Route("/sessions/{sid}", self._info, methods=["GET"]),
            Route("/sessions/{sid}", self._delete, methods=["DELETE"]),
            Route("/sessions/{sid}/tools", self._session_tools, methods=["GET"]),
            Route("/sessions/{sid}/tools/{name}", self._call, methods=["POST"]),
            Route("/sessions/{sid}/tool_calls", self._tool_calls, methods=["POST"]),
            Route("/sessions/{sid}/grade", self._grade, methods=["POST"]),
        ]
        app = Starlette(routes=routes)
        app.add_exception_handler(ToolsError, self._on_error)  # type: ignore[arg-type]
        return app

    async def _on_error(self, _request: Request, exc: ToolsError) -> Response:
        return _fail(exc)

    async def _healthz(self, _request: Request) -> Response:
        return _json({"ok": True, "domain": self.domain.name, "sessions": len(self.store)})

    async def _domain_tools(self, _request: Request) -> Response:
        return _json(self.domain.tool_schemas())

    async def _policy(self, _request: Request) -> Response:
        return _json({"domain": self.domain.name, "policy": self.domain.system_prompt()})

    async def _create(self, request: Request) -> Response:
        body = await _body(request, default={})
        if not isinstance(body, dict):
            raise ToolsError("request body must be a JSON object", field="body")
        unknown = sorted(set(body) - {"task_id", "seed"})
        if unknown:
            raise ToolsError(f"unknown field {unknown[0]!r}", field=unknown[0])
        seed = body.get("seed")
        if seed is not None and (not isinstance(seed, int) or isinstance(seed, bool)):
            raise ToolsError("seed must be an integer", field="seed")
        s = self.store.create(body.get("task_id"), seed=seed)
        return _json(
            {
                "session": s.sid,
                "task_id": s.task_id,
                "mcp_url": self.mcp_url(s.sid),
                "tools_url": f"{self.url}/sessions/{s.sid}/tools",
            },
            201,
        )

    async def _list(self, _request: Request) -> Response:
        rows = []
        for s in self.store:
            d = s.info()
            d["actions"] = len(d["actions"])
            del d["tool_calls"]
            rows.append(d)
        return _json(rows)

    async def _info(self, request: Request) -> Response:
        return _json(self.store.get(request.path_params["sid"]).info())

    async def _delete(self, request: Request) -> Response:
        return _json(self.store.delete(request.path_params["sid"]).info())

    async def _session_tools(self, request: Request) -> Response:
        self.store.get(request.path_params["sid"])
        return _json(self.domain.tool_schemas())

    async def _call(self, request: Request) -> Response:
        session = self.store.get(request.path_params["sid"])
        args = await _body(request, default={})
        result = session.call(request.path_params["name"], args)
        return _json({"ok": result.ok, "content": result.content})

    async def _tool_calls(self, request: Request) -> Response:
        """An assistant message's OpenAI `tool_calls`, run in order; answers the `tool`
        messages to append. A call that cannot run is an "Error: ..." message, as it would be
        for an agent driven by agentload."""
        session = self.store.get(request.path_params["sid"])
        body = await _body(request, default=None)
        calls = body.get("tool_calls") if isinstance(body, dict) else body
        if not isinstance(calls, list):
            raise ToolsError("expected a list of OpenAI tool calls", field="tool_calls")
        for i, call in enumerate(calls):  # all well formed before any runs
            fn = call.get("function") if isinstance(call, dict) else None
            if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
                raise ToolsError("a tool call needs function.name", field=f"tool_calls/{i}")
        messages = []
        for call in calls:
            fn = call["function"]
            try:
                content = session.call(fn["name"], fn.get("arguments")).content
            except ToolsError as e:
                content = f"Error: {e}"
            messages.append(
                {"role": "tool", "tool_call_id": call.get("id", ""), "content": content}
            )
        return _json(messages)

    async def _grade(self, request: Request) -> Response:
        session = self.store.get(request.path_params["sid"])
        body = await _body(request, default={})
        if not isinstance(body, dict):
            raise ToolsError("request body must be a JSON object", field="body")
        replies = body.get("replies", [])
        if not isinstance(replies, list) or not all(isinstance(r, str) for r in replies):
            raise ToolsError("replies must be a list of strings", field="replies")
        d = session.grade(replies).to_dict()
        d["session"] = session.sid
        d["task_id"] = session.task_id
        d["actions"] = [a.to_dict() for a in session.env.actions]
        return _json(d)


def _security(host: str) -> TransportSecuritySettings | None:
    """On a loopback address, the SDK's DNS-rebinding protection: only loopback Host headers
    (and Origins, when sent) reach any route, MCP or JSON (a web page cannot drive the tools
    through a rebound name). Elsewhere the deployment decides who may connect."""
    if host not in _LOOPBACK:
        return None
    names = ["127.0.0.1", "localhost", "[::1]"]
    # With and without a port: a client of a server on port 80 sends the bare name.
    hosts = names + [f"{n}:*" for n in names]
    return TransportSecuritySettings(
        enable_dns_rebinding_protection=True,
        allowed_hosts=hosts,
        allowed_origins=[f"http://{h}" for h in hosts],
    )


def _bounded(receive: Receive, limit: int) -> Receive:
    """`receive` refusing a body (chunked, so of no declared length) once over `limit`."""
    seen = 0

    async def bounded() -> Message:
        nonlocal seen
        message = await receive()
        if message["type"] == "http.request":
            seen += len(message.get("body", b""))
            if seen > limit:
                raise BodyTooLarge(f"request body over {limit} bytes", field="body")
        return message

    return bounded


def _guarded_protocol(limits: ServiceLimits, cap: ConnectionCap) -> type[HttpToolsProtocol]:
    """uvicorn's HTTP protocol with the header, body and idle deadlines and the connection
    cap of `agentload.http_limits` (uvicorn alone has no deadline for a request's headers,
    so a silent connection or a trickle of header bytes would hold a descriptor for good)."""

    class Guarded(HttpToolsProtocol):
        guard: ConnectionGuard

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self.guard = ConnectionGuard(limits, cap, self._expired)
            if not self.guard.opened():
                transport.abort()

        def data_received(self, data: bytes) -> None:
            self.guard.data()
            super().data_received(data)

        def on_headers_complete(self) -> None:
            self.guard.headers_done()
            super().on_headers_complete()

        def on_message_complete(self) -> None:
            self.guard.message_done()
            super().on_message_complete()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            self.guard.reply_done()

        def connection_lost(self, exc: Exception | None) -> None:
            self.guard.lost()
            super().connection_lost(exc)

        def _expired(self, kind: str) -> None:
            if self.transport is None or self.transport.is_closing():
                return
            if kind == "idle":
                self.transport.close()
            else:  # a slow or silent sender (or evicted at the cap): free its descriptor now
                self.transport.abort()

    return Guarded


class _QuietServer(uvicorn.Server):
    """uvicorn's server without its signal handlers: the embedding program owns Ctrl-C."""

    @contextlib.contextmanager
    def capture_signals(self) -> Any:
        yield

    def install_signal_handlers(self) -> None:  # older uvicorn
        return None
