"""A reply with no Content-Length ends at the connection's close: a reset there is a lost
connection (outage detection counts it), a clean close is the end of the reply."""

from __future__ import annotations

import asyncio
import socket
import struct
from collections.abc import AsyncIterator

import aiohttp
import orjson
import pytest

from agentload.client import ChatClient, EndpointConfig, RetryPolicy, Timeouts
from agentload.scheduler.outage import is_infra_failure

CHUNK = orjson.dumps(
    {
        "id": "c",
        "object": "chat.completion.chunk",
        "choices": [{"index": 0, "delta": {"content": "hi"}}],
    }
)
HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n"


async def _serve(reset: bool) -> AsyncIterator[int]:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(HEAD + b"data: " + CHUNK + b"\n\n")
        if not reset:
            writer.write(b"data: [DONE]\n\n")
        await writer.drain()
        await asyncio.sleep(0.05)
        sock = writer.get_extra_info("socket")
        if reset:  # an RST, as a crashed server or a middlebox sends
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
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
    # A caller's own session goes through aiohttp (as HTTPS does), else the HTTP/1.1 pool.
    async with (
        aiohttp.ClientSession() as session,
        ChatClient(ep, session=session if own_session else None) as c,
    ):
        return (await c.chat([{"role": "user", "content": "x"}], max_tokens=4)).record


@pytest.mark.parametrize("own_session", [False, True])
@pytest.mark.parametrize("reset", [True, False])
async def test_reset_during_a_reply_without_length(reset: bool, own_session: bool) -> None:
    async for port in _serve(reset):
        rec = await _call(port, own_session)
    if reset:
        assert rec.error_kind == "malformed_stream", rec  # type: ignore[attr-defined]
        assert rec.error_message.startswith("connection lost"), rec  # type: ignore[attr-defined]
        assert is_infra_failure(rec.error_kind, rec.error_message)  # type: ignore[attr-defined]
    else:
        assert rec.status == "ok", rec  # type: ignore[attr-defined]
