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

The parsing, the deadlines, the connection cap and the wire helpers are the shared HTTP/1.1
server layer's (`agentload.http1server`, also under the proxy); what is the simulator's here is
the choice of path, the hand-over, and the replies in the aiohttp application's shape.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

import httptools
import orjson
from aiohttp import web
from aiohttp.http import SERVER_SOFTWARE
from multidict import CIMultiDict

from agentload.http1server import Http1Connection, date_header, status_line
from agentload.http_limits import ConnectionCap, ConnectionGuard, ServiceLimits
from agentload.sim.frames import END as _END
from agentload.sim.frames import MAX_BODY, error_body
from agentload.sim.guard import GuardedConnection

if TYPE_CHECKING:
    from agentload.sim.app import SimApp

log = logging.getLogger("agentload.sim")

_PATHS = {b"/v1/chat/completions": True, b"/v1/completions": False}
_SERVER = b"Server: " + SERVER_SOFTWARE.encode() + b"\r\n"
_SSE_TYPE = b"Content-Type: text/event-stream; charset=utf-8\r\nTransfer-Encoding: chunked\r\n"
_JSON_TYPE = b"Content-Type: application/json\r\n"


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
    """`front.Front` over a FastConnection's transport."""

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
            status_line(status)
            + _JSON_TYPE
            + extra
            + b"Content-Length: %d\r\n" % len(body)
            + date_header()
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
            + date_header()
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


class FastConnection(Http1Connection[_Request]):
    """One connection: generation requests served here; at any other request, aiohttp's
    protocol (behind the simulator's header guard) takes the connection over."""

    __slots__ = (
        "_cap",
        "_complete",
        "_fast",
        "_handover",
        "_in_message",
        "_make_inner",
        "_path",
        "_pending",
        "_pipelined",
        "_raw",
        "_reject",
        "_sim",
    )

    abort_at_cap = False  # a refused connection is closed, not reset
    cancel_on_lost = False  # the generation notices the closed transport and ends its sequence

    def __init__(
        self,
        make_inner: Callable[[], asyncio.Protocol],
        sim: SimApp,
        loop: asyncio.AbstractEventLoop,
        limits: ServiceLimits,
        cap: ConnectionCap | None = None,
    ) -> None:
        super().__init__(loop, MAX_BODY, limits, cap)
        self._cap = cap
        self._make_inner = make_inner
        self._sim = sim
        self._handover = False  # the request being parsed goes to aiohttp
        self._fast = False
        self._pipelined = False
        self._complete = False  # a request ended in the current read
        self._in_message = False
        self._path = b""
        self._raw: list[bytes] = []  # the current request's bytes, kept for a hand-over
        self._pending: list[bytes] = []  # read while answering: parsed once the answer is out
        self._reject: str | None = None  # a 400 to answer once the queued requests are done

    # -- reading -----------------------------------------------------------------------------
    def data_received(self, data: bytes) -> None:
        if self.task is not None:
            self._pending.append(data)
            return
        if not self._in_message:
            self._raw = [data]  # a request starts with this read (no pipelining)
        elif not self._fast:
            self._raw.append(data)
        self._complete = False
        self.feed(data)
        if self._handover:
            self._hand_over()
        elif self._reject is not None and self.task is None:
            self._bad_request(self._reject)

    def parse_failed(self, exc: httptools.HttpParserError | None) -> None:
        if exc is None:  # an upgrade: aiohttp's protocol answers it
            self._handover = True
        elif not self._handover and self._reject is None:
            self._reject = f"Malformed HTTP request: {exc}"

    # -- httptools callbacks -------------------------------------------------------------------
    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._in_message = True
        self._pipelined = self._complete
        self._fast = False

    def on_headers_complete(self) -> None:
        parser = self.parser
        path = self.url.partition(b"?")[0]
        fast = (
            path in _PATHS
            and parser.get_method() == b"POST"
            and parser.get_http_version() == "1.1"
            and not parser.should_upgrade()
        )
        if fast:
            limit = self.max_body
            for name, value in self.headers:
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
        self.headers_done()

    def on_body(self, body: bytes) -> None:
        if self._fast and self._reject is None:
            super().on_body(body)

    def body_over_limit(self) -> None:
        self._reject = f"Request body over {self.max_body} bytes."

    def on_message_complete(self) -> None:
        self._complete = True
        self._in_message = False
        if not self._fast or self._handover or self._reject is not None:
            return
        self.message_done()
        self._fast = False
        path = self._path
        headers: CIMultiDict[str] = CIMultiDict(
            (k.decode("latin-1"), v.decode("latin-1")) for k, v in self.headers
        )
        self.enqueue(
            _Request(
                path.decode("latin-1"),
                _PATHS[path],
                headers,
                self.whole_body(),
                self.parser.should_keep_alive(),
            )
        )

    # -- serving -----------------------------------------------------------------------------
    async def handle(self, req: _Request) -> bool:
        transport = self.transport
        if transport is None or transport.is_closing():
            self.queue.clear()
            return False
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
        return not front.close

    def served(self) -> None:
        super().served()
        transport = self.transport
        if transport is None or transport.is_closing():
            return
        if self._reject is not None:
            self._bad_request(self._reject)
        elif self._pending:
            pending, self._pending = self._pending, []
            for data in pending:
                self.data_received(data)

    def _reply_and_close(self, status: int, body: bytes) -> None:
        transport = self.transport
        if transport is not None and not transport.is_closing():
            front = FastFront(_Request("", True, CIMultiDict(), b"", False), transport)
            front.reply(status, body, close=True)
            transport.close()

    def _bad_request(self, message: str) -> None:
        status = 413 if self.body_size > self.max_body else 400
        self._reply_and_close(status, orjson.dumps(error_body(message, status)))
        self.queue.clear()

    def _hand_over(self) -> None:
        """aiohttp's protocol, behind the header guard, takes the connection, starting with
        the current request; the connection keeps its place under the cap."""
        transport = self.transport
        raw, self._raw = b"".join(self._raw), []
        if self.guard is not None:
            self.guard.message_done()  # no deadline of ours from now on: the guard's own
        if transport is None or transport.is_closing():
            return
        handed = _Handed(
            self._make_inner(), self.loop, self._sim.config.header_timeout_s, self.guard, self._cap
        )
        transport.set_protocol(handed)
        handed.connection_made(transport)
        if raw:
            handed.data_received(raw)

    def expired(self, kind: str) -> None:
        transport = self.transport
        if transport is None or transport.is_closing():
            return
        if kind == "body":
            self._fast = False
            sim = self._sim
            sim.metrics.count_http(self._path.decode("latin-1"), 408)
            message = f"The request body did not arrive within {sim.config.body_timeout_s:g} s."
            self._reply_and_close(408, orjson.dumps(error_body(message, 408)))
            return
        if kind == "evicted":
            log.debug("closing a connection (idle) for a new one at the connection cap")
        elif kind == "header":
            log.debug("closing a connection whose request headers took over the deadline")
        transport.close()  # an idle keep-alive, as aiohttp closes it, or a slow sender


