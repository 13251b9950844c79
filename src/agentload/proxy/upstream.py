"""The proxy's chat completions to the upstream, on the client's pooled HTTP/1.1 connections.

`agentload.client.http1` does the connection work (keep-alive pool, llhttp parsing, TCP_NODELAY,
one retry on a new connection when a kept-alive one turns out closed before any reply byte).
Here a connection subclass hands every read of the reply — head, body, and whether it ended —
to a `Relay` inside `data_received`, whatever the status: the proxy writes each read on to
the caller then and there, in one socket write, with no task woken per read.
"""

from __future__ import annotations

import ssl
from collections.abc import Iterable
from typing import Protocol
from urllib.parse import urlsplit

from agentload.client.http1 import HOP_BY_HOP, Http1Conn, Http1Error, Http1Pool, Stamps

# Never copied from the caller's request upstream: hop-by-hop, and what this hop sets itself.
REQUEST_SKIP = frozenset(h.encode() for h in HOP_BY_HOP) | {b"host", b"content-length"}
# Never copied from the upstream's reply to the caller: hop-by-hop, and the reply's framing.
REPLY_SKIP = frozenset(h.encode() for h in HOP_BY_HOP) | {b"content-length"}

__all__ = ["REPLY_SKIP", "REQUEST_SKIP", "Http1Error", "Relay", "RelayPool", "UpstreamConn"]


class Relay(Stamps, Protocol):
    """Takes each read of an upstream reply as it arrives."""

    def relay(self, conn: UpstreamConn, body: bytes, now: int) -> None:
        """`body`: this read's body bytes (maybe none); `conn.status`, `conn.headers` and
        `conn.complete` (the reply ended with this read) are set. May raise to abort."""


class UpstreamConn(Http1Conn):
    """A pooled connection whose every reply, of any status, goes to the relay read by read."""

    def on_headers_complete(self) -> None:
        super().on_headers_complete()
        self.use_sink = self.sink is not None

    def _deliver(self, now: int) -> None:
        pieces = self.pieces
        if not pieces:
            body = b""
        elif len(pieces) == 1:
            body = pieces[0]
        else:
            body = b"".join(pieces)
        pieces.clear()
        self.sink.relay(self, body, now)  # type: ignore[union-attr]


class RelayPool(Http1Pool):
    """Keep-alive connections to the upstream `http(s)://host[:port]`."""

    conn_class = UpstreamConn

    def __init__(self, root: str, *, limit: int, connect_timeout: float = 30.0) -> None:
        parts = urlsplit(root)
        tls = ssl.create_default_context() if parts.scheme == "https" else None
        host = parts.hostname or "127.0.0.1"
        super().__init__(host, parts.port or (443 if tls else 80), limit, connect_timeout, tls=tls)
        self.host_header = (parts.netloc.rpartition("@")[2] if parts.port else host).encode()

    def encode(
        self, method: str, target: str, headers: Iterable[tuple[bytes, bytes]], body: bytes
    ) -> bytes:
        """The request as it goes on the wire: one buffer for one write."""
        parts = [f"{method} {target} HTTP/1.1\r\nHost: ".encode("latin-1"), self.host_header]
        parts += [b"\r\n" + k + b": " + v for k, v in headers]
        parts.append(b"\r\nContent-Length: %d\r\n\r\n" % len(body))
        parts.append(body)
        return b"".join(parts)

    async def send(self, data: bytes, relay: Relay) -> None:
        """Send one encoded request; the reply goes to `relay`. Raises Http1Error."""
        await self.request(data, relay, relay)  # type: ignore[arg-type]
