"""The simulator's own HTTP/1.1 front end for the generation paths, over real sockets: keep-alive,
chunked and Content-Length bodies, hand-over to aiohttp for every other request, bad requests,
timeouts, pipelining and clients that leave."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import httptools
import orjson
import pytest

from agentload.sim import SimConfig, SimServer, fasthttp

CHAT = b"/v1/chat/completions"


def _body(**extra: Any) -> bytes:
    return orjson.dumps(
        {"model": "m", "messages": [{"role": "user", "content": "hello there"}], **extra}
    )


def _post(body: bytes, path: bytes = CHAT, headers: bytes = b"") -> bytes:
    return (
        b"POST %b HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n%b"
        b"Content-Length: %d\r\n\r\n%b" % (path, headers, len(body), body)
    )


class Reply:
    def __init__(self) -> None:
        self.status = 0
        self.headers: dict[str, str] = {}
        self.body = b""
        self.done = False

    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers[name.decode().lower()] = value.decode()

    def on_body(self, body: bytes) -> None:
        self.body += body

    def on_message_complete(self) -> None:
        self.done = True

    def json(self) -> Any:
        return orjson.loads(self.body)


class Conn:
    """A raw HTTP/1.1 connection that reads whole replies, in order."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.replies: list[Reply] = []
        self.parser = httptools.HttpResponseParser(self)
        self.current: Reply | None = None
        self.raw = b""

    @classmethod
    async def open(cls, port: int) -> Conn:
        return cls(*await asyncio.open_connection("127.0.0.1", port))

    def on_message_begin(self) -> None:
        self.current = Reply()
        self.replies.append(self.current)

    def on_header(self, name: bytes, value: bytes) -> None:
        assert self.current is not None
        self.current.on_header(name, value)

    def on_headers_complete(self) -> None:
        assert self.current is not None
        self.current.status = self.parser.get_status_code()

    def on_body(self, body: bytes) -> None:
        assert self.current is not None
        self.current.on_body(body)

    def on_message_complete(self) -> None:
        assert self.current is not None
        self.current.on_message_complete()

    async def send(self, data: bytes) -> None:
        self.writer.write(data)
        await self.writer.drain()

    async def replies_done(self, n: int) -> list[Reply]:
        async with asyncio.timeout(10):
            while sum(r.done for r in self.replies) < n:
                data = await self.reader.read(1 << 16)
                if not data:
                    break
                self.raw += data
                self.parser.feed_data(data)
        return self.replies

    async def closed(self) -> bool:
        try:
            async with asyncio.timeout(5):
                return await self.reader.read(1 << 16) == b""
        except (ConnectionResetError, TimeoutError):
            return False

    def close(self) -> None:
        self.writer.close()


@pytest.fixture
async def sim() -> Any:
    async with SimServer(SimConfig(port=0, model="m", profile="instant")) as s:
        yield s


def _events(body: bytes) -> list[Any]:
    out = []
    for line in body.split(b"\n"):
        if line.startswith(b"data: ") and line != b"data: [DONE]":
            out.append(orjson.loads(line[6:]))
    return out


async def test_keep_alive_stream_then_json_then_hand_over_then_post(sim: SimServer) -> None:
    c = await Conn.open(sim.port)
    await c.send(_post(_body(stream=True, max_tokens=5, stream_options={"include_usage": True})))
    [stream] = await c.replies_done(1)
    assert stream.status == 200
    assert stream.headers["content-type"] == "text/event-stream; charset=utf-8"
    assert stream.headers["transfer-encoding"] == "chunked"
    assert stream.body.endswith(b"data: [DONE]\n\n")
    assert c.raw.endswith(b"0\r\n\r\n")  # the chunked body is ended
    events = _events(stream.body)
    assert events[-1]["usage"]["completion_tokens"] == 5
    await c.send(_post(_body(max_tokens=3)))
    replies = await c.replies_done(2)
    full = replies[1]
    assert full.status == 200 and full.headers["content-type"] == "application/json"
    assert int(full.headers["content-length"]) == len(full.body)
    assert full.json()["usage"]["completion_tokens"] == 3
    # Another path on the same connection: aiohttp's application serves it and the rest.
    await c.send(b"GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n")
    replies = await c.replies_done(3)
    assert replies[2].status == 200 and replies[2].json()["data"][0]["id"] == "m"
    assert replies[2].headers["server"] == full.headers["server"]
    await c.send(_post(_body(max_tokens=2)))
    replies = await c.replies_done(4)
    assert replies[3].status == 200 and replies[3].json()["usage"]["completion_tokens"] == 2
    c.close()


async def test_chunked_request_body_and_completions_path(sim: SimServer) -> None:
    c = await Conn.open(sim.port)
    body = orjson.dumps({"prompt": "once upon a time", "max_tokens": 4})
    half = len(body) // 2
    await c.send(
        b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
        + b"%x\r\n%b\r\n%x\r\n%b\r\n0\r\n\r\n" % (half, body[:half], len(body) - half, body[half:])
    )
    [reply] = await c.replies_done(1)
    assert reply.status == 200
    data = reply.json()
    assert data["object"] == "text_completion" and data["usage"]["completion_tokens"] == 4
    c.close()


