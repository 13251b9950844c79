"""A real loopback HTTP server that replays scripted responses byte by byte.

Each request names its script in the `X-Script` header (or the server's default script is
used). A script sets the status, headers and a list of (delay seconds, bytes) writes, and
how the response ends: normally, by aborting the connection, or by hanging.
"""

from __future__ import annotations

import asyncio
import socket
import time
from dataclasses import dataclass, field
from typing import Any

import orjson
from aiohttp import web


@dataclass
class Script:
    parts: list[tuple[float, bytes]] = field(default_factory=list)
    status: int = 200
    content_type: str = "text/event-stream"
    end: str = "normal"  # normal | abort | hang
    headers: dict[str, str] = field(default_factory=dict)


def sse(obj: Any) -> bytes:
    return b"data: " + orjson.dumps(obj) + b"\n\n"


def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    return {
        "id": "chatcmpl-test",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "m",
        "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}],
    }


def usage_chunk(prompt: int, completion: int, cached: int | None = None) -> dict[str, Any]:
    u: dict[str, Any] = {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }
    if cached is not None:
        u["prompt_tokens_details"] = {"cached_tokens": cached}
    return {"id": "chatcmpl-test", "object": "chat.completion.chunk", "choices": [], "usage": u}


DONE = b"data: [DONE]\n\n"


def text_stream(
    tokens: list[str], first_delay: float = 0.0, gap: float = 0.0, usage: bool = True
) -> Script:
    parts: list[tuple[float, bytes]] = [(0.0, sse(chunk({"role": "assistant", "content": ""})))]
    for i, tok in enumerate(tokens):
        parts.append((first_delay if i == 0 else gap, sse(chunk({"content": tok}))))
    parts.append((0.0, sse(chunk({}, "stop"))))
    if usage:
        parts.append((0.0, sse(usage_chunk(10, len(tokens)))))
    parts.append((0.0, DONE))
    return Script(parts=parts)


class ScriptedServer:
    def __init__(self) -> None:
        self.scripts: dict[str, Script | list[Script]] = {}
        self.requests: list[dict[str, Any]] = []
        self._runner: web.AppRunner | None = None
        self.port = 0

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    async def __aenter__(self) -> ScriptedServer:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_post("/v1/chat/completions", self._handle)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.1)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        sock = site._server.sockets[0]  # type: ignore[union-attr]
        self.port = sock.getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._runner is not None
        await self._runner.cleanup()

    def _next(self, name: str) -> Script:
        s = self.scripts[name]
        if isinstance(s, list):
            return s.pop(0) if len(s) > 1 else s[0]
        return s

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        entry: dict[str, Any] = {
            "headers": dict(request.headers),
            "body": orjson.loads(body),
            "recv_ns": time.perf_counter_ns(),
            "write_ns": [],
        }
        self.requests.append(entry)
        script = self._next(request.headers.get("X-Script", "default"))
        if script.content_type != "text/event-stream":
            payload = b"".join(p for _, p in script.parts)
            return web.Response(
                status=script.status,
                body=payload,
                content_type=script.content_type,
                headers=script.headers,
            )
        resp = web.StreamResponse(status=script.status, headers=script.headers)
        resp.content_type = script.content_type
        await resp.prepare(request)
        sock = request.transport.get_extra_info("socket") if request.transport else None
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for delay, data in script.parts:
            if delay:
                await asyncio.sleep(delay)
            await resp.write(data)
            entry["write_ns"].append(time.perf_counter_ns())
        if script.end == "abort":
            assert request.transport is not None
            request.transport.abort()
            return resp
        if script.end == "hang":
            await asyncio.sleep(3600)
        await resp.write_eof()
        return resp
