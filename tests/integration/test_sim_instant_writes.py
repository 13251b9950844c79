"""The instant profile sends a stream's headers in the same write as its first events;
profiles with model time send the headers on their own, at admission."""

from __future__ import annotations

import asyncio

import orjson
import pytest

from agentload.client import ChatClient, EndpointConfig
from agentload.sim import SimConfig, SimServer

BODY = orjson.dumps(
    {
        "model": "m",
        "messages": [{"role": "user", "content": "hello there"}],
        "stream": True,
        "stream_options": {"include_usage": True},
        "max_tokens": 8,
    }
)


async def _first_read(port: int) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"Content-Length: %d\r\n\r\n%b" % (len(BODY), BODY)
    )
    first = await reader.read(1 << 16)
    writer.close()
    return first


@pytest.mark.parametrize(("profile", "together"), [("instant", True), ("tiny-cpu", False)])
async def test_headers_and_first_events(profile: str, together: bool) -> None:
    async with SimServer(SimConfig(port=0, model="m", profile=profile)) as sim:
        first = await _first_read(sim.port)
    assert first.startswith(b"HTTP/1.1 200")
    assert (b"data: " in first) is together


async def test_instant_stream_reads_the_same_to_the_client() -> None:
    async with SimServer(SimConfig(port=0, model="m", profile="instant")) as sim:
        ep = EndpointConfig(base_url=sim.base_url, model="m", max_tokens=12)
        async with ChatClient(ep) as c:
            res = await c.chat([{"role": "user", "content": "hello there"}])
    rec = res.record
    assert rec.status == "ok" and res.content
    assert rec.headers_ns is not None and rec.first_token_ns is not None
    assert rec.headers_ns <= rec.first_token_ns
    assert rec.completion_tokens == rec.token_chunks > 0 and not rec.tokens_estimated
