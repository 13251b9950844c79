"""A loopback chat-completions server that records every request and answers through a
function the test gives (non-streamed replies), for checking what replay sends."""

from __future__ import annotations

import asyncio
import itertools
import socket
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

Answer = Callable[[dict[str, Any], dict[str, str]], dict[str, Any] | int | None]
"""(request body, headers) -> assistant message, an HTTP status to fail with, or None to
hang until the client gives up."""


def text_answer(body: dict[str, Any], headers: dict[str, str]) -> dict[str, Any]:
    return {"role": "assistant", "content": "ok"}


@dataclass
class Seen:
    session: str | None
    body: dict[str, Any]


@dataclass
class RecordingServer:
    answer: Answer = text_answer
    delay: Callable[[dict[str, str]], float] = lambda headers: 0.002
    seen: list[Seen] = field(default_factory=list)
    in_flight: int = 0
    max_in_flight: int = 0
    in_flight_by_session: dict[str, int] = field(default_factory=dict)
    max_per_session: int = 0

    async def __aenter__(self) -> RecordingServer:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self._handle)
        # A hanging handler ends when the client gives up, not at shutdown.
        self._runner = web.AppRunner(app, handler_cancellation=True, shutdown_timeout=1.0)
        await self._runner.setup()
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        self.port = sock.getsockname()[1]
        site = web.SockSite(self._runner, sock)
        await site.start()
        self._ids = itertools.count()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._runner.cleanup()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def by_session(self) -> dict[str, list[dict[str, Any]]]:
        out: dict[str, list[dict[str, Any]]] = {}
        for s in self.seen:
            out.setdefault(str(s.session), []).append(s.body)
        return out

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        headers = dict(request.headers)
        session = headers.get("X-Session-ID")
        self.seen.append(Seen(session, body))
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        key = str(session)
        self.in_flight_by_session[key] = self.in_flight_by_session.get(key, 0) + 1
        self.max_per_session = max(self.max_per_session, self.in_flight_by_session[key])
        try:
            await asyncio.sleep(self.delay(headers))
            msg = self.answer(body, headers)
            if msg is None:
                await asyncio.sleep(3600)
            if isinstance(msg, int):
                return web.json_response({"error": {"message": "scripted failure"}}, status=msg)
            assert isinstance(msg, dict)
            n = 1 + sum(len(str(v)) for v in msg.values()) // 4
            return web.json_response(
                {
                    "id": f"chatcmpl-{next(self._ids)}",
                    "object": "chat.completion",
                    "model": body.get("model"),
                    "choices": [
                        {
                            "index": 0,
                            "message": msg,
                            "finish_reason": "tool_calls" if msg.get("tool_calls") else "stop",
                        }
                    ],
                    "usage": {
                        "prompt_tokens": 10,
                        "completion_tokens": n,
                        "total_tokens": 10 + n,
                    },
                }
            )
        finally:
            self.in_flight -= 1
            self.in_flight_by_session[key] -= 1
