"""Real vLLM: cached tokens from usage against /metrics, and streamed tool calls through the
hermes parser, read by agentload's own client."""

from __future__ import annotations

import time
from typing import Any

import pytest
from real_helpers import FORCED_CALL, WEATHER_TOOL, metrics_text, raw_stream, run

from agentload.client import ChatClient, EndpointConfig
from agentload.servermetrics.parse import parse_metrics

pytestmark = pytest.mark.real


def _endpoint(server: Any) -> EndpointConfig:
    return EndpointConfig(
        name="vllm", base_url=server.base_url, model=server.model, temperature=0.0
    )


def _counters(url: str) -> tuple[float, float]:
    m = parse_metrics(metrics_text(url))
    assert m["engine"] == "vllm"
    return m["prefix_queries"], m["prefix_hits"]


def test_cached_tokens_from_usage_agree_with_metrics(vllm_server: Any) -> None:
    # A shared prefix of a few thousand tokens, then different questions: the second and
    # third calls hit the prefix cache in whole 128-token blocks.
    prefix = " ".join(f"Rule {i}: a booking may change before departure." for i in range(300))
    questions = ["Can I change it?", "What about a refund?", "And the baggage?"]
    q0, h0 = _counters(vllm_server.metrics_url)

    async def calls() -> list[Any]:
        async with ChatClient(_endpoint(vllm_server)) as client:
            return [
                await client.chat(
                    [
                        {"role": "system", "content": prefix},
                        {"role": "user", "content": q},
                    ],
                    max_tokens=4,
                )
                for q in questions
            ]

    results = run(calls())
    recs = [r.record for r in results]
    assert all(r.status == "ok" for r in recs), [r.error_message for r in recs]
    assert all(r.prompt_tokens and r.prompt_tokens > 1500 for r in recs)
    assert not any(r.tokens_estimated for r in recs)
    cached = [r.cached_tokens for r in recs]
    assert cached[0] is not None and cached[1] is not None
    assert cached[1] >= 1024 and cached[1] % 128 == 0
    assert cached[2] >= 1024
    prompt_sum = sum(r.prompt_tokens or 0 for r in recs)
    # The counters move when the engine publishes its stats: poll briefly.
    deadline = time.monotonic() + 15
    while True:
        q1, h1 = _counters(vllm_server.metrics_url)
        if q1 - q0 >= prompt_sum or time.monotonic() > deadline:
            break
        time.sleep(0.3)
    assert q1 - q0 == prompt_sum
    assert h1 - h0 == sum(c or 0 for c in cached)


def test_streamed_tool_call_through_the_hermes_parser(vllm_server: Any) -> None:
    messages: list[dict[str, Any]] = [{"role": "user", "content": "What is the weather in Paris?"}]

    async def call(msgs: list[dict[str, Any]], extra: dict[str, Any] | None) -> Any:
        async with ChatClient(_endpoint(vllm_server)) as client:
            return await client.chat(
                msgs, tools=[WEATHER_TOOL], tool_choice="auto", max_tokens=64, extra_body=extra
            )

    res = run(call(messages, FORCED_CALL))
    rec = res.record
    assert rec.status == "ok", rec.error_message
    assert rec.finish_reason == "tool_calls"
    assert rec.num_tool_calls == 1
    assert res.content == ""
    (tc,) = res.tool_calls
    assert tc["type"] == "function"
    assert tc["id"].startswith("chatcmpl-tool-")
    assert tc["function"] == {"name": "get_weather", "arguments": '{"city": "Paris"}'}
    assert rec.ttft_s is not None and rec.ttft_s > 0

    # The history with the call and its result renders through the chat template.
    follow = [
        *messages,
        res.message(),
        {"role": "tool", "tool_call_id": tc["id"], "content": '{"temp_c": 18}'},
    ]
    res2 = run(call(follow, None))
    assert res2.record.status == "ok", res2.record.error_message
    assert res2.record.prompt_tokens > rec.prompt_tokens


def test_tool_call_fragments_on_the_wire(vllm_server: Any) -> None:
    body = {
        "model": vllm_server.model,
        "messages": [{"role": "user", "content": "What is the weather in Paris?"}],
        "tools": [WEATHER_TOOL],
        "tool_choice": "auto",
        "max_tokens": 64,
        "temperature": 0,
        "stream": True,
        "stream_options": {"include_usage": True},
        **FORCED_CALL,
    }
    events = run(raw_stream(vllm_server.base_url, body))
    frags = [
        tc
        for e in events
        for c in e.get("choices", [])
        for tc in (c.get("delta") or {}).get("tool_calls") or []
    ]
    first, rest = frags[0], frags[1:]
    # The first fragment names the function and carries no arguments key.
    assert set(first) == {"id", "type", "index", "function"}
    assert first["function"] == {"name": "get_weather"}
    assert rest and all(set(f) == {"index", "function"} for f in rest)
    assert all(set(f["function"]) == {"arguments"} for f in rest)
    assert "".join(f["function"]["arguments"] for f in rest) == '{"city": "Paris"}'
    # Usage arrives once, in a last event with no choices.
    assert events[-1]["choices"] == [] and events[-1]["usage"]["completion_tokens"] > 0
    assert all("usage" not in e or e["usage"] is None for e in events[:-1])
