"""A lean HTTP/1.1 front end for the simulator's two generation paths.

Why not aiohttp's application there: profiled under `benchmarks/replay_throughput.py` (instant
profile, 1,000 active conversations), aiohttp's request machinery (request and payload
objects, the stream reader and the body read's timeout, middlewares and routing, the
response's header building and its separate end-of-body write) was a large share of the
simulator's CPU per call, and the simulator, not the client, set the pace of the benchmark.

This module serves only `POST /v1/chat/completions` and `POST /v1/completions` (HTTP/1.1, a
Content-Length or chunked body), parsed by llhttp through httptools, and answers with the same
status codes, bodies and headers as the aiohttp application. Anything else (another path or
method, `Expect: 100-continue`, an upgrade, HTTP/1.0, a body over the size limit) hands the
connection over, at that request, to aiohttp's protocol, which serves it and every later
request on that connection exactly as before. Pipelined requests (a second request in the
same read as the end of the first) are served in order when both are generation requests;
one that must be handed over there gets a 400 and the connection closes.
"""

from __future__ import annotations

import asyncio
import email.utils
import http
import logging
import time
from collections import deque
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, cast

import httptools
import orjson
from aiohttp import web
from aiohttp.http import SERVER_SOFTWARE
from multidict import CIMultiDict

from agentload.http_limits import ConnectionCap
from agentload.sim.guard import GuardedConnection
from agentload.sim.server import _END, MAX_BODY, error_body

if TYPE_CHECKING:
    from agentload.sim.server import SimApp

log = logging.getLogger("agentload.sim")

_PATHS = {b"/v1/chat/completions": True, b"/v1/completions": False}
_SERVER = b"Server: " + SERVER_SOFTWARE.encode() + b"\r\n"
_SSE_TYPE = b"Content-Type: text/event-stream; charset=utf-8\r\nTransfer-Encoding: chunked\r\n"
_JSON_TYPE = b"Content-Type: application/json\r\n"

_date_cache: list[Any] = [0, b""]


def _date_header() -> bytes:
    """`Date: ...\\r\\n`, rebuilt once a second."""
    now = int(time.time())
    if now != _date_cache[0]:
        _date_cache[0] = now
        _date_cache[1] = b"Date: " + email.utils.formatdate(now, usegmt=True).encode() + b"\r\n"
    return _date_cache[1]


def _status_line(status: int) -> bytes:
    try:
        phrase = http.HTTPStatus(status).phrase
    except ValueError:
        phrase = ""
    return b"HTTP/1.1 %d %s\r\n" % (status, phrase.encode())


class _Request:
    __slots__ = ("body", "chat", "headers", "keep_alive", "path")

    def __init__(
        self, path: str, chat: bool, headers: CIMultiDict[str], body: bytes, keep_alive: bool
    ) -> None:
        self.path = path
        self.chat = chat
        self.headers = headers
        self.body = body
        self.keep_alive = keep_alive


class FastFront:
    """`server.Front` over a FastConnection's transport."""

    __slots__ = ("close", "headers", "path", "raw", "sent", "transport")

    # The stream's last chunk goes out with its last events (one write per call).
    auto_end = True

    def __init__(self, req: _Request, transport: asyncio.Transport) -> None:
        self.path = req.path
        self.headers: Mapping[str, str] = req.headers
        self.raw = req.body
        self.transport: asyncio.Transport | None = transport
        self.close = not req.keep_alive
        self.sent = False

    async def body(self) -> bytes:
        return self.raw

    def reply(
        self, status: int, body: bytes, headers: dict[str, str] | None = None, close: bool = False
    ) -> None:
        self.close = self.close or close
        extra = b"".join(f"{k}: {v}\r\n".encode("latin-1") for k, v in (headers or {}).items())
        self._write(
            _status_line(status)
            + _JSON_TYPE
            + extra
            + b"Content-Length: %d\r\n" % len(body)
            + _date_header()
            + _SERVER
            + (b"Connection: close\r\n" if self.close else b"")
            + b"\r\n"
            + body
        )

    async def open_stream(self, hold: bool) -> bytes | None:
        transport = self.transport
        if transport is None or transport.is_closing():
            raise ConnectionResetError("Cannot write to closing transport")
        head = (
            b"HTTP/1.1 200 OK\r\n"
            + _SSE_TYPE
            + _date_header()
            + _SERVER
            + (b"Connection: close\r\n" if self.close else b"")
            + b"\r\n"
        )
        self.sent = True
        if hold:
            return head
        transport.write(head)
        return None

    async def end_stream(self) -> None:
        self._write(_END)

    def _write(self, data: bytes) -> None:
        self.sent = True
        transport = self.transport
        if transport is not None and not transport.is_closing():
            transport.write(data)


