"""A lean HTTP/1.1 client for the chat hot path: pooled keep-alive connections, httptools.

Why not aiohttp on this path: profiled against a canned stream, aiohttp's request and response
machinery (ClientRequest/ClientResponse objects, header multidicts, the StreamReader and one
task wake-up per read) took more than half of the ~146 µs of client CPU a streamed call cost
(benchmarks/README.md, "Client"). This module does only what a POST to an OpenAI-compatible
endpoint over plain HTTP needs: the request goes out as one pre-encoded write, the reply is
parsed by llhttp (through httptools, the parser uvicorn uses), and each read's body bytes are
handed to the caller inside `data_received`, so no task wakes per read. The client sends HTTPS,
and a caller's own aiohttp session, through aiohttp; `agentload proxy` uses this pool (TLS
included) for its upstream, with a connection subclass (proxy.upstream). It is tested against
the embedded simulator, the scripted test server (aiohttp) and real vLLM.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
import time
from collections import deque
from typing import Protocol

import httptools

_now_ns = time.perf_counter_ns

# Hop-by-hop headers (RFC 9110 7.6.1, plus the obsolete Proxy-Connection): they describe one
# connection, so a pass-through never copies them from one side to the other.
HOP_BY_HOP = frozenset(
    (
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "proxy-connection",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
    )
)


class Http1Error(Exception):
    """A transport failure; `kind` is the client's error kind."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message


class StreamSink(Protocol):
    """Takes a 200 reply's body as it arrives (may raise to end the request)."""

    def http_body(self, data: bytes, now: int) -> None: ...


class Stamps(Protocol):
    """Where the arrival time of the reply's headers is written."""

    headers_ns: int | None


class Reply:
    """Status, headers and (unless streamed to a sink) body of one response; `reset`: the
    connection error that ended a body delimited by the connection's close (it may be cut)."""

    __slots__ = ("body", "headers", "headers_ns", "reset", "status")

    def __init__(
        self,
        status: int,
        headers: list[tuple[bytes, bytes]],
        body: bytes,
        hns: int,
        reset: str | None = None,
    ):
        self.status = status
        self.headers = headers
        self.body = body
        self.headers_ns = hns
        self.reset = reset

    def header(self, name: str) -> str | None:
        key = name.lower().encode()
        for k, v in self.headers:
            if k.lower() == key:
                return v.decode("latin-1")
        return None


class Http1Conn(asyncio.Protocol):
    """One keep-alive connection; handles one request at a time."""

    def __init__(self, pool: Http1Pool) -> None:
        self.pool = pool
        # Made inside the loop (create_connection's factory). asyncio.get_running_loop() per
        # request would cost a getpid() system call each time (CPython 3.11 checks the pid).
        self.loop = asyncio.get_running_loop()
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.lost = False
        self.read_ns = 0
        self.waiter: asyncio.Future[None] | None = None
        self._reset(None, None)

    def _reset(self, stamps: Stamps | None, sink: StreamSink | None) -> None:
        self.stamps = stamps
        self.sink = sink
        self.use_sink = False
        self.status = 0
        self.headers: list[tuple[bytes, bytes]] = []
        self.pieces: list[bytes] = []
        self.headers_ns = 0
        self.got_headers = False
        self.complete = False
        self.needs_eof = False
        self.reset: str | None = None  # the error that ended a close-delimited body
        self.reusable = False
        self.fresh = True  # no byte of the reply yet

    def send(self, data: bytes, stamps: Stamps, sink: StreamSink | None) -> asyncio.Future[None]:
        """Write one request; the future completes when its reply has."""
        self._reset(stamps, sink)
        waiter = self.waiter = self.loop.create_future()
        self.transport.write(data)  # type: ignore[union-attr]
        return waiter

    # -- asyncio.Protocol ------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def data_received(self, data: bytes) -> None:
        now = self.read_ns = _now_ns()
        self.fresh = False
        waiter = self.waiter
        if waiter is None or waiter.done():
            # Bytes nobody asked for (a server talking out of turn): never reuse this one.
            self.reusable = False
            self.close()
            return
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as e:
            self._fail(self._lost_error(f"bad HTTP reply: {e}"))
            return
        if self.use_sink:
            try:
                self._deliver(now)
            except BaseException as e:
                self._fail(e)
                return
        if self.complete:
            waiter.set_result(None)

    def _deliver(self, now: int) -> None:
        """Hand this read's body bytes to the sink (a subclass may hand over more)."""
        pieces = self.pieces
        if pieces:
            body = pieces[0] if len(pieces) == 1 else b"".join(pieces)
            pieces.clear()
            self.sink.http_body(body, now)  # type: ignore[union-attr]

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        self.pool._forget(self)
        waiter = self.waiter
        if waiter is None or waiter.done():
            return
        if self.got_headers and self.needs_eof:
            # A body delimited by the end of the connection. A reset (exc) may have cut it:
            # the reader of the body decides (a stream that had its end is complete).
            self.reset = f"{exc}" if exc is not None else None
            waiter.set_result(None)
        else:
            self._fail(self._lost_error(f"connection lost: {exc or 'closed by the server'}"))

    # -- httptools callbacks ---------------------------------------------------------------
    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers.append((name, value))

    def on_headers_complete(self) -> None:
        # The arrival of the read that completed them: the same clock as the body's chunks.
        self.headers_ns = self.read_ns
        if self.stamps is not None:
            self.stamps.headers_ns = self.headers_ns
        self.got_headers = True
        self.status = self.parser.get_status_code()
        self.use_sink = self.sink is not None and self.status == 200
        if not self.parser.should_keep_alive():
            names = {k.lower() for k, _ in self.headers}
            self.needs_eof = b"content-length" not in names and b"transfer-encoding" not in names

    def on_body(self, body: bytes) -> None:
        self.pieces.append(body)

    def on_message_complete(self) -> None:
        self.complete = True
        self.reusable = self.parser.should_keep_alive()

    # -- helpers ---------------------------------------------------------------------------
    def _lost_error(self, message: str) -> Http1Error:
        if self.got_headers:
            return Http1Error("malformed_stream", f"connection lost mid-stream: {message}")
        return Http1Error("connect_error", message)

    def _fail(self, exc: BaseException) -> None:
        self.reusable = False
        waiter = self.waiter
        if waiter is not None and not waiter.done():
            waiter.set_exception(exc)
        self.close()

    def close(self) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.abort()


