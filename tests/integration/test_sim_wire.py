"""The simulator's OpenAI wire format, through the official SDK and raw HTTP."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import jsonschema
import openai
import orjson
import pytest
from openai import AsyncOpenAI

from agentload.sim import (
    ResponsePlan,
    SimConfig,
    SimServer,
    ToolCallPlan,
    register_behaviour,
)
from agentload.sim.behaviour import RequestView, unregister_behaviour

REFERENCE = Path(__file__).parents[1] / "data" / "vllm-0.32-cpu"
MODEL = "sim-model"

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather for a city",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "City name"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            },
            "required": ["city"],
        },
    },
}
BOOK = {
    "type": "function",
    "function": {
        "name": "book_flight",
        "parameters": {
            "type": "object",
            "properties": {
                "flight": {"type": "string", "minLength": 5, "maxLength": 8},
                "passengers": {"type": "integer", "minimum": 1, "maximum": 9},
                "cabin": {"enum": ["economy", "business"]},
                "dates": {"type": "array", "items": {"type": "string", "format": "date"}},
                "insured": {"type": "boolean"},
            },
            "required": ["flight", "passengers", "cabin", "dates", "insured"],
            "additionalProperties": False,
        },
    },
}
MESSAGES: list[Any] = [
    {"role": "system", "content": "You are an agent with tools."},
    {"role": "user", "content": "What is the weather in Paris?"},
]


class ParallelCalls:
    """A test behaviour: two tool calls with fixed arguments."""

    def __init__(self, config: SimConfig) -> None:
        self.config = config

    def respond(self, request: RequestView) -> ResponsePlan:
        return ResponsePlan(
            tool_calls=[
                ToolCallPlan("get_weather", '{"city": "Paris"}'),
                ToolCallPlan("get_weather", '{"city": "Lyon", "unit": "celsius"}'),
            ]
        )


@pytest.fixture
async def sim() -> AsyncIterator[SimServer]:
    config = SimConfig(
        port=0,
        model=MODEL,
        profile="tiny-cpu",
        speedup=20,
        seed=7,
        max_model_len=4096,
        tool_call_probability=1.0,
    )
    async with SimServer(config) as server:
        yield server


@pytest.fixture
async def client(sim: SimServer) -> AsyncIterator[AsyncOpenAI]:
    c = AsyncOpenAI(base_url=sim.base_url, api_key="unused", max_retries=0)
    yield c
    await c.close()


async def raw_stream(
    sim: SimServer, body: dict[str, Any], headers: dict[str, str] | None = None
) -> list[Any]:
    """The SSE events of one request: parsed JSON objects, and "[DONE]"."""
    async with (
        aiohttp.ClientSession() as s,
        s.post(f"{sim.base_url}/chat/completions", json=body, headers=headers) as resp,
    ):
        assert resp.status == 200
        assert resp.headers["Content-Type"].startswith("text/event-stream")
        text = (await resp.read()).decode()
    events: list[Any] = []
    for block in text.split("\n\n"):
        if not block.strip():
            continue
        assert block.startswith("data: ")
        data = block[len("data: ") :]
        events.append(data if data == "[DONE]" else json.loads(data))
    return events


def reference_events(name: str) -> list[Any]:
    text = (REFERENCE / name).read_text()
    body = text.split("\r\n\r\n", 1)[1] if "\r\n\r\n" in text else text.split("\n\n", 1)[1]
    out: list[Any] = []
    for line in body.splitlines():
        if line.startswith("data: "):
            data = line[len("data: ") :]
            out.append(data if data == "[DONE]" else json.loads(data))
    return out


def shape(obj: Any) -> Any:
    """Keys and value types, recursively (what must match vLLM's chunks)."""
    if isinstance(obj, dict):
        # stop_reason is null, or the id of a stop token (vLLM's capture shows both)
        return {
            k: ("stop_reason" if k == "stop_reason" else shape(v))
            for k, v in sorted(obj.items())
            if k != "id"
        }
    if isinstance(obj, list):
        return [shape(v) for v in obj[:1]]
    return type(obj).__name__


async def test_stream_chunks_have_vllm_shapes(sim: SimServer) -> None:
    ref = reference_events("real-vllm-stream.txt")
    ours = await raw_stream(
        sim,
        {
            "model": MODEL,
            "messages": MESSAGES,
            "max_tokens": 8,
            "ignore_eos": True,
            "temperature": 0,
            "stream": True,
            "stream_options": {"include_usage": True},
        },
    )
    assert ours[-1] == "[DONE]" and ref[-1] == "[DONE]"
    # role chunk, a content chunk, the finishing chunk and the usage chunk
    for i in (0, 1, -3, -2):
        r, o = shape(ref[i]), shape(ours[i])
        r.pop("system_fingerprint", None)
        o.pop("system_fingerprint", None)
        assert o == r, (i, ours[i], ref[i])
    assert ours[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert ours[-3]["choices"][0]["finish_reason"] == "length"
    usage = ours[-2]["usage"]
    assert usage["completion_tokens"] == 8
    assert usage["total_tokens"] == usage["prompt_tokens"] + 8
    assert set(usage["prompt_tokens_details"]) == {"cached_tokens", "created_cache_tokens"}
    assert (
        len(
            [
                e
                for e in ours
                if e != "[DONE]" and e["choices"] and e["choices"][0]["delta"].get("content")
            ]
        )
        == 8
    )


async def test_tool_call_chunks_have_vllm_shapes(sim: SimServer) -> None:
    ref = reference_events("real-vllm-stream-tools-hermes.txt")
    ours = await raw_stream(
        sim,
        {
            "model": MODEL,
            "messages": MESSAGES,
            "tools": [WEATHER],
            "tool_choice": "required",
            "max_tokens": 200,
            "stream": True,
            "stream_options": {"include_usage": True},
        },
    )
    # name chunk, first argument chunk, finish chunk
    for i in (1, 2, -3):
        assert shape(ours[i]) == shape(ref[i]), (i, ours[i], ref[i])
    header = ours[1]["choices"][0]["delta"]["tool_calls"][0]
    assert header["index"] == 0 and header["type"] == "function"
    assert header["id"].startswith("chatcmpl-tool-")
    assert header["function"] == {"name": "get_weather"}
    args = "".join(
        e["choices"][0]["delta"]["tool_calls"][0]["function"]["arguments"] for e in ours[2:-3]
    )
    jsonschema.validate(json.loads(args), WEATHER["function"]["parameters"])
    assert ours[-3]["choices"][0]["finish_reason"] == "tool_calls"
    assert ours[-3]["choices"][0]["delta"] == {}


async def test_streaming_text_with_sdk(client: AsyncOpenAI) -> None:
    stream = await client.chat.completions.create(
        model=MODEL,
        messages=MESSAGES,
        max_tokens=40,
        stream=True,
        stream_options={"include_usage": True},
    )
    text, finish, usage = "", None, None
    async for chunk in stream:
        if chunk.choices:
            text += chunk.choices[0].delta.content or ""
            finish = chunk.choices[0].finish_reason or finish
        if chunk.usage:
            usage = chunk.usage
    assert text
    assert finish in ("stop", "length")
    assert usage is not None and 0 < usage.completion_tokens <= 40
    assert usage.prompt_tokens > 10


async def test_parallel_tool_calls_assembled_by_sdk(client: AsyncOpenAI) -> None:
    register_behaviour("test-parallel", ParallelCalls)
    try:
        stream = await client.chat.completions.create(
            model=MODEL,
            messages=MESSAGES,
            tools=[WEATHER],
            stream=True,
            stream_options={"include_usage": True},
            extra_headers={"X-Agentload-Role": "test-parallel"},
        )
        calls: dict[int, dict[str, str]] = {}
        finish = None
        async for chunk in stream:
            if not chunk.choices:
                continue
            finish = chunk.choices[0].finish_reason or finish
            for tc in chunk.choices[0].delta.tool_calls or []:
                slot = calls.setdefault(tc.index, {"id": "", "name": "", "arguments": ""})
                if tc.id:
                    slot["id"] = tc.id
                if tc.function and tc.function.name:
                    slot["name"] = tc.function.name
                if tc.function and tc.function.arguments:
                    slot["arguments"] += tc.function.arguments
        assert finish == "tool_calls"
        assert sorted(calls) == [0, 1]
        assert json.loads(calls[0]["arguments"]) == {"city": "Paris"}
        assert json.loads(calls[1]["arguments"]) == {"city": "Lyon", "unit": "celsius"}
        assert calls[0]["id"] != calls[1]["id"]
        # the SDK's own accumulator agrees
        async with client.chat.completions.stream(
            model=MODEL,
            messages=MESSAGES,
            tools=[WEATHER],
            extra_headers={"X-Agentload-Role": "test-parallel"},
        ) as s:
            final = await s.get_final_completion()
        tcs = final.choices[0].message.tool_calls or []
        assert [tc.function.arguments for tc in tcs] == [
            '{"city": "Paris"}',
            '{"city": "Lyon", "unit": "celsius"}',
        ]
    finally:
        unregister_behaviour("test-parallel")


async def test_non_streaming_tool_call_is_schema_valid(client: AsyncOpenAI) -> None:
    res = await client.chat.completions.create(
        model=MODEL,
        messages=MESSAGES,
        tools=[WEATHER, BOOK],
        tool_choice={"type": "function", "function": {"name": "book_flight"}},
    )
    choice = res.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.content is None
    calls = choice.message.tool_calls or []
    assert len(calls) == 1 and calls[0].function.name == "book_flight"
    jsonschema.validate(json.loads(calls[0].function.arguments), BOOK["function"]["parameters"])
    assert res.usage is not None and res.usage.completion_tokens > 0
    assert res.object == "chat.completion"


async def test_tool_choice_none_and_auto(sim: SimServer, client: AsyncOpenAI) -> None:
    res = await client.chat.completions.create(
        model=MODEL, messages=MESSAGES, tools=[WEATHER], tool_choice="none", max_tokens=30
    )
    assert not res.choices[0].message.tool_calls
    assert res.choices[0].message.content
    # tool_call_probability=1.0 in this sim: auto calls a tool
    res = await client.chat.completions.create(
        model=MODEL, messages=MESSAGES, tools=[WEATHER], tool_choice="auto"
    )
    assert res.choices[0].finish_reason == "tool_calls"


async def test_reasoning_when_thinking_requested(client: AsyncOpenAI) -> None:
    stream = await client.chat.completions.create(
        model=MODEL,
        messages=MESSAGES,
        max_tokens=400,
        stream=True,
        extra_body={"chat_template_kwargs": {"enable_thinking": True}},
    )
    reasoning, content = "", ""
    order: list[str] = []
    async for chunk in stream:
        if not chunk.choices:
            continue
        delta = chunk.choices[0].delta
        r = getattr(delta, "reasoning_content", None)
        if r:
            reasoning += r
            order.append("r")
        if delta.content:
            content += delta.content
            order.append("c")
    assert reasoning and content
    assert order.index("c") > order.index("r")
    assert "".join(order).startswith("r")


async def test_max_tokens_ignore_eos_and_seed_determinism(client: AsyncOpenAI) -> None:
    res = await client.chat.completions.create(
        model=MODEL, messages=MESSAGES, max_completion_tokens=50, extra_body={"ignore_eos": True}
    )
    assert res.usage is not None and res.usage.completion_tokens == 50
    assert res.choices[0].finish_reason == "length"
    texts = []
    for _ in range(2):
        r = await client.chat.completions.create(
            model=MODEL, messages=MESSAGES, max_tokens=60, seed=123, temperature=0.8
        )
        texts.append(r.choices[0].message.content)
    assert texts[0] == texts[1]
    other = await client.chat.completions.create(
        model=MODEL, messages=MESSAGES, max_tokens=60, seed=124, temperature=0.8
    )
    assert other.choices[0].message.content != texts[0]
    greedy = [
        (
            await client.chat.completions.create(
                model=MODEL, messages=MESSAGES, max_tokens=60, temperature=0
            )
        )
        .choices[0]
        .message.content
        for _ in range(2)
    ]
    assert greedy[0] == greedy[1]


async def test_completions_endpoint(client: AsyncOpenAI) -> None:
    res = await client.completions.create(
        model=MODEL, prompt="Once upon a time", max_tokens=12, extra_body={"ignore_eos": True}
    )
    assert res.choices[0].text and res.choices[0].finish_reason == "length"
    assert res.usage is not None and res.usage.completion_tokens == 12
    stream = await client.completions.create(
        model=MODEL,
        prompt="Once upon a time",
        max_tokens=5,
        stream=True,
        extra_body={"ignore_eos": True},
    )
    pieces = [c.choices[0].text async for c in stream if c.choices]
    assert len(pieces) == 5


async def test_models_and_health(sim: SimServer, client: AsyncOpenAI) -> None:
    models = await client.models.list()
    assert [m.id for m in models.data] == [MODEL]
    async with aiohttp.ClientSession() as s, s.get(f"{sim.url}/health") as resp:
        assert resp.status == 200


async def test_context_overflow_errors(client: AsyncOpenAI) -> None:
    long_text = "word " * 5000
    with pytest.raises(openai.BadRequestError) as info:
        await client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": long_text}]
        )
    msg = info.value.message
    assert "This model's maximum context length is 4096 tokens. However, your request has" in msg
    assert info.value.status_code == 400
    body = info.value.body
    assert isinstance(body, dict) and body.get("type") == "BadRequestError"
    with pytest.raises(openai.BadRequestError) as info:
        await client.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=4090)
    msg = info.value.message
    assert "'max_tokens' or 'max_completion_tokens' is too large: 4090." in msg
    assert "maximum context length is 4096 tokens and your request has" in msg