class FastConnection(GuardedConnection):
    """One connection: generation requests served here, the rest by aiohttp's protocol."""

    __slots__ = (
        "_body",
        "_body_size",
        "_body_timer",
        "_cap",
        "_complete",
        "_conn",
        "_fast",
        "_handed",
        "_handover",
        "_headers",
        "_idle_timer",
        "_in_message",
        "_last_done",
        "_make_inner",
        "_parser",
        "_path",
        "_pending",
        "_pipelined",
        "_queue",
        "_raw",
        "_reject",
        "_serving",
        "_sim",
        "_url",
    )

    def __init__(
        self,
        make_inner: Callable[[], asyncio.Protocol],
        sim: SimApp,
        loop: asyncio.AbstractEventLoop,
        cap: ConnectionCap | None = None,
    ) -> None:
        super().__init__(_NoProtocol(), loop, sim.config.header_timeout_s)
        self._cap = cap
        self._make_inner = make_inner
        self._sim = sim
        self._parser = httptools.HttpRequestParser(self)
        self._handed = False  # aiohttp's protocol serves the connection from now on
        self._handover = False  # the request being parsed goes to aiohttp
        self._fast = False
        self._pipelined = False
        self._complete = False  # a request ended in the current read
        self._in_message = False
        self._url = b""
        self._path = b""
        self._headers: list[tuple[bytes, bytes]] = []
        self._body: list[bytes] = []
        self._raw: list[bytes] = []
        self._queue: deque[_Request] = deque()
        self._pending: list[bytes] = []
        self._serving = False
        self._reject: str | None = None  # a 400 to answer once the queued requests are done
        self._body_size = 0
        self._body_timer: asyncio.TimerHandle | None = None
        self._idle_timer: asyncio.TimerHandle | None = None
        self._last_done = loop.time()
        self._conn: asyncio.Transport | None = None

    # -- asyncio.Protocol ------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport
        self._conn = cast(asyncio.Transport, transport)
        if self._cap is not None and not self._cap.admit(self):
            # Every connection at the cap is serving a request: refuse this one rather than
            # run out of file descriptors, which would fail every accept.
            transport.close()
            return
        self._arm()
        self._arm_idle(self._sim.config.keepalive_timeout_s)

    def data_received(self, data: bytes) -> None:
        if self._handed:
            super().data_received(data)
        elif self._serving:
            self._pending.append(data)
        else:
            self._feed(data)

    def eof_received(self) -> bool | None:
        if self._handed:
            return super().eof_received()
        return None  # close the transport

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_timers()
        if self._cap is not None:
            self._cap.remove(self)
        if self._handed:
            super().connection_lost(exc)
        else:
            self._cancel()
        self._conn = None
        self._transport = None

    def pause_writing(self) -> None:
        if self._handed:
            super().pause_writing()

    def resume_writing(self) -> None:
        if self._handed:
            super().resume_writing()

    # -- the connection cap (http_limits.Capped) -------------------------------------------
    @property
    def busy(self) -> bool:
        return self._busy or self._serving or bool(self._queue)

    def expire(self, kind: str) -> None:
        """Closed by the cap for a new connection: it was the one idle (or sending its
        headers) for longest."""
        log.debug("closing a connection (%s) for a new one at the connection cap", kind)
        transport = self._transport
        if transport is not None and not transport.is_closing():
            transport.close()

    def request_finished(self) -> None:
        super().request_finished()
        if self._cap is not None:
            self._cap.touch(self)  # active again: the last to be evicted

    # -- parsing ---------------------------------------------------------------------------
    def _feed(self, data: bytes) -> None:
        if not self._busy and self._handle is None:
            self._arm()  # the header deadline starts with the request's first byte
        if not self._in_message:
            self._raw = [data]  # a request starts with this read (no pipelining)
        elif not self._fast:
            self._raw.append(data)
        self._complete = False
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self._handover = True
        except httptools.HttpParserError as exc:
            if not self._handover and self._reject is None:
                self._reject = f"Malformed HTTP request: {exc}"
        if self._handover:
            self._hand_over()
            return
        self._dispatch()

    def on_message_begin(self) -> None:
        self._in_message = True
        self._pipelined = self._complete
        self._url = b""
        self._headers = []
        self._body = []
        self._body_size = 0
        self._fast = False

    def on_url(self, url: bytes) -> None:
        self._url += url

    def on_header(self, name: bytes, value: bytes) -> None:
        self._headers.append((name, value))

    def on_headers_complete(self) -> None:
        parser = self._parser
        path = self._url.partition(b"?")[0]
        fast = (
            path in _PATHS
            and parser.get_method() == b"POST"
            and parser.get_http_version() == "1.1"
            and not parser.should_upgrade()
        )
        if fast:
            limit = MAX_BODY
            for name, value in self._headers:
                lname = name.lower()
                if lname == b"expect" or (
                    lname == b"content-length" and value.strip().isdigit() and int(value) > limit
                ):
                    fast = False
                    break
        if self._reject is not None:
            return
        if not fast:
            if self._pipelined:
                # Its bytes start inside a read: they cannot be handed over.
                self._reject = "Pipelined requests are not supported on this path."
            else:
                self._handover = True
            return
        self._fast = True
        self._raw = []
        self._path = path
        self.request_started()
        self._body_timer = self._loop.call_later(
            self._sim.config.body_timeout_s, self._body_expired, path.decode("latin-1")
        )

    def on_body(self, body: bytes) -> None:
        if self._fast and self._reject is None:
            # A chunked body has no length to check up front: count it as it comes.
            self._body_size += len(body)
            if self._body_size > MAX_BODY:
                self._body = []
                self._reject = f"Request body over {MAX_BODY} bytes."
                return
            self._body.append(body)

    def on_message_complete(self) -> None:
        self._complete = True
        self._in_message = False
        if not self._fast or self._handover or self._reject is not None:
            return
        if self._body_timer is not None:
            self._body_timer.cancel()
            self._body_timer = None
        self._fast = False
        path = self._path
        headers: CIMultiDict[str] = CIMultiDict(
            (k.decode("latin-1"), v.decode("latin-1")) for k, v in self._headers
        )
        self._queue.append(
            _Request(
                path.decode("latin-1"),
                _PATHS[path],
                headers,
                b"".join(self._body),
                self._parser.should_keep_alive(),
            )
        )

    # -- serving ---------------------------------------------------------------------------
    def _dispatch(self) -> None:
        if self._serving:
            return
        if not self._queue:
            if self._reject is not None:
                self._bad_request(self._reject)
            return
        transport = self._conn
        if transport is None or transport.is_closing():
            self._queue.clear()
            return
        req = self._queue.popleft()
        self._serving = True
        self._loop.create_task(self._serve(req, transport))

    async def _serve(self, req: _Request, transport: asyncio.Transport) -> None:
        sim = self._sim
        front = FastFront(req, transport)
        try:
            if sim.unauthorized(req.path, req.headers):
                front.reply(401, b'{"error":"Unauthorized"}')
            else:
                await sim.generate(front, chat=req.chat)
        except Exception:
            log.exception("error serving %s", req.path)
            if not front.sent:
                error = error_body("Internal server error.", 500, "InternalServerError")
                front.reply(500, orjson.dumps(error))
            front.close = True
        finally:
            self._serving = False
            self.request_finished()
            self._last_done = self._loop.time()
        if front.close:
            transport.close()
            return
        if self._queue or self._reject is not None:
            self._dispatch()
        elif self._pending:
            pending, self._pending = self._pending, []
            for data in pending:
                self.data_received(data)

    def _reply_and_close(self, status: int, body: bytes) -> None:
        transport = self._conn
        if transport is not None and not transport.is_closing():
            front = FastFront(_Request("", True, CIMultiDict(), b"", False), transport)
            front.reply(status, body, close=True)
            transport.close()

    def _bad_request(self, message: str) -> None:
        status = 413 if self._body_size > MAX_BODY else 400
        self._reply_and_close(status, orjson.dumps(error_body(message, status)))
        self._queue.clear()

    def _hand_over(self) -> None:
        """aiohttp's protocol takes the connection, starting with the current request."""
        transport = self._conn
        raw, self._raw = b"".join(self._raw), []
        self._handed = True
        self._cancel_timers()
        if transport is None or transport.is_closing():
            return
        inner = self._make_inner()
        self._inner = inner
        inner.connection_made(transport)
        if raw:
            inner.data_received(raw)

    def _body_expired(self, path: str) -> None:
        self._body_timer = None
        if not self._fast:
            return
        self._fast = False
        sim = self._sim
        sim.metrics.count_http(path, 408)
        message = f"The request body did not arrive within {sim.config.body_timeout_s:g} s."
        self._reply_and_close(408, orjson.dumps(error_body(message, 408)))

    # -- idle connections ------------------------------------------------------------------
    def _arm_idle(self, after: float) -> None:
        self._idle_timer = self._loop.call_later(after, self._idle_check)

    def _idle_check(self) -> None:
        """Close a connection idle for the keep-alive timeout, as aiohttp does; one timer per
        connection, re-armed for the rest of the period, rather than one per request."""
        self._idle_timer = None
        if self._handed or self._conn is None:
            return
        timeout = self._sim.config.keepalive_timeout_s
        idle = self._loop.time() - self._last_done
        if self._serving or self._busy or self._queue or idle < timeout:
            self._arm_idle(max(timeout - idle, 0.05) if not self._serving else timeout)
            return
        self._conn.close()

    def _cancel_timers(self) -> None:
        for timer in (self._body_timer, self._idle_timer):
            if timer is not None:
                timer.cancel()
        self._body_timer = self._idle_timer = None


class _NoProtocol(asyncio.Protocol):
    """The inner protocol before a hand-over (nothing is forwarded to it)."""


def fast_factory(
    server: web.Server, sim: SimApp, cap: ConnectionCap | None = None
) -> Callable[[], asyncio.Protocol]:
    """A protocol factory for `loop.create_server`: the fast path, aiohttp's for the rest;
    `cap` bounds the open connections (see `http_limits.ConnectionCap`)."""
    loop = asyncio.get_running_loop()

    def factory() -> asyncio.Protocol:
        return FastConnection(server, sim, loop, cap)

    return factory
