"""The shared HTTP/1.1 server layer (`agentload.http1server`) on real sockets, through a small
echo server built on it the way the simulator's front end and the proxy's caller side are:
keep-alive and pipelining, the body limit, the header / body / idle deadlines, the connection
cap, flow control, and the wire helpers."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import httptools
import pytest

from agentload.http1server import Http1Connection, chunk, reply_head, status_line
from agentload.http_limits import ConnectionCap, ServiceLimits

MAX_BODY = 1024
BIG = 8 << 20  # a reply far over the socket buffers: the writer must wait for the reader


class _TooLarge(Exception):
    pass


class Echo(Http1Connection[tuple[bytes, bytes, bool]]):
    """Answers `<target> <body>`; `/big` answers BIG bytes in pieces, waiting on `drain`."""

    def __init__(self, limits: ServiceLimits, cap: ConnectionCap | None, seen: list[str]) -> None:
        super().__init__(asyncio.get_running_loop(), MAX_BODY, limits, cap)
        self.seen = seen

    def on_headers_complete(self) -> None:
        self.headers_done()

    def on_message_complete(self) -> None:
        self.message_done()
        self.enqueue((self.url, self.whole_body(), self.parser.should_keep_alive()))

    def body_over_limit(self) -> None:
        raise _TooLarge

    def parse_failed(self, exc: httptools.HttpParserError | None) -> None:
        too_large = exc is not None and isinstance(exc.__context__, _TooLarge)
        self.refuse(413 if too_large else 400, b"refused")

    async def handle(self, req: tuple[bytes, bytes, bool]) -> bool:
        url, body, keep = req
        if url == b"/big":
            self.write(reply_head(200, [], b"Content-Length: %d\r\n" % BIG, close=not keep))
            piece = b"x" * (256 << 10)
            for _ in range(BIG // len(piece)):
                if self.paused:
                    self.seen.append("paused")
                await self.drain()
                self.write(piece)
            return keep
        payload = url + b" " + body
        head = reply_head(
            200, [(b"X-Echo", b"1")], b"Content-Length: %d\r\n" % len(payload), close=not keep
        )
        self.write(head + payload)
        return keep

    def expired(self, kind: str) -> None:
        self.seen.append(kind)
        if kind == "body":
            self.refuse(408, b"slow body")
        else:
            self.abort()


class Reply:
    def __init__(self) -> None:
        self.status = 0
        self.body = b""
        self.done = False


class Client:
    """A raw socket that reads HTTP/1.1 replies as they come."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.parser = httptools.HttpResponseParser(self)
        self.replies: list[Reply] = []

    @classmethod
    async def open(cls, port: int) -> Client:
        return cls(*await asyncio.open_connection("127.0.0.1", port))

    def on_message_begin(self) -> None:
        self.replies.append(Reply())

    def on_headers_complete(self) -> None:
        self.replies[-1].status = self.parser.get_status_code()

    def on_body(self, body: bytes) -> None:
        self.replies[-1].body += body

    def on_message_complete(self) -> None:
        self.replies[-1].done = True

    async def replies_done(self, n: int, within: float = 5.0) -> list[Reply]:
        async with asyncio.timeout(within):
            while sum(r.done for r in self.replies) < n:
                data = await self.reader.read(1 << 16)
                assert data, "closed before the replies"
                self.parser.feed_data(data)
        return self.replies[:n]

    async def closed_within(self, seconds: float) -> float:
        """Seconds until the server closed the connection (fails past `seconds`)."""
        t0 = time.monotonic()
        async with asyncio.timeout(seconds):
            while await self.reader.read(1 << 16):
                pass
        return time.monotonic() - t0

    def close(self) -> None:
        self.writer.close()


def _post(target: bytes, body: bytes, extra: bytes = b"") -> bytes:
    return b"POST %b HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n%b\r\n%b" % (
        target,
        len(body),
        extra,
        body,
    )


Served = tuple[int, list[str], ConnectionCap]
"""The port, the deadlines and evictions seen, the cap."""


@pytest.fixture
async def server() -> AsyncIterator[Served]:
    limits = ServiceLimits(header_timeout_s=0.4, body_timeout_s=0.4, keepalive_timeout_s=0.6)
    cap = ConnectionCap(3)
    seen: list[str] = []
    srv = await asyncio.get_running_loop().create_server(
        lambda: Echo(limits, cap, seen), "127.0.0.1", 0
    )
    yield srv.sockets[0].getsockname()[1], seen, cap
    srv.close()


