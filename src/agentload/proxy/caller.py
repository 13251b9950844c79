"""The proxy's caller side: an HTTP/1.1 server on `agentload.http1server`.

A pass-through needs little of a web framework: a request parsed whole, handed to one handler,
and a reply written as a head and body pieces with the caller's framing (Content-Length when
the whole reply is known, chunked otherwise, or to the end of the connection for an HTTP/1.0
caller). What is the proxy's own here: pipelined requests are answered in order without an
interim reply in between, `Expect: 100-continue` is honoured, a protocol upgrade is refused
with 501, a malformed request with a plain-text 400 and a lingering close, and a caller that
goes away cancels its handler; the upstream's stream is held back while the caller's socket is
full (`feeding`, see `http1server`). Tested against real sockets in
tests/integration/test_proxy_caller.py.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

import httptools

from agentload.http1server import Http1Connection, chunk, reply_head
from agentload.http_limits import ConnectionCap, ServiceLimits

__all__ = [
    "Caller",
    "Handler",
    "ProxyRequest",
    "chunk",
    "close_callers",
    "reply_head",
    "serve_callers",
]

log = logging.getLogger("agentload.proxy")
_now_ns = time.perf_counter_ns
_CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"


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


class Caller(Http1Connection[ProxyRequest]):
    """One caller's connection: parses requests and runs the handler for each, in order."""

    __slots__ = ("handler", "live", "read_ns")

    def __init__(
        self,
        handler: Handler,
        max_body: int,
        live: set[Caller],
        limits: ServiceLimits | None = None,
        cap: ConnectionCap | None = None,
    ) -> None:
        super().__init__(asyncio.get_running_loop(), max_body, limits, cap)
        self.handler = handler
        self.live = live
        self.read_ns = 0

    # -- asyncio.Protocol ------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.live.add(self)
        super().connection_made(transport)

    def data_received(self, data: bytes) -> None:
        self.read_ns = _now_ns()
        if not self.refused:  # what the caller still sends after a refusal is dropped
            self.feed(data)

    def connection_lost(self, exc: Exception | None) -> None:
        self.live.discard(self)
        super().connection_lost(exc)

    # -- httptools callbacks ---------------------------------------------------------------
    def on_headers_complete(self) -> None:
        self.headers_done()
        length = self.content_length()
        if length > self.max_body:  # refused before a byte of the body is read
            raise _TooLarge(f"request body of {length} bytes is over {self.max_body} bytes")
        if self.task is not None or self.queue:
            return  # never inside another reply: the caller sends its body after a pause
        for k, v in self.headers:
            if k.lower() == b"expect" and v.lower() == b"100-continue":
                self.write(_CONTINUE)

    def body_over_limit(self) -> None:
        raise _TooLarge(f"request body over {self.max_body} bytes")

    def on_message_complete(self) -> None:
        self.message_done()
        parser = self.parser
        if parser.should_upgrade():
            return  # refused (501) once the parser stops at the upgrade
        self.enqueue(
            ProxyRequest(
                parser.get_method().decode("latin-1"),
                self.url.decode("latin-1"),
                self.headers,
                self.whole_body(),
                parser.should_keep_alive(),
                parser.get_http_version() == "1.1",
                self.read_ns,
            )
        )

    def parse_failed(self, exc: httptools.HttpParserError | None) -> None:
        if exc is None:
            self._refuse(501, "protocol upgrades are not supported")
        elif isinstance(exc.__context__, _TooLarge):
            self._refuse(413, str(exc.__context__))
        else:
            self._refuse(400, f"bad HTTP request: {exc}")

    # -- replies ---------------------------------------------------------------------------
    async def handle(self, req: ProxyRequest) -> bool:
        try:
            await self.handler(req, self)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("proxy: failed on %s %s", req.method, req.path)
            self.abort()
            return False
        return req.keep_alive

    def _refuse(self, status: int, message: str) -> None:
        self.refuse(status, message.encode("latin-1", "replace"))

    def expired(self, kind: str) -> None:
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
