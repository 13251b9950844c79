"""An SSE `event: error` in a stream is the server's error, not a chunk to skip: the call
fails with stream_error (context_overflow when it says so), through both HTTP paths."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import aiohttp
import orjson
import pytest

from agentload.client import ChatClient, EndpointConfig, RetryPolicy, Timeouts

CHUNK = orjson.dumps(
    {
        "id": "c",
        "object": "chat.completion.chunk",
        "choices": [{"index": 0, "delta": {"content": "hi"}}],
    }
)


async def _serve(error: bytes) -> AsyncIterator[int]:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        length = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
        await reader.readexactly(length)
        body = b"data: " + CHUNK + b"\n\n" + error + b"data: [DONE]\n\n"
        writer.write(
            b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
            + b"Content-Length: %d\r\n\r\n" % len(body)
            + body
        )
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    async with server:
        yield server.sockets[0].getsockname()[1]


async def _call(port: int, own_session: bool) -> object:
    ep = EndpointConfig(
        base_url=f"http://127.0.0.1:{port}/v1",
        model="m",
        retry=RetryPolicy(max_attempts=1),
        timeouts=Timeouts(total=5),
    )
    async with (
        aiohttp.ClientSession() as session,
        ChatClient(ep, session=session if own_session else None) as c,
    ):
        return (await c.chat([{"role": "user", "content": "x"}], max_tokens=4)).record


@pytest.mark.parametrize("own_session", [False, True])
@pytest.mark.parametrize(
    ("event", "kind", "text"),
    [
        (
            b'event: error\ndata: {"error": {"message": "engine overloaded"}}\n\n',
            "stream_error",
            "engine overloaded",
        ),
        (
            b'event: error\ndata: {"message": "maximum context length is 8 tokens"}\n\n',
            "context_overflow",
            "maximum context",
        ),
        (b"event: error\ndata: upstream died\n\n", "stream_error", "upstream died"),
    ],
)
async def test_sse_error_event_fails_the_call(
    event: bytes, kind: str, text: str, own_session: bool
) -> None:
    async for port in _serve(event):
        rec = await _call(port, own_session)
    assert rec.status != "ok", rec  # type: ignore[attr-defined]
    assert rec.error_kind == kind, rec  # type: ignore[attr-defined]
    assert text in (rec.error_message or ""), rec  # type: ignore[attr-defined]


async def test_other_named_events_are_still_chunks() -> None:
    async for port in _serve(b"event: ping\ndata: " + CHUNK + b"\n\n"):
        rec = await _call(port, False)
    assert rec.status == "ok", rec  # type: ignore[attr-defined]