async def test_unsupported_parameters_and_unknown_model(client: AsyncOpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as info:
        await client.chat.completions.create(model=MODEL, messages=MESSAGES, n=2)
    assert "n" in info.value.message
    with pytest.raises(openai.NotFoundError):
        await client.chat.completions.create(model="other", messages=MESSAGES)
    with pytest.raises(openai.BadRequestError):
        await client.chat.completions.create(model=MODEL, messages=MESSAGES, tool_choice="required")


async def test_api_key_required() -> None:
    async with SimServer(
        SimConfig(port=0, model=MODEL, profile="instant", api_key="s3cret")
    ) as server:
        bad = AsyncOpenAI(base_url=server.base_url, api_key="wrong", max_retries=0)
        with pytest.raises(openai.AuthenticationError) as info:
            await bad.chat.completions.create(model=MODEL, messages=MESSAGES)
        assert info.value.status_code == 401
        async with aiohttp.ClientSession() as s:
            async with s.get(f"{server.base_url}/models") as resp:
                assert resp.status == 401
                assert orjson.loads(await resp.read()) == {"error": "Unauthorized"}
            async with s.get(f"{server.url}/health") as resp:
                assert resp.status == 200
        good = AsyncOpenAI(base_url=server.base_url, api_key="s3cret", max_retries=0)
        res = await good.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=3)
        assert res.choices[0].message.content
        await bad.close()
        await good.close()


async def test_continuous_usage_stats(sim: SimServer) -> None:
    events = await raw_stream(
        sim,
        {
            "model": MODEL,
            "messages": MESSAGES,
            "max_tokens": 5,
            "ignore_eos": True,
            "stream": True,
            "stream_options": {"include_usage": True, "continuous_usage_stats": True},
        },
    )
    counts = [
        e["usage"]["completion_tokens"]
        for e in events
        if e != "[DONE]" and e["choices"] and "usage" in e
    ]
    assert counts == [1, 2, 3, 4, 5]
    assert events[-2]["choices"] == [] and events[-2]["usage"]["completion_tokens"] == 5
