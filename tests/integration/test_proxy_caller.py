"""The proxy's own HTTP/1.1 on both sides, over real loopback sockets.

The caller here is a raw socket (so a test can pipeline, keep a connection alive, speak
HTTP/1.0 or hang up mid-reply) and the upstream a raw server scripted byte by byte (so a test
chooses the framing, how a reply is cut into writes and when each piece goes out).
"""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import httptools
import orjson
import pytest

from agentload.proxy import ProxyConfig, ProxyServer

CHAT = b"/v1/chat/completions"
Script = Callable[[bytes, bytes, asyncio.StreamWriter], Awaitable[None]]


def _ev(obj: object) -> bytes:
    return b"data: " + orjson.dumps(obj) + b"\n\n"


def _tok(text: str) -> bytes:
    return _ev({"choices": [{"index": 0, "delta": {"content": text}, "finish_reason": None}]})


USAGE = _ev({"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 2}})
DONE = b"data: [DONE]\n\n"
SSE_HEAD = (
    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
)


def _chunk(data: bytes) -> bytes:
    return b"%x\r\n%b\r\n" % (len(data), data)


class Upstream:
    """A raw HTTP/1.1 server: each request (head, body) goes to `script`, which answers."""

    def __init__(self, script: Script) -> None:
        self.script = script
        self.connections = 0
        self.requests: list[tuple[bytes, bytes]] = []
        self.closed = asyncio.Event()  # a connection ended from the proxy's side
        self._server: asyncio.Server | None = None
        self.url = ""

    async def __aenter__(self) -> Upstream:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.url = f"http://127.0.0.1:{self._server.sockets[0].getsockname()[1]}"
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()

    async def _handle(self, r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while True:
                head = await r.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":")[1])
                body = await r.readexactly(length)
                self.requests.append((head, body))
                await self.script(head, body, w)
        except (asyncio.IncompleteReadError, ConnectionError):
            self.closed.set()
        finally:
            w.close()


class Reply:
    """One reply read off a raw socket with httptools."""

    def __init__(self) -> None:
        self.status = 0
        self.headers: dict[bytes, bytes] = {}
        self.pieces: list[bytes] = []
        self.done = False

    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers[name.lower()] = value

    def on_body(self, body: bytes) -> None:
        self.pieces.append(body)

    def on_message_complete(self) -> None:
        self.done = True

    @property
    def body(self) -> bytes:
        return b"".join(self.pieces)


async def _read_reply(r: asyncio.StreamReader, until: bytes | None = None) -> Reply:
    """Read one reply (or, with `until`, only until its body holds `until`)."""
    rep = Reply()
    parser = httptools.HttpResponseParser(rep)
    while not rep.done and not (until and until in rep.body):
        data = await asyncio.wait_for(r.read(65536), 10)
        if not data:
            raise ConnectionError("closed")
        parser.feed_data(data)
        rep.status = parser.get_status_code()
    return rep


def _post(path: bytes, obj: Any, extra: bytes = b"", version: bytes = b"1.1") -> bytes:
    body = orjson.dumps(obj)
    return (
        b"POST "
        + path
        + b" HTTP/"
        + version
        + b"\r\nHost: x\r\nContent-Type: application/json\r\n"
        + extra
        + b"Content-Length: %d\r\n\r\n" % len(body)
        + body
    )


REQ = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True}


def _calls(out: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in (out / "calls.jsonl").read_text().splitlines()]


async def _stream_script(head: bytes, body: bytes, w: asyncio.StreamWriter) -> None:
    w.write(SSE_HEAD + _chunk(_tok("a") + _tok("b")) + _chunk(USAGE + DONE) + b"0\r\n\r\n")
    await w.drain()