async def test_keep_alive_and_pipelined_requests_in_order(server: Served) -> None:
    port, _, _ = server
    c = await Client.open(port)
    c.writer.write(_post(b"/one", b"a"))
    [r] = await c.replies_done(1)
    assert (r.status, r.body) == (200, b"/one a")
    # Three requests in one write, the middle one chunked: answered in order on one connection.
    chunked = (
        b"POST /two HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nbb\r\n0\r\n\r\n"
    )
    c.writer.write(
        _post(b"/x", b"1") + chunked + _post(b"/three", b"ccc", b"Connection: close\r\n")
    )
    replies = await c.replies_done(4)
    assert [r.body for r in replies] == [b"/one a", b"/x 1", b"/two bb", b"/three ccc"]
    assert await c.closed_within(2.0) < 2.0  # Connection: close is honoured
    c.close()


async def test_a_body_over_the_limit_is_refused_with_413(server: Served) -> None:
    port, _, _ = server
    c = await Client.open(port)
    c.writer.write(_post(b"/a", b"x" * (MAX_BODY + 1)))
    [r] = await c.replies_done(1)
    assert (r.status, r.body) == (413, b"refused")
    c = await Client.open(port)
    c.writer.write(b"NOT HTTP\r\n\r\n")
    [r] = await c.replies_done(1)
    assert r.status == 400
    c.close()


async def test_header_body_and_idle_deadlines(server: Served) -> None:
    port, seen, _ = server
    opened = time.monotonic()
    slow_headers = await Client.open(port)
    slow_headers.writer.write(b"POST /a HTTP/1.1\r\nHo")
    slow_body = await Client.open(port)
    slow_body.writer.write(_post(b"/a", b"abcdef")[:-3])
    idle = await Client.open(port)
    idle.writer.write(_post(b"/a", b""))
    await idle.replies_done(1)
    t0 = time.monotonic()
    # The header and body deadlines are 0.4 s, the idle one 0.6 s (wide margins: a shared
    # machine may be slow to run the timers).
    await slow_headers.closed_within(3.0)
    assert time.monotonic() - opened >= 0.3  # not before its deadline
    [r] = await slow_body.replies_done(1)
    assert (r.status, r.body) == (408, b"slow body")
    await idle.closed_within(3.0)
    assert time.monotonic() - t0 >= 0.45  # kept while idle for less than the deadline
    assert sorted(seen) == ["body", "header", "idle"]
    for c in (slow_headers, slow_body, idle):
        c.close()


async def test_the_cap_closes_the_longest_idle_connection_for_a_new_one(server: Served) -> None:
    port, seen, cap = server
    first = await Client.open(port)
    others = [await Client.open(port) for _ in range(2)]
    await asyncio.sleep(0.05)
    assert len(cap) == 3
    late = await Client.open(port)  # over the cap of 3: the oldest waiting one goes
    late.writer.write(_post(b"/late", b""))
    [r] = await late.replies_done(1)
    assert r.body == b"/late "
    assert await first.closed_within(1.0) < 1.0
    assert cap.evicted == 1 and seen[0] == "evicted"
    for c in (first, late, *others):
        c.close()


async def test_a_reply_waits_while_the_reader_does_not_read(server: Served) -> None:
    port, seen, _ = server
    c = await Client.open(port)
    c.writer.write(_post(b"/big", b""))
    await asyncio.sleep(0.3)  # not reading: the server's socket buffer fills, writing pauses
    assert "paused" in seen
    [r] = await c.replies_done(1, within=20)
    assert r.status == 200 and len(r.body) == BIG
    c.close()


def test_wire_helpers() -> None:
    assert status_line(404) == b"HTTP/1.1 404 Not Found\r\n"
    assert status_line(599) == b"HTTP/1.1 599 \r\n"  # no standard phrase
    assert reply_head(200, [(b"A", b"b")], b"Content-Length: 0\r\n", close=True) == (
        b"HTTP/1.1 200 OK\r\nA: b\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    )
    assert reply_head(502, [], b"", close=False, reason="Upstream Gone") == (
        b"HTTP/1.1 502 Upstream Gone\r\n\r\n"
    )
    assert chunk(b"hello") == b"5\r\nhello\r\n" and chunk(b"") == b""
