"""A minimal pooled HTTP/1.1 client for the proxy's chat completions to the upstream.

Why not aiohttp's client here: profiled on loopback against the simulator, aiohttp's
`ClientSession.post` plus reading the stream cost about 600 µs of CPU per call against about
200 µs for the same request on a plain asyncio stream — most of the proxy's cost per call.
A pass-through needs little of what it offers (cookies, redirects, auth, decompression,
multipart): it sends one request with a known body and reads back a status, headers and a body
framed by Content-Length, chunked encoding or the end of the connection. Everything else the
proxy forwards (other paths) still goes through aiohttp.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterator, Iterable
from urllib.parse import urlsplit

_CRLF = b"\r\n"
_READ = 1 << 18
# Response headers that describe this hop's framing: never passed on.
_HOP = frozenset(
    (
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-connection",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "content-length",
    )
)


class UpstreamError(Exception):
    """The upstream could not be reached (`connect_error`) or broke a reply (`malformed_stream`)."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message


class _Chunked:
    """Incremental decoder of HTTP/1.1 chunked transfer coding."""

    __slots__ = ("buf", "done", "left", "trailers")

    def __init__(self) -> None:
        self.buf = b""
        self.left = 0  # > 0: data bytes left in this chunk; -2: its CRLF; 0: a size line next
        self.trailers = False
        self.done = False

    def feed(self, data: bytes) -> bytes:
        buf = self.buf + data if self.buf else data
        pos, end, out = 0, len(buf), []
        while pos < end and not self.done:
            if self.left > 0:
                take = min(self.left, end - pos)
                out.append(buf[pos : pos + take])
                pos += take
                self.left -= take
                if self.left:
                    break
                self.left = -2
            if self.left == -2:
                if end - pos < 2:
                    break
                if buf[pos : pos + 2] != _CRLF:
                    raise ValueError("chunk not followed by CRLF")
                pos += 2
                self.left = 0
                continue
            i = buf.find(_CRLF, pos)
            if i < 0:
                break
            if self.trailers:  # trailer fields until an empty line
                self.done = i == pos
                pos = i + 2
                continue
            size = int(buf[pos:i].split(b";", 1)[0].strip(), 16)
            pos = i + 2
            if size == 0:
                self.trailers = True
            else:
                self.left = size
        self.buf = buf[pos:]
        return out[0] if len(out) == 1 else b"".join(out)


class _Conn:
    __slots__ = ("reader", "writer")

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer

    def close(self) -> None:
        self.writer.close()


class Reply:
    """Status, headers and the body of one upstream reply; release it when done with it."""

    __slots__ = (
        "_chunked",
        "_conn",
        "_left",
        "_pool",
        "_rest",
        "_reusable",
        "content_type",
        "headers",
        "reason",
        "status",
    )

    def __init__(self, pool: Pool, conn: _Conn, head: bytes, rest: bytes, method: str) -> None:
        self._pool, self._conn = pool, conn
        lines = head.decode("latin-1").split("\r\n")
        version, status, *reason = lines[0].split(" ", 2)
        if not version.startswith("HTTP/1."):
            raise ValueError(f"not an HTTP/1.x status line: {lines[0][:60]!r}")
        self.status = int(status)
        self.reason = reason[0] if reason else ""
        self.headers: list[tuple[str, str]] = []
        length: int | None = None
        chunked = False
        keep = version == "HTTP/1.1"
        self.content_type = ""
        for line in lines[1:]:
            name, _, value = line.partition(":")
            name, value = name.strip(), value.strip()
            low = name.lower()
            if low == "content-length":
                length = int(value)
            elif low == "transfer-encoding":
                chunked = "chunked" in value.lower()
            elif low == "connection":
                keep = "close" not in value.lower() and (keep or "keep-alive" in value.lower())
            elif low == "content-type":
                self.content_type = value.split(";", 1)[0].strip().lower()
            if low not in _HOP:
                self.headers.append((name, value))
        self._chunked = _Chunked() if chunked else None
        no_body = method == "HEAD" or self.status in (204, 304) or 100 <= self.status < 200
        # Bytes of body left (-1: until the connection ends).
        self._left = 0 if no_body or chunked else (-1 if length is None else length)
        self._reusable = keep and self._left != -1
        self._rest = rest

    @property
    def done(self) -> bool:
        return self._left == 0 if self._chunked is None else self._chunked.done

    async def chunks(self) -> AsyncIterator[bytes]:
        """The body, decoded from its framing, as it arrives (one piece per read)."""
        data, self._rest = self._rest, b""
        while True:
            if data:
                piece = self._take(data)
                if piece:
                    yield piece
            if self.done:
                return
            data = await self._conn.reader.read(_READ)
            if not data:
                if self._left == -1:
                    self._left = 0
                    return
                raise UpstreamError("malformed_stream", "the upstream closed the reply midway")

    def _take(self, data: bytes) -> bytes:
        if self._chunked is not None:
            try:
                return self._chunked.feed(data)
            except ValueError as e:
                raise UpstreamError("malformed_stream", f"bad chunked encoding: {e}") from None
        if self._left > 0:
            data = data[: self._left]
            self._left -= len(data)
        return data

    async def read(self) -> bytes:
        return b"".join([c async for c in self.chunks()])

    def release(self) -> None:
        """Back to the pool when the reply was read to its end, else closed."""
        conn, self._conn = self._conn, None  # type: ignore[assignment]
        if conn is None:
            return
        if self._reusable and self.done and not self._rest:
            self._pool.put(conn)
        else:
            conn.close()