async def test_keep_alive_and_pipelining_on_both_sides(tmp_path: Path) -> None:
    out = tmp_path / "run"
    async with (
        Upstream(_stream_script) as up,
        ProxyServer(ProxyConfig(upstream=up.url, out=out)) as proxy,
    ):
        r, w = await asyncio.open_connection("127.0.0.1", proxy.port)
        for _ in range(3):  # one after the other on one connection
            w.write(_post(CHAT, REQ))
            rep = await _read_reply(r)
            assert rep.status == 200
            assert rep.body == _tok("a") + _tok("b") + DONE  # the usage the proxy asked for: gone
        w.write(_post(CHAT, REQ) * 2)  # two pipelined: answered in order
        assert (await _read_reply(r)).body == (await _read_reply(r)).body == rep.body
        # Small writes leave at once on both sides (no Nagle delay).
        (caller,) = proxy._callers
        assert proxy._pool is not None
        (upstream,) = proxy._pool._idle
        for t in (caller.transport, upstream.transport):
            assert t is not None
            sock = t.get_extra_info("socket")
            assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)
        w.close()
    assert up.connections == 1  # the upstream connection was kept alive too
    # The proxy asked for usage upstream, and counted the tokens from it.
    assert all(b'"include_usage":true' in body for _, body in up.requests)
    calls = _calls(out)
    assert [c["status"] for c in calls] == ["ok"] * 5
    assert {c["completion_tokens"] for c in calls} == {2}


async def test_chunks_pass_through_as_they_arrive(tmp_path: Path) -> None:
    """Each upstream write reaches the caller before the upstream sends the next one."""
    go = asyncio.Event()

    async def script(head: bytes, body: bytes, w: asyncio.StreamWriter) -> None:
        w.write(SSE_HEAD)
        await w.drain()
        w.write(_chunk(_tok("first"))[:7])  # a chunk cut inside its own framing
        await w.drain()
        await asyncio.sleep(0.02)
        w.write(_chunk(_tok("first"))[7:])
        await w.drain()
        await go.wait()  # only once the caller has the first token
        for piece in (_tok("second"), USAGE, DONE):
            w.write(_chunk(piece))
            await w.drain()
        w.write(b"0\r\n\r\n")

    async with (
        Upstream(script) as up,
        ProxyServer(ProxyConfig(upstream=up.url, out=tmp_path / "run")) as proxy,
    ):
        r, w = await asyncio.open_connection("127.0.0.1", proxy.port)
        w.write(_post(CHAT, REQ))
        rep = Reply()
        parser = httptools.HttpResponseParser(rep)
        while _tok("first") not in rep.body:
            parser.feed_data(await asyncio.wait_for(r.read(65536), 10))
        assert rep.headers[b"transfer-encoding"] == b"chunked"
        assert rep.headers[b"content-type"] == b"text/event-stream"
        go.set()
        while not rep.done:
            parser.feed_data(await asyncio.wait_for(r.read(65536), 10))
        w.close()
        assert rep.body == _tok("first") + _tok("second") + DONE


async def test_a_reply_ended_by_closing_the_upstream_connection(tmp_path: Path) -> None:
    async def script(head: bytes, body: bytes, w: asyncio.StreamWriter) -> None:
        w.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n")
        await w.drain()
        w.write(_tok("a") + USAGE + DONE)
        await w.drain()
        w.close()  # no length, not chunked: the end of the connection ends the body

    out = tmp_path / "run"
    async with (
        Upstream(script) as up,
        ProxyServer(ProxyConfig(upstream=up.url, out=out)) as proxy,
    ):
        r, w = await asyncio.open_connection("127.0.0.1", proxy.port)
        for _ in range(2):  # and the caller's connection stays usable
            w.write(_post(CHAT, REQ))
            rep = await _read_reply(r)
            assert rep.status == 200 and rep.body == _tok("a") + DONE
        w.close()
    assert up.connections == 2
    assert [c["status"] for c in _calls(out)] == ["ok", "ok"]


async def test_a_slow_caller_holds_the_upstream_back(tmp_path: Path) -> None:
    piece, total = b"x" * 65536, 48 << 20
    sent = [0]

    async def script(head: bytes, body: bytes, w: asyncio.StreamWriter) -> None:
        w.write(
            b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nTransfer-Encoding: chunked\r\n\r\n"
        )
        while sent[0] < total:
            w.write(_chunk(piece))
            await w.drain()  # blocks once the proxy stops reading
            sent[0] += len(piece)
        w.write(b"0\r\n\r\n")

    async with (
        Upstream(script) as up,
        ProxyServer(ProxyConfig(upstream=up.url, out=tmp_path / "run")) as proxy,
    ):
        r, w = await asyncio.open_connection("127.0.0.1", proxy.port, limit=1 << 20)
        w.write(_post(CHAT, {**REQ, "stream": False}))
        await asyncio.sleep(1.0)  # not reading: the socket buffers fill, then the proxy's
        assert sent[0] < total // 2
        rep = await _read_reply(r)
        assert len(rep.body) == total and sent[0] == total
        w.write(_post(CHAT, {**REQ, "stream": False}))  # the pooled upstream connection
        sent[0] = 0
        assert len((await _read_reply(r)).body) == total  # was resumed, not left paused
        w.close()
    assert up.connections == 1


