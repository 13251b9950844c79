"""The proxy's caller side: an HTTP/1.1 server on a plain asyncio protocol, parsed by httptools.

Why not aiohttp's server: per proxied call it builds a request object, a header multidict, a
payload stream and a response writer, and wakes the handler task once per body read; in a
profile of the proxy at 16 calls in flight that was the largest share of its Python work per
call. A pass-through needs less: a request parsed whole (llhttp through httptools, the parser
`agentload.client.http1` uses), handed to one handler, and a reply written as a head and body
pieces with the caller's framing (Content-Length when the whole reply is known, chunked
otherwise, or to the end of the connection for an HTTP/1.0 caller). Pipelined requests are
answered in order; `Expect: 100-continue` is honoured; a caller that goes away cancels its
handler. Tested against real sockets in tests/integration/test_proxy_caller.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import time
from collections import deque
from collections.abc import Awaitable, Callable, Iterable
from http import HTTPStatus
from typing import Any

import httptools

from agentload.http_limits import ConnectionCap, ConnectionGuard, ServiceLimits

log = logging.getLogger("agentload.proxy")
_now_ns = time.perf_counter_ns
_CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"
_LINGER_S = 2.0


class _TooLarge(Exception):
    """A request body over the limit."""


class Headers(dict[str, str]):
    """Request headers by lower-case name, looked up in any case (`get("Authorization")`)."""

    def get(self, key: str, default: Any = None) -> Any:
        return dict.get(self, key.lower(), default)

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and dict.__contains__(self, key.lower())


class ProxyRequest:
    """One request as it arrived: method, target, raw headers and the whole body."""

    __slots__ = ("arrived_ns", "body", "headers", "http11", "keep_alive", "method", "target")

    def __init__(
        self,
        method: str,
        target: str,
        headers: list[tuple[bytes, bytes]],
        body: bytes,
        keep_alive: bool,
        http11: bool,
        arrived_ns: int,
    ) -> None:
        self.method = method
        self.target = target
        self.headers = headers
        self.body = body
        self.keep_alive = keep_alive
        self.http11 = http11
        self.arrived_ns = arrived_ns  # when the read that completed the request arrived

    @property
    def path(self) -> str:
        return self.target.partition("?")[0]

    def view(self) -> Headers:
        """The headers as text (the last value of a repeated name)."""
        return Headers((k.decode("latin-1").lower(), v.decode("latin-1")) for k, v in self.headers)

    def set_header(self, name: str, value: str) -> None:
        """Replace every `name` header (any case) with one `name: value`."""
        low = name.lower().encode("latin-1")
        kept = [(k, v) for k, v in self.headers if k.lower() != low]
        kept.append((name.encode("latin-1"), value.encode("latin-1")))
        self.headers = kept


Handler = Callable[[ProxyRequest, "Caller"], Awaitable[None]]


def reply_head(
    status: int,
    headers: Iterable[tuple[bytes, bytes]],
    framing: bytes,
    *,
    close: bool,
    reason: str | None = None,
) -> bytes:
    """Status line and headers; `framing` is the Content-Length / Transfer-Encoding line."""
    if reason is None:
        try:
            reason = HTTPStatus(status).phrase
        except ValueError:
            reason = ""
    parts = [f"HTTP/1.1 {status} {reason}\r\n".encode("latin-1")]
    parts += [k + b": " + v + b"\r\n" for k, v in headers]
    if framing:
        parts.append(framing)
    if close:
        parts.append(b"Connection: close\r\n")
    parts.append(b"\r\n")
    return b"".join(parts)


def chunk(data: bytes) -> bytes:
    """`data` as one chunk of chunked transfer coding (nothing for no data)."""
    return b"%x\r\n%b\r\n" % (len(data), data) if data else b""


class Caller(asyncio.Protocol):
    """One caller's connection: parses requests and runs the handler for each, in order."""

    def __init__(
        self,
        handler: Handler,
        max_body: int,
        live: set[Caller],
        limits: ServiceLimits | None = None,
        cap: ConnectionCap | None = None,
    ) -> None:
        self.handler = handler
        self.max_body = max_body
        self.live = live
        # Header, body and idle deadlines and the connection cap (agentload.http_limits).
        self.guard = ConnectionGuard(limits, cap, self._expired) if limits is not None else None
        self.parser = httptools.HttpRequestParser(self)
        # Made inside the loop (the server's factory). asyncio.get_running_loop() per request
        # would cost a getpid() system call each time (CPython 3.11 checks the pid).
        self.loop = asyncio.get_running_loop()
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.refused = False
        self.queue: deque[ProxyRequest] = deque()
        self.task: asyncio.Task[None] | None = None
        self.read_ns = 0
        self.paused = False
        self.drained: asyncio.Future[None] | None = None
        # The upstream connection feeding the current reply: paused while the caller is.
        self.feeding: asyncio.Transport | None = None
        self._url = b""
        self._headers: list[tuple[bytes, bytes]] = []
        self._body: list[bytes] = []
        self._size = 0

    # -- asyncio.Protocol ------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        sock = transport.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.live.add(self)
        if self.guard is not None and not self.guard.opened():
            self.refused = True  # every connection is serving a request: no room for this one
            transport.abort()  # type: ignore[attr-defined]

    def data_received(self, data: bytes) -> None:
        self.read_ns = _now_ns()
        if self.refused:
            return  # what the caller still sends after a refusal is dropped
        if self.guard is not None:
            self.guard.data()
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self._refuse(501, "protocol upgrades are not supported")
        except httptools.HttpParserError as e:
            if isinstance(e.__context__, _TooLarge):
                self._refuse(413, str(e.__context__))
            else:
                self._refuse(400, f"bad HTTP request: {e}")

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.live.discard(self)
        if self.guard is not None:
            self.guard.lost()
        if self.task is not None:
            self.task.cancel()
        self._wake()

    def pause_writing(self) -> None:
        self.paused = True
        if self.feeding is not None:
            self.feeding.pause_reading()

    def resume_writing(self) -> None:
        self.paused = False
        if self.feeding is not None and not self.feeding.is_closing():
            self.feeding.resume_reading()
        self._wake()

    # -- httptools callbacks ---------------------------------------------------------------
    def on_message_begin(self) -> None:
        self._url, self._headers, self._body, self._size = b"", [], [], 0

    def on_url(self, url: bytes) -> None:
        self._url += url

    def on_header(self, name: bytes, value: bytes) -> None:
        self._headers.append((name, value))

    def on_headers_complete(self) -> None:
        if self.guard is not None:
            self.guard.headers_done()
        length = self.parser_content_length()
        if length > self.max_body:  # refused before a byte of the body is read
            raise _TooLarge(f"request body of {length} bytes is over {self.max_body} bytes")
        if self.task is not None or self.queue:
            return  # never inside another reply: the caller sends its body after a pause
        for k, v in self._headers:
            if k.lower() == b"expect" and v.lower() == b"100-continue":
                self.write(_CONTINUE)

    def on_body(self, body: bytes) -> None:
        self._size += len(body)
        if self._size > self.max_body:
            raise _TooLarge(f"request body over {self.max_body} bytes")
        self._body.append(body)

    def parser_content_length(self) -> int:
        for k, v in self._headers:
            if k.lower() == b"content-length":
                v = v.strip()
                return int(v) if v.isdigit() else 0  # malformed: the parser refuses it
        return 0

    def on_message_complete(self) -> None:
        if self.guard is not None:
            self.guard.message_done()
        if self.parser.should_upgrade():
            return  # refused (501) once the parser stops at the upgrade
        body = self._body
        req = ProxyRequest(
            self.parser.get_method().decode("latin-1"),
            self._url.decode("latin-1"),
            self._headers,
            body[0] if len(body) == 1 else b"".join(body),
            self.parser.should_keep_alive(),
            self.parser.get_http_version() == "1.1",
            self.read_ns,
        )
        self.queue.append(req)
        if self.task is None:
            self.task = self.loop.create_task(self._serve())

    # -- replies ---------------------------------------------------------------------------
    async def _serve(self) -> None:
        try:
            while self.queue and not self.closed:
                req = self.queue.popleft()
                try:
                    await self.handler(req, self)
                except asyncio.CancelledError:
                    raise
                except Exception:
                    log.exception("proxy: failed on %s %s", req.method, req.path)
                    self.abort()
                    return
                if not req.keep_alive:
                    self.close()
                    return
        finally:
            self.task = None
            if self.guard is not None and not self.closed and not self.refused:
                self.guard.reply_done()

    def write(self, data: bytes) -> None:
        """Send `data` now (one socket write); raises ConnectionResetError if the caller left."""
        if self.closed or self.transport is None or self.transport.is_closing():
            raise ConnectionResetError("the caller closed the connection")
        self.transport.write(data)

    async def drain(self) -> None:
        """Wait while the caller's socket buffer is full."""
        while self.paused and not self.closed:
            self.drained = self.loop.create_future()
            await self.drained
        if self.closed:
            raise ConnectionResetError("the caller closed the connection")

    def _wake(self) -> None:
        w, self.drained = self.drained, None
        if w is not None and not w.done():
            w.set_result(None)

    def _refuse(self, status: int, message: str) -> None:
        body = message.encode("latin-1", "replace")
        head = reply_head(
            status,
            [(b"Content-Type", b"text/plain")],
            b"Content-Length: %d\r\n" % len(body),
            close=True,
        )
        with contextlib.suppress(ConnectionResetError):
            self.write(head + body)
        # A lingering close: closing with unread request bytes would make the kernel reset
        # the connection, and the caller might lose the answer. End our side, drop what still
        # comes, and close a little later.
        self.refused = True
        transport = self.transport
        if transport is not None and not transport.is_closing():
            if transport.can_write_eof():
                transport.write_eof()
            self.loop.call_later(_LINGER_S, self.abort)

    def _expired(self, kind: str) -> None:
        """A deadline passed, or the connection cap closes this idle connection."""
        if self.refused or self.closed:
            return
        if kind == "body":
            assert self.guard is not None
            secs = self.guard.limits.body_timeout_s
            self._refuse(408, f"request body did not arrive within {secs:g} s")
        elif kind == "idle":
            self.close()
        else:  # a slow or silent sender: nothing to answer, free its descriptor now
            self.refused = True
            self.abort()

    def close(self) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.close()

    def abort(self) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.abort()


async def serve_callers(
    handler: Handler,
    host: str,
    port: int,
    max_body: int,
    live: set[Caller],
    limits: ServiceLimits | None = None,
    cap: ConnectionCap | None = None,
) -> asyncio.Server:
    """Listen on host:port; each connection is a `Caller` running `handler`, under `limits`
    (deadlines) and `cap` (open connections) when given."""
    loop = asyncio.get_running_loop()
    return await loop.create_server(
        lambda: Caller(handler, max_body, live, limits, cap),
        host,
        port,
        reuse_address=True,
        backlog=1024,
    )


async def close_callers(server: asyncio.Server, live: set[Caller], grace_s: float) -> None:
    """Stop listening, let replies under way finish for up to `grace_s`, then cut the rest."""
    server.close()
    tasks = [c.task for c in live if c.task is not None]
    if tasks:
        await asyncio.wait(tasks, timeout=grace_s)
    for c in list(live):
        c.abort()
    tasks = [t for t in tasks if not t.done()]
    if tasks:
        await asyncio.gather(*tasks, return_exceptions=True)
    await server.wait_closed()
