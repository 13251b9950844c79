"""Closing connections that never finish sending a request (slowloris), for the simulator.

aiohttp's server has no deadline for a request's headers: a client that opens a connection
and sends half a request line holds it (and its file descriptor) for the keep-alive timeout,
an hour by default. A connection the fast front end (`sim/fasthttp.py`) hands over to aiohttp
gets a thin protocol in front of aiohttp's own (the fast path's own connections have the
deadlines of `agentload.http1server`): from a connection's first byte (or from its opening)
the request's headers must be complete within `header_timeout` seconds, or the connection is
closed. A middleware marks when a request has
reached a handler (headers complete) and when the handler is done; the body has its own
deadline in the handler (`front.AiohttpFront.body`). Idle keep-alive connections are aiohttp's
keep-alive timeout's business.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

log = logging.getLogger("agentload.sim")

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class GuardedConnection(asyncio.Protocol):
    """Forwards everything to aiohttp's protocol; closes the connection on a header timeout."""

    __slots__ = ("_busy", "_handle", "_inner", "_loop", "_timeout", "_transport", "closed_slow")

    def __init__(
        self, inner: asyncio.Protocol, loop: asyncio.AbstractEventLoop, timeout: float
    ) -> None:
        self._inner = inner
        self._loop = loop
        self._timeout = timeout
        self._handle: asyncio.TimerHandle | None = None
        self._transport: asyncio.BaseTransport | None = None
        self._busy = False
        self.closed_slow = False

    # -- asyncio.Protocol, forwarded -----------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport
        self._inner.connection_made(transport)
        # A new connection must deliver its first request within the deadline too.
        self._arm()

    def data_received(self, data: bytes) -> None:
        if not self._busy and self._handle is None:
            self._arm()
        self._inner.data_received(data)

    def eof_received(self) -> bool | None:
        return self._inner.eof_received()

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel()
        self._inner.connection_lost(exc)

    def pause_writing(self) -> None:
        self._inner.pause_writing()

    def resume_writing(self) -> None:
        self._inner.resume_writing()

    # -- request boundaries (called by the middleware) ----------------------------------
    def request_started(self) -> None:
        self._busy = True
        self._cancel()

    def request_finished(self) -> None:
        # The next request's deadline starts with its first byte (see data_received).
        self._busy = False

    # -- timer -------------------------------------------------------------------------
    def _arm(self) -> None:
        self._handle = self._loop.call_later(self._timeout, self._expired)

    def _cancel(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None

    def _expired(self) -> None:
        self._handle = None
        if self._busy or self._transport is None or self._transport.is_closing():
            return
        self.closed_slow = True
        log.debug("closing a connection whose request headers took over %.1f s", self._timeout)
        self._transport.close()


@web.middleware
async def guard_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    transport: Any = request.transport
    guard = transport.get_protocol() if transport is not None else None
    if not isinstance(guard, GuardedConnection):
        return await handler(request)
    guard.request_started()
    try:
        return await handler(request)
    finally:
        guard.request_finished()
