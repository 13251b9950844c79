"""Helpers of the real-engine tests: raw streams and /metrics as a client sees them."""

from __future__ import annotations

import asyncio
import json
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

MODEL_NAME = "tiny"
# The API key of the locked engine (the preflight tests).
LOCKED_KEY = "agentload-test-key"

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather for a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    },
}
# The random model calls a tool only when its text is forced; tool_choice stays auto, so the
# hermes parser (not the engine's own JSON path) turns the text into tool-call fragments.
FORCED_CALL = {
    "structured_outputs": {
        "regex": '<tool_call>\n\\{"name": "get_weather", "arguments": '
        '\\{"city": "Paris"\\}\\}\n</tool_call>'
    }
}


@dataclass
class RealServer:
    base_url: str
    metrics_url: str
    model: str
    log_path: Path
    ready_s: float


def metrics_text(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as r:
        return r.read().decode()


async def raw_stream(base_url: str, body: dict[str, Any]) -> list[dict[str, Any]]:
    """The `data:` events of one streamed chat completion, parsed ([DONE] dropped)."""
    import aiohttp

    events: list[dict[str, Any]] = []
    async with (
        aiohttp.ClientSession() as http,
        http.post(
            f"{base_url}/chat/completions",
            json=body,
            timeout=aiohttp.ClientTimeout(total=120),
        ) as r,
    ):
        assert r.status == 200, await r.text()
        buf = b""
        async for chunk in r.content.iter_any():
            buf += chunk
            while b"\n\n" in buf:
                block, buf = buf.split(b"\n\n", 1)
                for line in block.splitlines():
                    if line.startswith(b"data: ") and line[6:].strip() != b"[DONE]":
                        events.append(json.loads(line[6:]))
    return events


def run(coro: Any) -> Any:
    return asyncio.run(coro)
