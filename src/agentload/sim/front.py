"""The HTTP side of a generation request: what the generation flow needs from the server that
received it (`Front`), served by aiohttp's application (`AiohttpFront`, every path) or by the
simulator's own HTTP/1.1 fast path (`fasthttp.py`)."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
from collections.abc import Mapping
from typing import Any, Protocol

import orjson
from aiohttp import web

from agentload.sim.frames import RequestError


class Front(Protocol):
    """What a generation request needs from the HTTP server that received it."""

    path: str
    headers: Mapping[str, str]
    transport: asyncio.Transport | None
    auto_end: bool
    """Whether the stream writes its last chunk itself, with its last events."""

    async def body(self) -> bytes:
        """The request body (RequestError 408 when it does not arrive in time)."""
        ...

    def reply(
        self, status: int, body: bytes, headers: dict[str, str] | None = None, close: bool = False
    ) -> None:
        """A complete JSON reply."""
        ...

    async def open_stream(self, hold: bool) -> bytes | None:
        """Start an SSE reply; with `hold`, return its status line and headers unsent (None
        where they went out). ConnectionError when the client is gone."""
        ...

    async def end_stream(self) -> None:
        """End the SSE reply (its last chunk)."""
        ...


def json_response(data: Any, status: int = 200) -> web.Response:
    return web.Response(body=orjson.dumps(data), status=status, content_type="application/json")


def reset_connection(transport: asyncio.Transport) -> None:
    """Drop the connection with a TCP reset (SO_LINGER 0), not a clean close: the `reset`
    fault, as a crashed server's peer sees it."""
    sock = transport.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    transport.abort()


def _take_headers(writer: Any) -> bytes | None:
    """The status line and headers aiohttp buffered but has not sent, taken over by the
    caller (None where this aiohttp keeps no such buffer: then it sends them itself)."""
    buf = getattr(writer, "_headers_buf", None)
    if not buf or getattr(writer, "_headers_written", True):
        return None
    writer._headers_buf = None
    writer._headers_written = True
    return bytes(buf)


class AiohttpFront:
    """A request that came through aiohttp's application; `response` is what to return."""

    auto_end = False  # aiohttp's writer ends the chunked body

    def __init__(self, request: web.Request, body_timeout_s: float) -> None:
        self.request = request
        self.path = request.path
        self.headers: Mapping[str, str] = request.headers
        self.transport = request.transport
        self.body_timeout_s = body_timeout_s
        self.response: web.StreamResponse | None = None

    async def body(self) -> bytes:
        try:
            async with asyncio.timeout(self.body_timeout_s):
                return await self.request.read()
        except TimeoutError:
            raise RequestError(
                408, f"The request body did not arrive within {self.body_timeout_s:g} s."
            ) from None

    def reply(
        self, status: int, body: bytes, headers: dict[str, str] | None = None, close: bool = False
    ) -> None:
        resp = web.Response(
            body=body, status=status, content_type="application/json", headers=headers
        )
        if close:
            resp.force_close()
        self.response = resp

    async def open_stream(self, hold: bool) -> bytes | None:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream; charset=utf-8"})
        resp.enable_chunked_encoding()
        self.response = resp
        if hold:
            resp._send_headers_immediately = False
        writer = await resp.prepare(self.request)
        head = _take_headers(writer) if hold else None
        send_headers = getattr(writer, "send_headers", None)
        if head is None and send_headers is not None:
            send_headers()
        return head

    async def end_stream(self) -> None:
        if self.response is not None:
            with contextlib.suppress(ConnectionError, RuntimeError):
                await self.response.write_eof()
