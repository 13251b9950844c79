"""The HTTP/1.1 server layer under the simulator's front end and the proxy's caller side.

Why not aiohttp's server on those two hot paths: per request it builds a request object, a
header multidict, a payload stream and a response writer, and wakes the handler once per body
read; profiles of the simulator and of the proxy (benchmarks/README.md, "Simulator request
path" and "Proxy") showed that machinery as the largest share of their Python work per call.

`Http1Connection` is an asyncio protocol that parses requests with llhttp (through httptools,
the parser `agentload.client.http1` uses) and keeps what both servers share:

- the parser callbacks, collecting one request's target, raw headers and body, with the body
  limit checked as it arrives (a chunked body has no length up front);
- the deadlines and the connection cap of `agentload.http_limits` (a `ConnectionGuard` driven
  at the request's boundaries: headers within `header_timeout_s`, the body within
  `body_timeout_s`, idle keep-alive closed after `keepalive_timeout_s`);
- keep-alive and pipelining: complete requests queue and one task answers them in order;
- flow control: `pause_writing` / `resume_writing` hold a reply (and the upstream feeding it)
  while the peer's socket buffer is full;
- the wire: status line, `Date`, Content-Length or chunked framing, and refusals (a short
  reply, then a close, lingering where unread request bytes would make the kernel reset it).

A subclass says what a request means (`handle`), what a deadline or a parse error does
(`expired`, `parse_failed`), and what a body over the limit does (`body_over_limit`).
"""

from __future__ import annotations

import asyncio
import contextlib
import email.utils
import http
import socket
import time
from collections import deque
from collections.abc import Iterable
from typing import Any, Generic, TypeVar

import httptools

from agentload.http_limits import ConnectionCap, ConnectionGuard, ServiceLimits

LINGER_S = 2.0
"""How long a refused connection drops what the peer still sends before it is cut."""

_date_cache: list[Any] = [0, b""]
_status_lines: dict[int, bytes] = {}


def date_header() -> bytes:
    """`Date: ...\\r\\n`, rebuilt once a second."""
    now = int(time.time())
    if now != _date_cache[0]:
        _date_cache[0] = now
        _date_cache[1] = b"Date: " + email.utils.formatdate(now, usegmt=True).encode() + b"\r\n"
    return _date_cache[1]


def status_line(status: int) -> bytes:
    """`HTTP/1.1 200 OK\\r\\n` (the standard reason phrase; none for an unknown code)."""
    line = _status_lines.get(status)
    if line is None:
        try:
            phrase = http.HTTPStatus(status).phrase
        except ValueError:
            phrase = ""
        line = _status_lines[status] = b"HTTP/1.1 %d %s\r\n" % (status, phrase.encode())
    return line


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
        parts = [status_line(status)]
    else:
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


R = TypeVar("R")
"""A subclass's request type."""


