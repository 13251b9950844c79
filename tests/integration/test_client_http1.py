"""The client's own HTTP/1.1 layer (client.http1) against a raw loopback server.

The server here answers at the byte level, so the tests can choose how a reply is framed
(chunked, Content-Length, ended by closing the connection), how it is cut into writes, and
when a connection goes away, and count the connections the client opens.
"""

from __future__ import annotations

import asyncio
import gc
import threading
import time
from collections.abc import AsyncIterator

import orjson
import pytest

from agentload.client import ChatClient, EndpointConfig, RetryPolicy

MSGS = [{"role": "user", "content": "hi"}]


def _stream(tokens: list[str]) -> bytes:
    def ev(obj: object) -> bytes:
        return b"data: " + orjson.dumps(obj) + b"\n\n"

    def ch(delta: dict, finish: str | None = None) -> dict:
        return {"choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}

    parts = [ev(ch({"role": "assistant", "content": ""}))]
    parts += [ev(ch({"content": t})) for t in tokens]
    parts.append(ev(ch({}, "stop")))
    usage = {"prompt_tokens": 3, "completion_tokens": len(tokens), "total_tokens": 3}
    parts.append(ev({"choices": [], "usage": usage}))
    parts.append(b"data: [DONE]\n\n")
    return b"".join(parts)


class RawServer:
    """Answers each POST with `body` framed as `mode`; counts connections and requests."""

    def __init__(self, body: bytes, mode: str = "chunked", piece: int = 0) -> None:
        self.body = body
        self.mode = mode  # chunked | length | eof | close_after
        self.piece = piece  # write the reply in pieces of this many bytes (0: at once)
        self.connections = 0
        self.requests: list[bytes] = []
        self.open_now = 0
        self.max_open = 0
        self._server: asyncio.Server | None = None
        self.port = 0

    async def __aenter__(self) -> RawServer:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def _reply(self) -> bytes:
        head = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
        if self.mode == "chunked":
            return head + b"transfer-encoding: chunked\r\n\r\n%x\r\n%b\r\n0\r\n\r\n" % (
                len(self.body),
                self.body,
            )
        if self.mode == "eof":
            return head + b"connection: close\r\n\r\n" + self.body
        return head + b"content-length: %d\r\n\r\n%b" % (len(self.body), self.body)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        self.open_now += 1
        self.max_open = max(self.max_open, self.open_now)
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":")[1])
                self.requests.append(head + await reader.readexactly(length))
                await asyncio.sleep(0.01)  # let concurrent calls pile up on the pool
                data = self._reply()
                step = self.piece or len(data)
                for i in range(0, len(data), step):
                    writer.write(data[i : i + step])
                    await writer.drain()
                    if self.piece:
                        await asyncio.sleep(0)
                if self.mode in ("eof", "close_after"):
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            self.open_now -= 1
            writer.close()


@pytest.fixture
async def chunked() -> AsyncIterator[RawServer]:
    async with RawServer(_stream(["a", "b", "c"])) as s:
        yield s


def _ep(url: str, **kw: object) -> EndpointConfig:
    return EndpointConfig(base_url=url, model="m", retry=RetryPolicy(max_attempts=1), **kw)  # type: ignore[arg-type]


async def test_keep_alive_reuses_one_connection(chunked: RawServer) -> None:
    async with ChatClient(_ep(chunked.url)) as c:
        for _ in range(5):
            res = await c.chat(MSGS)
            assert res.ok and res.content == "abc"
            assert res.record.token_chunks == 3 and res.record.completion_tokens == 3
    assert chunked.connections == 1 and len(chunked.requests) == 5


@pytest.mark.parametrize("mode", ["length", "eof", "close_after"])
@pytest.mark.parametrize("piece", [0, 1, 7])
async def test_framings_and_tiny_writes(mode: str, piece: int) -> None:
    async with RawServer(_stream(["x", "y"]), mode=mode, piece=piece) as s:
        async with ChatClient(_ep(s.url)) as c:
            for _ in range(2):
                res = await c.chat(MSGS)
                assert res.ok, res.record.error_message
                assert res.content == "xy" and res.record.token_chunks == 2
        # A connection the server closes (or marks `connection: close`) is not reused.
        assert s.connections == (1 if mode == "length" else 2)


