"""The proxy's own upstream client against a server that closes idle keep-alive connections
(as uvicorn does after 5 s): the next call on such a connection is retried on a new one."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import aiohttp

from agentload.proxy import ProxyConfig, ProxyServer

REPLY = json.dumps(
    {
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"}}],
        "usage": {"prompt_tokens": 3, "completion_tokens": 1},
    }
).encode()


async def _closing_server(connections: list[int]) -> asyncio.Server:
    """Answers one request per connection (keep-alive, Content-Length), then closes it."""

    async def handle(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        connections.append(1)
        head = await r.readuntil(b"\r\n\r\n")
        length = next(
            int(line.split(b":")[1])
            for line in head.split(b"\r\n")
            if line.lower().startswith(b"content-length")
        )
        await r.readexactly(length)
        w.write(
            b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
            + f"Content-Length: {len(REPLY)}\r\n\r\n".encode()
            + REPLY
        )
        await w.drain()
        w.close()  # the idle keep-alive connection goes away, without saying so first

    return await asyncio.start_server(handle, "127.0.0.1", 0)


async def test_stale_pooled_connections_are_retried(tmp_path: Path) -> None:
    connections: list[int] = []
    server = await _closing_server(connections)
    port = server.sockets[0].getsockname()[1]
    body = {"model": "m", "messages": [{"role": "user", "content": "x"}]}
    cfg = ProxyConfig(upstream=f"http://127.0.0.1:{port}", out=tmp_path / "rec")
    async with server, ProxyServer(cfg) as proxy, aiohttp.ClientSession() as s:
        for _ in range(3):
            async with s.post(f"{proxy.base_url}/chat/completions", json=body) as r:
                assert r.status == 200
                assert (await r.json())["choices"][0]["message"]["content"] == "hi"
            await asyncio.sleep(0.05)  # let the upstream's close arrive
    assert len(connections) == 3  # one upstream connection per call, none failed
    calls = [json.loads(x) for x in (tmp_path / "rec" / "calls.jsonl").read_text().splitlines()]
    assert [c["status"] for c in calls] == ["ok"] * 3
    assert [c["completion_tokens"] for c in calls] == [1, 1, 1]