async def test_errors_match_the_application(sim: SimServer) -> None:
    c = await Conn.open(sim.port)
    await c.send(_post(b"not json"))
    await c.send(_post(_body(model="other")))
    await c.send(_post(_body(n=2)))
    replies = await c.replies_done(3)
    assert [r.status for r in replies] == [400, 404, 400]
    assert replies[0].json()["error"]["message"].startswith("Invalid JSON body")
    assert replies[1].json()["error"]["type"] == "NotFoundError"
    assert replies[2].json()["error"]["param"] == "n"
    c.close()
    # Not a POST: handed to aiohttp, which answers 405 as before.
    c = await Conn.open(sim.port)
    await c.send(b"GET /v1/chat/completions HTTP/1.1\r\nHost: x\r\n\r\n")
    [reply] = await c.replies_done(1)
    assert reply.status == 405 and reply.headers["allow"] == "POST"
    c.close()


async def test_malformed_http_gets_400_json_and_close(sim: SimServer) -> None:
    c = await Conn.open(sim.port)
    await c.send(b"POST /v1/chat/completions HTTP/1.1\r\nContent-Length: x\r\n\r\n")
    [reply] = await c.replies_done(1)
    assert reply.status == 400
    assert reply.json()["error"]["type"] == "BadRequestError"
    assert await c.closed()
    c.close()


async def test_expect_continue_and_connection_close() -> None:
    async with SimServer(SimConfig(port=0, model="m", profile="instant")) as sim:
        c = await Conn.open(sim.port)
        body = _body(max_tokens=2)
        await c.send(
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\n"
            b"Content-Length: %d\r\n\r\n" % len(body)
        )
        assert (await c.reader.readuntil(b"\r\n\r\n")).startswith(b"HTTP/1.1 100")
        await c.send(body)
        [reply] = await c.replies_done(1)
        assert reply.status == 200
        c.close()
        c = await Conn.open(sim.port)
        await c.send(_post(_body(max_tokens=2, stream=True), headers=b"Connection: close\r\n"))
        [reply] = await c.replies_done(1)
        assert reply.status == 200 and reply.headers["connection"] == "close"
        assert await c.closed()
        c.close()


async def test_api_key() -> None:
    async with SimServer(SimConfig(port=0, model="m", profile="instant", api_key="k1")) as sim:
        c = await Conn.open(sim.port)
        await c.send(_post(_body(max_tokens=2)))
        await c.send(_post(_body(max_tokens=2), headers=b"Authorization: Bearer k1\r\n"))
        replies = await c.replies_done(2)
        assert replies[0].status == 401 and replies[0].json() == {"error": "Unauthorized"}
        assert replies[1].status == 200
        c.close()
        metrics = sim.sim.metrics.http_requests if sim.sim else {}
        assert metrics[("/v1/chat/completions", "4xx", "POST")] == 1
        assert metrics[("/v1/chat/completions", "2xx", "POST")] == 1


async def test_pipelined_requests_are_answered_in_order(sim: SimServer) -> None:
    c = await Conn.open(sim.port)
    await c.send(_post(_body(max_tokens=2)) + _post(_body(max_tokens=3, stream=True)))
    replies = await c.replies_done(2)
    assert replies[0].json()["usage"]["completion_tokens"] == 2
    assert replies[1].body.endswith(b"data: [DONE]\n\n")
    # A pipelined request the fast path does not serve cannot be handed over mid-read.
    await c.send(_post(_body(max_tokens=2)) + b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
    replies = await c.replies_done(4)
    assert replies[2].status == 200 and replies[3].status == 400
    assert await c.closed()
    c.close()


async def test_body_timeout_gets_408() -> None:
    cfg = SimConfig(port=0, model="m", profile="instant", body_timeout_s=0.3)
    async with SimServer(cfg) as sim:
        c = await Conn.open(sim.port)
        body = _body(max_tokens=2)
        t0 = time.monotonic()
        await c.send(_post(body)[: -len(body) // 2])
        [reply] = await c.replies_done(1)
        assert reply.status == 408 and "did not arrive within 0.3 s" in reply.body.decode()
        assert 0.25 < time.monotonic() - t0 < 3
        assert await c.closed()
        c.close()


async def test_client_that_leaves_mid_stream_frees_its_sequence() -> None:
    # A timed profile, so that the stream is still running when the client leaves.
    async with SimServer(SimConfig(port=0, model="m", profile="tiny-cpu", speedup=5)) as sim:
        assert sim.sim is not None
        c = await Conn.open(sim.port)
        await c.send(_post(_body(max_tokens=2000, stream=True, ignore_eos=True)))
        first = await c.reader.read(1 << 16)
        assert first.startswith(b"HTTP/1.1 200")
        c.writer.transport.abort()
        async with asyncio.timeout(10):
            while sim.sim.engine.running or sim.sim.engine.waiting:  # noqa: ASYNC110 - polls
                await asyncio.sleep(0.05)
        # and it still serves
        c = await Conn.open(sim.port)
        await c.send(_post(_body(max_tokens=2)))
        [reply] = await c.replies_done(1)
        assert reply.status == 200
        c.close()


async def test_chunked_body_over_the_limit_gets_413_and_close(
    sim: SimServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A chunked body has no length up front; the fast path counts it as it comes.
    monkeypatch.setattr(fasthttp, "MAX_BODY", 4096)
    c = await Conn.open(sim.port)
    await c.send(
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
    )
    piece = b"x" * 1000
    for _ in range(5):  # never ends: only the limit stops it
        await c.send(b"%x\r\n%b\r\n" % (len(piece), piece))
    [reply] = await c.replies_done(1)
    assert reply.status == 413
    assert "over 4096 bytes" in reply.json()["error"]["message"]
    assert await c.closed()
    c.close()