async def test_upstream_errors_pass_through_unchanged(tmp_path: Path) -> None:
    err = b'{"error":{"message":"slow down","type":"rate_limit","code":429}}'

    async def script(head: bytes, body: bytes, w: asyncio.StreamWriter) -> None:
        w.write(
            b"HTTP/1.1 429 Too Many Requests\r\nContent-Type: application/json\r\n"
            b"Retry-After: 3\r\nContent-Length: %d\r\n\r\n%b" % (len(err), err)
        )

    out = tmp_path / "run"
    async with (
        Upstream(script) as up,
        ProxyServer(ProxyConfig(upstream=up.url, out=out)) as proxy,
    ):
        r, w = await asyncio.open_connection("127.0.0.1", proxy.port)
        w.write(_post(CHAT, REQ))
        rep = await _read_reply(r)
        w.close()
    assert rep.status == 429 and rep.body == err
    assert rep.headers[b"retry-after"] == b"3"
    (call,) = _calls(out)
    assert call["error_kind"] == "http_429" and call["http_status"] == 429


async def test_caller_hanging_up_mid_stream_ends_the_upstream_call(tmp_path: Path) -> None:
    async def script(head: bytes, body: bytes, w: asyncio.StreamWriter) -> None:
        w.write(SSE_HEAD + _chunk(_tok("a")))
        await w.drain()
        for _ in range(500):  # until the proxy closes this connection
            await asyncio.sleep(0.01)
            w.write(_chunk(_tok("more")))
            await w.drain()

    out = tmp_path / "run"
    async with (
        Upstream(script) as up,
        ProxyServer(ProxyConfig(upstream=up.url, out=out)) as proxy,
    ):
        r, w = await asyncio.open_connection("127.0.0.1", proxy.port)
        w.write(_post(CHAT, REQ))
        await _read_reply(r, until=_tok("a"))
        w.close()
        await asyncio.wait_for(up.closed.wait(), 5)  # the proxy dropped the upstream call
        await asyncio.sleep(0.05)
    (call,) = _calls(out)
    assert call["status"] == "error" and call["error_kind"] == "cancelled"


async def test_other_paths_forwarded_with_their_framing(tmp_path: Path) -> None:
    async def script(head: bytes, body: bytes, w: asyncio.StreamWriter) -> None:
        if head.startswith(b"HEAD "):
            w.write(b"HTTP/1.1 200 OK\r\nContent-Length: 42\r\nX-Up: 1\r\n\r\n")
        elif head.startswith(b"GET /stream"):  # an unknown length, in two pieces
            w.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + _chunk(b"abc"))
            await w.drain()
            await asyncio.sleep(0.01)
            w.write(_chunk(b"def") + b"0\r\n\r\n")
        else:  # echo what came, with the method and path
            reply = head.split(b"\r\n")[0] + b"|" + body
            w.write(b"HTTP/1.1 201 Created\r\nContent-Length: %d\r\n\r\n%b" % (len(reply), reply))

    async with (
        Upstream(script) as up,
        ProxyServer(ProxyConfig(upstream=up.url, out=tmp_path / "run")) as proxy,
    ):
        r, w = await asyncio.open_connection("127.0.0.1", proxy.port)
        w.write(_post(b"/v1/completions?x=1", {"prompt": "p"}))
        rep = await _read_reply(r)
        assert rep.status == 201
        assert rep.body == b'POST /v1/completions?x=1 HTTP/1.1|{"prompt":"p"}'
        # A chat path whose body is not a JSON object is forwarded, not measured.
        w.write(b"POST /v1/chat/completions HTTP/1.1\r\nContent-Length: 3\r\n\r\n[1]")
        assert (await _read_reply(r)).body == b"POST /v1/chat/completions HTTP/1.1|[1]"
        w.write(b"GET /stream HTTP/1.1\r\nHost: x\r\n\r\n")
        rep = await _read_reply(r)
        assert rep.body == b"abcdef" and rep.headers[b"transfer-encoding"] == b"chunked"
        w.write(b"HEAD /h HTTP/1.1\r\nHost: x\r\n\r\n")
        w.write(b"GET /stream HTTP/1.1\r\nHost: x\r\n\r\n")  # right behind: HEAD has no body
        rep = Reply()
        httptools.HttpResponseParser(rep).feed_data(await _until(r, b"\r\n\r\n"))
        assert rep.headers[b"content-length"] == b"42" and rep.headers[b"x-up"] == b"1"
        assert (await _read_reply(r)).body == b"abcdef"
        # HTTP/1.0: no chunked coding; the body ends with the connection.
        w.write(b"GET /stream HTTP/1.0\r\n\r\n")
        raw = await asyncio.wait_for(r.read(), 10)
        assert raw.startswith(b"HTTP/1.1 200") and raw.endswith(b"\r\n\r\nabcdef")
        assert b"chunked" not in raw.lower()
        w.close()