class Pool:
    """Keep-alive connections to one upstream (`http(s)://host[:port]`)."""

    def __init__(self, root: str, *, limit: int = 1000, connect_timeout: float = 30.0) -> None:
        parts = urlsplit(root)
        self.host = parts.hostname or "127.0.0.1"
        self.tls = parts.scheme == "https"
        self.port = parts.port or (443 if self.tls else 80)
        default = parts.port is None
        self.host_header = parts.netloc.rpartition("@")[2] if not default else self.host
        self._ssl = ssl.create_default_context() if self.tls else None
        self._idle: list[_Conn] = []
        self._slots = asyncio.Semaphore(limit)
        self._timeout = connect_timeout

    def put(self, conn: _Conn) -> None:
        self._idle.append(conn)

    async def _connect(self) -> _Conn:
        try:
            r, w = await asyncio.wait_for(
                asyncio.open_connection(
                    self.host,
                    self.port,
                    ssl=self._ssl,
                    limit=_READ,
                    server_hostname=self.host if self._ssl is not None else None,
                ),
                self._timeout,
            )
        except (OSError, TimeoutError) as e:
            raise UpstreamError(
                "connect_error",
                f"cannot connect to {self.host}:{self.port}: {getattr(e, 'strerror', None) or e}",
            ) from None
        return _Conn(r, w)

    async def request(
        self, method: str, target: str, headers: Iterable[tuple[str, str]], body: bytes
    ) -> Reply:
        """Send one request and read the reply's head; the body is read from the Reply."""
        head = [f"{method} {target} HTTP/1.1", f"Host: {self.host_header}"]
        head += [f"{k}: {v}" for k, v in headers]
        head.append(f"Content-Length: {len(body)}")
        data = ("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + body
        async with self._slots:
            # An idle connection the upstream has closed in the meantime fails before any
            # reply byte: one more try on a new connection (the request was not processed).
            while True:
                fresh = not self._idle
                conn = await self._connect() if fresh else self._idle.pop()
                try:
                    return await self._exchange(conn, data, method)
                except (ConnectionError, _Stale) as e:
                    conn.close()
                    if fresh:
                        raise UpstreamError("connect_error", f"{type(e).__name__}: {e}") from None
                except BaseException:
                    conn.close()
                    raise

    async def _exchange(self, conn: _Conn, data: bytes, method: str) -> Reply:
        conn.writer.write(data)
        if conn.writer.transport.get_write_buffer_size() > _READ:
            await conn.writer.drain()  # a long prompt: respect the socket's flow control
        buf = b""
        while True:
            more = await conn.reader.read(_READ)
            if not more:
                raise _Stale("the upstream closed the connection before replying")
            buf += more
            i = buf.find(b"\r\n\r\n")
            if i >= 0:
                break
            if len(buf) > 1 << 20:
                raise UpstreamError("malformed_stream", "reply headers over 1 MiB")
        try:
            return Reply(self, conn, buf[:i], buf[i + 4 :], method)
        except ValueError as e:
            raise UpstreamError("malformed_stream", f"bad reply head: {e}") from None

    def close(self) -> None:
        while self._idle:
            self._idle.pop().close()


class _Stale(Exception):
    """A pooled connection the upstream closed while it sat idle."""