async def test_max_connections_is_a_hard_limit(chunked: RawServer) -> None:
    async with ChatClient(_ep(chunked.url, max_connections=2)) as c:
        results = await asyncio.gather(*(c.chat(MSGS) for _ in range(8)))
    assert all(r.ok for r in results)
    assert chunked.max_open <= 2 and chunked.connections <= 2


async def test_request_bytes_on_the_wire(chunked: RawServer) -> None:
    ep = _ep(chunked.url, headers={"X-Team": "infra"})
    async with ChatClient(ep) as c:
        await c.chat(MSGS, headers={"X-Trace": "t1"}, session_id="s-9")
    req = chunked.requests[0]
    head, _, body = req.partition(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    assert lines[0] == b"POST /v1/chat/completions HTTP/1.1"
    fields = {k.lower(): v.strip() for k, _, v in (ln.partition(b":") for ln in lines[1:])}
    assert fields[b"host"] == f"127.0.0.1:{chunked.port}".encode()
    assert fields[b"content-type"] == b"application/json"
    assert fields[b"x-team"] == b"infra" and fields[b"x-trace"] == b"t1"
    assert int(fields[b"content-length"]) == len(body)
    assert orjson.loads(body)["messages"] == MSGS


async def test_header_with_a_line_break_is_refused(chunked: RawServer) -> None:
    async with ChatClient(_ep(chunked.url)) as c:
        res = await c.chat(MSGS, headers={"X-Evil": "a\r\nX-Injected: 1"})
    assert res.record.error_kind == "config_error"
    assert chunked.requests == []


async def test_server_closing_an_idle_connection_is_survived(chunked: RawServer) -> None:
    async with ChatClient(_ep(chunked.url)) as c:
        assert (await c.chat(MSGS)).ok
        pool = c._pool
        assert pool is not None and len(pool._idle) == 1
        pool._idle[0].transport.close()  # type: ignore[union-attr]
        await asyncio.sleep(0.05)
        assert (await c.chat(MSGS)).ok
    assert chunked.connections == 2


def _one_loop_per_call(url: str, calls: int) -> list[tuple[str, str]]:
    client = ChatClient(EndpointConfig(base_url=url, model="m"))

    async def one() -> tuple[str, str]:
        # Bounded: a client still bound to a closed loop used to wait forever here.
        res = await asyncio.wait_for(client.chat(MSGS), 10)
        return res.record.status, res.content

    return [asyncio.run(one()) for _ in range(calls)]


def test_a_client_serves_one_event_loop_after_another() -> None:
    """A synchronous caller running asyncio.run per call: each loop gets its own connections
    (the previous loop's cannot serve it) and every call succeeds."""

    ready = threading.Event()
    holder: dict[str, object] = {}

    def serve() -> None:
        async def main() -> None:
            async with RawServer(_stream(["a", "b"])) as srv:
                holder["url"], holder["srv"] = srv.url, srv
                stop = asyncio.Event()
                holder["stop"] = stop
                ready.set()
                await stop.wait()

        loop = asyncio.new_event_loop()
        holder["loop"] = loop
        loop.run_until_complete(main())
        loop.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    assert ready.wait(10)
    try:
        assert _one_loop_per_call(str(holder["url"]), 3) == [("ok", "ab")] * 3
        srv = holder["srv"]
        assert isinstance(srv, RawServer)
        assert len(srv.requests) == 3 and srv.connections == 3
        # The old loops' connections close when collected; then the server's handlers end.
        gc.collect()
        deadline = time.monotonic() + 5
        while srv.open_now and time.monotonic() < deadline:
            time.sleep(0.01)
        assert srv.open_now == 0
    finally:
        loop, stop = holder["loop"], holder["stop"]
        assert isinstance(loop, asyncio.AbstractEventLoop) and isinstance(stop, asyncio.Event)
        loop.call_soon_threadsafe(stop.set)
        thread.join(10)
