"""`agentload proxy` in front of a real vLLM: what the caller receives is what vLLM sends
(streamed, non-streamed, hermes tool calls, other paths), and the calls it records carry
vLLM's own usage."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import aiohttp
import openai
import pytest
from real_helpers import FORCED_CALL, WEATHER_TOOL, run

from agentload.proxy import ProxyConfig, ProxyServer

pytestmark = pytest.mark.real

MESSAGES: list[Any] = [
    {"role": "system", "content": "You answer briefly."},
    {"role": "user", "content": "Say something about Paris."},
]


def _read(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _shape(chunks: list[Any]) -> list[Any]:
    return [c.model_dump(exclude={"id", "created", "system_fingerprint"}) for c in chunks]


async def _stream(client: openai.AsyncOpenAI, model: str, **kw: Any) -> list[Any]:
    kw.setdefault("max_tokens", 16)
    s = await client.chat.completions.create(
        model=model, messages=MESSAGES, stream=True, temperature=0.0, **kw
    )
    return [c async for c in s]


def _models(body: dict[str, Any]) -> list[Any]:
    return [(m["id"], m["owned_by"], m["root"], m["max_model_len"]) for m in body["data"]]


async def _get(url: str) -> tuple[int, Any]:
    async with aiohttp.ClientSession() as http, http.get(url) as r:
        return r.status, await r.json()


async def _exchange(server: Any, out: Path) -> dict[str, Any]:
    seen: dict[str, Any] = {}
    async with ProxyServer(ProxyConfig(upstream=server.base_url, out=out)) as proxy:
        direct = openai.AsyncOpenAI(base_url=server.base_url, api_key="x")
        via = openai.AsyncOpenAI(
            base_url=proxy.base_url, api_key="x", default_headers={"X-Session-ID": "real-1"}
        )
        # Greedy decoding: the direct and the proxied stream carry the same tokens.
        seen["direct"] = await _stream(direct, server.model)
        seen["via"] = await _stream(via, server.model)
        seen["via_usage"] = await _stream(via, server.model, stream_options={"include_usage": True})
        seen["tool"] = await _stream(
            via, server.model, tools=[WEATHER_TOOL], extra_body=FORCED_CALL, max_tokens=64
        )
        seen["plain"] = await via.chat.completions.create(
            model=server.model, messages=MESSAGES, temperature=0.0, max_tokens=8
        )
        seen["models_direct"] = await _get(f"{server.base_url}/models")
        seen["models_via"] = await _get(f"{proxy.base_url}/models")
        await direct.close()
        await via.close()
    return seen


def test_proxy_passes_vllm_through_and_records_its_usage(vllm_server: Any, tmp_path: Path) -> None:
    out = tmp_path / "proxy"
    seen = run(_exchange(vllm_server, out))

    assert _shape(seen["via"]) == _shape(seen["direct"])
    # The caller did not ask for usage: the usage chunk the proxy asked for is not passed on.
    assert all(c.usage is None for c in seen["via"])
    last = seen["via_usage"][-1]
    assert last.choices == [] and last.usage is not None and last.usage.completion_tokens > 0
    tool_calls = [tc for c in seen["tool"] for ch in c.choices for tc in ch.delta.tool_calls or []]
    assert any(tc.function and tc.function.name == "get_weather" for tc in tool_calls)
    # vLLM stamps each /models answer with the time and fresh permission ids.
    assert seen["models_via"][0] == 200
    assert _models(seen["models_via"][1]) == _models(seen["models_direct"][1])

    calls = _read(out / "calls.jsonl")
    assert len(calls) == 4
    assert {c["session_id"] for c in calls} == {"real-1"}
    for rec in calls:
        assert rec["status"] == "ok" and rec["http_status"] == 200, rec
        assert rec["tokens_estimated"] is False
        assert rec["prompt_tokens"] > 5 and rec["completion_tokens"] > 0
    streamed, with_usage, tool, plain = calls
    # Tokens are vLLM's usage: the same request gets the same counts in both arms.
    assert (with_usage["prompt_tokens"], with_usage["completion_tokens"]) == (
        last.usage.prompt_tokens,
        last.usage.completion_tokens,
    )
    assert streamed["completion_tokens"] == with_usage["completion_tokens"]
    assert 0 < streamed["ttft_s"] <= streamed["e2e_s"]
    assert tool["num_tool_calls"] >= 1 and tool["finish_reason"] == "tool_calls"
    assert plain["stream"] is False
    assert seen["plain"].usage is not None
    assert plain["prompt_tokens"] == seen["plain"].usage.prompt_tokens
    assert plain["completion_tokens"] == seen["plain"].usage.completion_tokens