class Http1Connection(asyncio.Protocol, Generic[R]):
    """One HTTP/1.1 connection: requests parsed, queued, and answered in order by `handle`."""

    __slots__ = (
        "body",
        "body_pending",
        "body_size",
        "closed",
        "drained",
        "feeding",
        "guard",
        "headers",
        "loop",
        "max_body",
        "parser",
        "paused",
        "queue",
        "refused",
        "task",
        "transport",
        "url",
    )

    # A connection refused at the cap is reset (True) or closed with a FIN (False).
    abort_at_cap = True
    # A peer that goes away cancels the request being answered (True), or the answer runs on
    # and finds the transport closed (False: it has state of its own to release in order).
    cancel_on_lost = True

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        max_body: int,
        limits: ServiceLimits | None = None,
        cap: ConnectionCap | None = None,
    ) -> None:
        # The loop comes from the server's factory: asyncio.get_running_loop() per request
        # would cost a getpid() system call each time (CPython 3.11 checks the pid).
        self.loop = loop
        self.max_body = max_body
        self.guard = ConnectionGuard(limits, cap, self.expired) if limits is not None else None
        self.parser = httptools.HttpRequestParser(self)
        self.transport: asyncio.Transport | None = None
        self.closed = False  # connection_lost has run
        self.refused = False  # answered with a refusal: what the peer still sends is dropped
        self.queue: deque[R] = deque()
        self.task: asyncio.Task[None] | None = None
        self.paused = False
        self.drained: asyncio.Future[None] | None = None
        # A transport feeding the current reply (the proxy's upstream): paused while we are.
        self.feeding: asyncio.Transport | None = None
        self.url = b""
        self.headers: list[tuple[bytes, bytes]] = []
        self.body: list[bytes] = []
        self.body_size = 0
        self.body_pending = False  # headers done, the body's deadline not started yet

    # -- asyncio.Protocol ------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        sock = transport.get_extra_info("socket")
        if sock is not None:  # small writes leave at once (no Nagle delay)
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if self.guard is not None and not self.guard.opened():
            # Every connection at the cap is serving a request: refuse this one rather than
            # run out of file descriptors, which would fail every accept.
            self.refused = True
            if self.abort_at_cap:
                transport.abort()  # type: ignore[attr-defined]
            else:
                transport.close()

    def feed(self, data: bytes) -> None:
        """Parse `data`; requests it completes are queued and served."""
        guard = self.guard
        if guard is not None:
            guard.data()
        try:
            self.parser.feed_data(data)
            if self.body_pending:  # the body goes on in a later read: now it has a deadline
                self.body_pending = False
                if guard is not None:
                    guard.headers_done()
        except httptools.HttpParserUpgrade:
            self.parse_failed(None)
        except httptools.HttpParserError as exc:
            self.parse_failed(exc)

    def data_received(self, data: bytes) -> None:
        if not self.refused:  # what the peer still sends after a refusal is dropped
            self.feed(data)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self.guard is not None:
            self.guard.lost()
        if self.task is not None and self.cancel_on_lost:
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
        self.url, self.headers, self.body, self.body_size = b"", [], [], 0

    def on_url(self, url: bytes) -> None:
        self.url += url

    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers.append((name, value))

    def on_body(self, body: bytes) -> None:
        self.body_size += len(body)
        if self.body_size > self.max_body:
            self.body = []
            self.body_over_limit()
            return
        self.body.append(body)

    def headers_done(self) -> None:
        """A request's headers are in (call from `on_headers_complete`): it is being served
        from now on. Its body's deadline starts only if the body is not complete in the same
        read, the usual case, which then costs no timer."""
        self.body_pending = True

    def message_done(self) -> None:
        """A request is complete (call from `on_message_complete`)."""
        self.body_pending = False
        guard = self.guard
        if guard is not None:
            guard.busy = True  # never evicted while its reply is under way
            guard.message_done()

    def content_length(self) -> int:
        """The request's Content-Length (0 when absent or malformed: the parser refuses it)."""
        for k, v in self.headers:
            if k.lower() == b"content-length":
                v = v.strip()
                return int(v) if v.isdigit() else 0
        return 0

    def whole_body(self) -> bytes:
        body = self.body
        return body[0] if len(body) == 1 else b"".join(body)

    # -- serving ---------------------------------------------------------------------------
    def enqueue(self, req: R) -> None:
        """Queue a complete request; one task answers the queue in order."""
        self.queue.append(req)
        if self.task is None:
            self.task = self.loop.create_task(self._serve())

    async def _serve(self) -> None:
        try:
            while self.queue and not self.closed:
                if not await self.handle(self.queue.popleft()):
                    self.close()
                    return
        finally:
            self.task = None
            self.served()

    async def handle(self, req: R) -> bool:
        """Answer one request; False closes the connection after it."""
        raise NotImplementedError

    def served(self) -> None:
        """The queue is answered: the connection is idle until the next request."""
        transport = self.transport
        if self.guard is None or self.refused or transport is None or transport.is_closing():
            return
        self.guard.reply_done()

    # -- the subclass's decisions ------------------------------------------------------------
    def parse_failed(self, exc: httptools.HttpParserError | None) -> None:
        """The parser stopped: at a protocol upgrade (`exc` None) or on malformed input."""
        raise NotImplementedError

    def body_over_limit(self) -> None:
        """The body passed `max_body` (raising here stops the parser)."""
        raise NotImplementedError

    def expired(self, kind: str) -> None:
        """A deadline passed ("header", "body", "idle") or the cap closes this idle
        connection for a new one ("evicted")."""
        raise NotImplementedError

    # -- writing ---------------------------------------------------------------------------
    def write(self, data: bytes) -> None:
        """Send `data` now (one socket write); raises ConnectionResetError if the peer left."""
        transport = self.transport
        if self.closed or transport is None or transport.is_closing():
            raise ConnectionResetError("the caller closed the connection")
        transport.write(data)

    async def drain(self) -> None:
        """Wait while the peer's socket buffer is full."""
        while self.paused and not self.closed:
            self.drained = self.loop.create_future()
            await self.drained
        if self.closed:
            raise ConnectionResetError("the caller closed the connection")

    def _wake(self) -> None:
        w, self.drained = self.drained, None
        if w is not None and not w.done():
            w.set_result(None)

    def refuse(
        self,
        status: int,
        body: bytes,
        headers: Iterable[tuple[bytes, bytes]] = ((b"Content-Type", b"text/plain"),),
        *,
        linger: bool = True,
    ) -> None:
        """Answer `status` with `body` and close the connection. With `linger`, our side ends
        first and what the peer still sends is read and dropped for `LINGER_S`: closing with
        unread request bytes would make the kernel reset the connection, and the peer might
        lose the answer."""
        head = reply_head(status, headers, b"Content-Length: %d\r\n" % len(body), close=True)
        with contextlib.suppress(ConnectionResetError):
            self.write(head + body)
        self.refused = True
        transport = self.transport
        if transport is None or transport.is_closing():
            return
        if linger and transport.can_write_eof():
            transport.write_eof()
            self.loop.call_later(LINGER_S, self.abort)
        else:
            transport.close()

    def close(self) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.close()

    def abort(self) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.abort()