class _Handed(GuardedConnection):
    """aiohttp's protocol for the rest of a handed-over connection, behind the header guard;
    it keeps the connection's slot under the cap (busy while aiohttp serves a request)."""

    __slots__ = ("_cap", "_slot")

    def __init__(
        self,
        inner: asyncio.Protocol,
        loop: asyncio.AbstractEventLoop,
        timeout: float,
        slot: ConnectionGuard | None,
        cap: ConnectionCap | None,
    ) -> None:
        super().__init__(inner, loop, timeout)
        self._slot = slot
        self._cap = cap

    def request_started(self) -> None:
        super().request_started()
        if self._slot is not None:
            self._slot.busy = True

    def request_finished(self) -> None:
        super().request_finished()
        if self._slot is not None:
            self._slot.busy = False
            if self._cap is not None:
                self._cap.touch(self._slot)  # active again: the last to be evicted

    def connection_lost(self, exc: Exception | None) -> None:
        if self._slot is not None and self._cap is not None:
            self._cap.remove(self._slot)
        super().connection_lost(exc)


def fast_factory(
    server: web.Server, sim: SimApp, cap: ConnectionCap | None = None
) -> Callable[[], asyncio.Protocol]:
    """A protocol factory for `loop.create_server`: the fast path, aiohttp's for the rest;
    `cap` bounds the open connections (see `http_limits.ConnectionCap`)."""
    loop = asyncio.get_running_loop()
    cfg = sim.config
    limits = ServiceLimits(
        header_timeout_s=cfg.header_timeout_s,
        body_timeout_s=cfg.body_timeout_s,
        keepalive_timeout_s=cfg.keepalive_timeout_s,
        max_body_bytes=MAX_BODY,
    )

    def factory() -> asyncio.Protocol:
        return FastConnection(server, sim, loop, limits, cap)

    return factory