async def _until(r: asyncio.StreamReader, end: bytes) -> bytes:
    return await asyncio.wait_for(r.readuntil(end), 10)


@pytest.mark.parametrize(
    ("raw", "status"),
    [
        (b"NOT HTTP\r\n\r\n", 400),
        (b"GET / HTTP/1.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n", 501),
    ],
)
async def test_bad_requests_get_one_clear_status(tmp_path: Path, raw: bytes, status: int) -> None:
    async def script(head: bytes, body: bytes, w: asyncio.StreamWriter) -> None:
        raise AssertionError("nothing should reach the upstream")

    async with (
        Upstream(script) as up,
        ProxyServer(ProxyConfig(upstream=up.url, out=tmp_path / "run")) as proxy,
    ):
        r, w = await asyncio.open_connection("127.0.0.1", proxy.port)
        w.write(raw)
        got = await asyncio.wait_for(r.read(), 10)  # the proxy closes after answering
        w.close()
    assert got.startswith(b"HTTP/1.1 %d " % status)
    assert up.requests == []


async def test_body_over_the_limit_is_refused(tmp_path: Path) -> None:
    async def script(head: bytes, body: bytes, w: asyncio.StreamWriter) -> None:
        raise AssertionError("nothing should reach the upstream")

    async with (
        Upstream(script) as up,
        ProxyServer(
            ProxyConfig(upstream=up.url, out=tmp_path / "run", max_body_bytes=1000)
        ) as proxy,
    ):
        r, w = await asyncio.open_connection("127.0.0.1", proxy.port)
        w.write(b"POST /v1/chat/completions HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n")
        w.write(b"%x\r\n%b\r\n" % (1 << 20, b"x" * (1 << 20)))  # chunked: no length up front
        got = await asyncio.wait_for(r.read(), 10)
        w.close()
    assert got.startswith(b"HTTP/1.1 413 ") and b"request body over" in got


async def test_expect_continue_and_an_upstream_that_breaks(tmp_path: Path) -> None:
    async def script(head: bytes, body: bytes, w: asyncio.StreamWriter) -> None:
        w.write(SSE_HEAD + _chunk(_tok("a")))
        await w.drain()
        w.transport.abort()  # mid-stream

    out = tmp_path / "run"
    async with (
        Upstream(script) as up,
        ProxyServer(ProxyConfig(upstream=up.url, out=out)) as proxy,
    ):
        r, w = await asyncio.open_connection("127.0.0.1", proxy.port)
        req = _post(CHAT, REQ, extra=b"Expect: 100-continue\r\n")
        head, body = req.split(b"\r\n\r\n", 1)
        w.write(head + b"\r\n\r\n")
        assert await _until(r, b"\r\n\r\n") == b"HTTP/1.1 100 Continue\r\n\r\n"
        w.write(body)
        with pytest.raises(ConnectionError):  # the caller's reply breaks too: not a short one
            await _read_reply(r)
        w.close()
    (call,) = _calls(out)
    assert call["error_kind"] == "malformed_stream"