class Http1Pool:
    """Keep-alive connections to one host:port; at most `limit` open (0 = no limit).
    `tls`: a context for HTTPS (the client itself sends HTTPS through aiohttp)."""

    conn_class: type[Http1Conn] = Http1Conn

    def __init__(
        self,
        host: str,
        port: int,
        limit: int,
        connect_timeout: float | None,
        tls: ssl.SSLContext | None = None,
    ) -> None:
        self.host = host
        self.port = port
        self.limit = limit
        self.connect_timeout = connect_timeout
        self.tls = tls
        self._idle: list[Http1Conn] = []
        self._open: set[Http1Conn] = set()
        self._connecting = 0
        self._waiters: deque[asyncio.Future[None]] = deque()

    async def request(self, data: bytes, stamps: Stamps, sink: StreamSink | None) -> Reply:
        """Send one pre-encoded request; a 200 reply's body goes to `sink` when given."""
        # The common case inline, without a coroutine per step: an idle kept-alive connection.
        conn = self._take_idle()
        reused = conn is not None
        if conn is None:
            conn, reused = await self._acquire()
        waiter = conn.send(data, stamps, sink)
        try:
            await waiter
        except BaseException as e:
            conn.waiter = None
            conn.close()
            if not (e.__class__ is Http1Error and reused and conn.fresh):
                raise
            # A kept-alive connection the server closed while idle (its close not seen yet):
            # nothing of the reply arrived, so send again once on a new connection.
            conn, _ = await self._acquire(new=True)
            await self._exchange(conn, data, stamps, sink)
        else:
            conn.waiter = None
        pieces = conn.pieces
        body = pieces[0] if len(pieces) == 1 else b"".join(pieces)
        reply = Reply(conn.status, conn.headers, body, conn.headers_ns, conn.reset)
        self._release(conn)
        return reply

    async def _exchange(
        self, conn: Http1Conn, data: bytes, stamps: Stamps, sink: StreamSink | None
    ) -> None:
        waiter = conn.send(data, stamps, sink)
        try:
            await waiter
        except BaseException:
            conn.close()
            raise
        finally:
            conn.waiter = None

    def _take_idle(self) -> Http1Conn | None:
        idle = self._idle
        while idle:
            conn = idle.pop()
            if not conn.lost:
                return conn
        return None

    async def _acquire(self, new: bool = False) -> tuple[Http1Conn, bool]:
        """A connection, and whether it served a request before. Callers have found no idle
        one (or want a `new` one); a wait for a free slot may leave one idle."""
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(self.connect_timeout):
                while self.limit and len(self._open) + self._connecting >= self.limit:
                    w = loop.create_future()
                    self._waiters.append(w)
                    try:
                        await w
                    finally:
                        if w in self._waiters:
                            self._waiters.remove(w)
                    if not new and (idle_conn := self._take_idle()) is not None:
                        return idle_conn, True
                self._connecting += 1
                try:
                    _, conn = await loop.create_connection(
                        lambda: self.conn_class(self),
                        self.host,
                        self.port,
                        ssl=self.tls,
                        server_hostname=self.host if self.tls is not None else None,
                    )
                finally:
                    self._connecting -= 1
        except TimeoutError:
            raise Http1Error("timeout_connect", "connect timed out") from None
        except OSError as e:
            raise Http1Error(
                "connect_error", f"Cannot connect to host {self.host}:{self.port} [{e}]"
            ) from None
        self._open.add(conn)
        return conn, False

    def _release(self, conn: Http1Conn) -> None:
        if conn.reusable and not conn.lost:
            self._idle.append(conn)
        else:
            conn.close()
            self._forget(conn)
        self._wake()

    def _forget(self, conn: Http1Conn) -> None:
        if conn in self._open:
            self._open.discard(conn)
            self._wake()

    def _wake(self) -> None:
        while self._waiters:
            w = self._waiters.popleft()
            if not w.done():
                w.set_result(None)
                return

    def close(self) -> None:
        for conn in list(self._open):
            conn.close()
        self._idle.clear()
