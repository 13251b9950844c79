"""The streaming client against a real loopback server replaying scripted streams."""

from __future__ import annotations

import asyncio
import itertools
import socket
from pathlib import Path

import aiohttp
import orjson
import pytest

from agentload.client import (
    CallRecord,
    ChatClient,
    EndpointConfig,
    HeuristicCounter,
    RetryPolicy,
    Timeouts,
)
from scripted_server import (
    DONE,
    Script,
    ScriptedServer,
    chunk,
    sse,
    text_stream,
    usage_chunk,
)

REFERENCE = Path(__file__).parents[1] / "data" / "vllm-0.32-cpu"
MSGS = [{"role": "user", "content": "hi"}]


def endpoint(base_url: str, **kw: object) -> EndpointConfig:
    kw.setdefault("retry", RetryPolicy(max_attempts=1, backoff_base=0.01))
    return EndpointConfig(base_url=base_url, model="m", **kw)  # type: ignore[arg-type]


async def one(server: ScriptedServer, script: Script, **kw: object):
    server.scripts["default"] = script
    async with ChatClient(endpoint(server.base_url, **kw)) as c:
        return await c.chat(MSGS)


@pytest.fixture
async def server():
    async with ScriptedServer() as s:
        yield s


async def test_ttft_matches_scripted_first_token_delay(server: ScriptedServer) -> None:
    # Warm the connection so TTFT is not inflated by a TCP handshake on a cold pool.
    server.scripts["default"] = text_stream(["a"])
    errors: list[float] = []
    async with ChatClient(endpoint(server.base_url)) as c:
        await c.chat(MSGS)
        server.scripts["default"] = text_stream(["x", "y"], first_delay=0.2, gap=0.0)
        for _ in range(5):
            res = await c.chat(MSGS)
            assert res.ok, res.record
            assert res.content == "xy"
            # The server's own clock says when it really wrote the first token (its sleep
            # can overshoot on a busy machine); the client must agree with it within 5 ms.
            req = server.requests[-1]
            actual = (req["write_ns"][1] - req["recv_ns"]) / 1e9
            assert actual == pytest.approx(0.2, abs=0.05)
            errors.append(res.record.ttft_s - actual)
            assert res.record.ttft_s == pytest.approx(0.2, abs=0.05)
    errors.sort()
    assert abs(errors[2]) < 0.005, errors  # median error


async def test_itl_of_scripted_gaps(server: ScriptedServer) -> None:
    res = await one(server, text_stream([f"t{i}" for i in range(12)], gap=0.02))
    itl = res.record.itl
    assert itl.count == 11
    # Gaps as the server really wrote them (parts 1..12 are the token events).
    w = server.requests[-1]["write_ns"][1:13]
    server_gaps = sorted((b - a) / 1e9 for a, b in itertools.pairwise(w))
    assert itl.p50 == pytest.approx(server_gaps[5], abs=0.003)
    assert itl.mean == pytest.approx(sum(server_gaps) / 11, abs=0.003)
    assert itl.p50 == pytest.approx(0.020, abs=0.01)
    # TPOT = (e2e - ttft) / (completion - 1) with usage's 12 completion tokens.
    r = res.record
    assert r.tpot_s == pytest.approx((r.e2e_s - r.ttft_s) / 11)


PARALLEL_TOOLS_STREAM = b"".join(
    [
        sse(chunk({"role": "assistant", "content": ""})),
        sse(chunk({"content": "Je vérifie… 🔍 "})),
        sse(
            chunk(
                {
                    "tool_calls": [
                        {
                            "index": 0,
                            "id": "call_a",
                            "type": "function",
                            "function": {"name": "get_weather", "arguments": ""},
                        }
                    ]
                }
            )
        ),
        sse(chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"city": "Zü'}}]})),
        sse(chunk({"tool_calls": [{"index": 0, "function": {"arguments": 'rich"}'}}]})),
        sse(
            chunk(
                {
                    "tool_calls": [
                        {
                            "index": 1,
                            "id": "call_b",
                            "type": "function",
                            "function": {"name": "get_time"},
                        }
                    ]
                }
            )
        ),
        # Some servers repeat id and type in later fragments.
        sse(
            chunk(
                {
                    "tool_calls": [
                        {
                            "index": 1,
                            "id": "call_b",
                            "type": "function",
                            "function": {"arguments": '{"tz": "東京"}'},
                        }
                    ]
                }
            )
        ),
        sse(chunk({}, "tool_calls")),
        sse(usage_chunk(120, 30, cached=96)),
        DONE,
    ]
)


def check_parallel(res) -> None:
    assert res.ok, res.record
    assert res.content == "Je vérifie… 🔍 "
    assert [tc["id"] for tc in res.tool_calls] == ["call_a", "call_b"]
    assert [tc["function"]["name"] for tc in res.tool_calls] == ["get_weather", "get_time"]
    assert orjson.loads(res.tool_calls[0]["function"]["arguments"]) == {"city": "Zürich"}
    assert orjson.loads(res.tool_calls[1]["function"]["arguments"]) == {"tz": "東京"}
    assert res.record.num_tool_calls == 2
    assert res.record.finish_reason == "tool_calls"
    assert res.record.cached_tokens == 96
    assert res.record.prompt_tokens == 120
    assert res.record.completion_tokens == 30
    assert not res.record.tokens_estimated
    msg = res.message()
    assert msg["tool_calls"][1]["function"]["arguments"] == '{"tz": "東京"}'


async def test_parallel_tool_calls_split_mid_utf8_and_mid_json(server: ScriptedServer) -> None:
    data = PARALLEL_TOOLS_STREAM
    # Cut into 1..7-byte pieces: many cuts land inside multi-byte characters and JSON.
    parts: list[tuple[float, bytes]] = []
    i, step = 0, 1
    while i < len(data):
        parts.append((0.0005 if i % 5 == 0 else 0.0, data[i : i + step]))
        i += step
        step = step % 7 + 1
    assert any(b"\xc3" in p[1] and not p[1].endswith(b"\xbc") for p in parts)
    check_parallel(await one(server, Script(parts=parts)))


async def test_crlf_comments_and_keepalives(server: ScriptedServer) -> None:
    body = b": keep-alive\r\n\r\n" + PARALLEL_TOOLS_STREAM.replace(b"\n", b"\r\n").replace(
        b"data: [DONE]", b": ping\r\nevent: message\r\ndata: [DONE]"
    )
    # Split right between \r and \n as well.
    cut = body.index(b"\r\n", 200) + 1
    check_parallel(await one(server, Script(parts=[(0, body[:cut]), (0.01, body[cut:])])))


async def test_one_megabyte_single_line(server: ScriptedServer) -> None:
    big = "ab" * 600_000
    stream = b"".join(
        [
            sse(chunk({"role": "assistant", "content": ""})),
            sse(chunk({"content": big})),
            sse(chunk({}, "stop")),
            sse(usage_chunk(5, 300_000)),
            DONE,
        ]
    )
    parts = [(0.0, stream[i : i + 65536]) for i in range(0, len(stream), 65536)]
    res = await one(server, Script(parts=parts))
    assert res.ok, res.record
    assert len(res.content) == 1_200_000


async def test_reference_vllm_captures_parse(server: ScriptedServer) -> None:
    for name in ("real-vllm-stream.txt", "real-vllm-stream-tools-hermes.txt"):
        raw = (REFERENCE / name).read_bytes()
        body = raw.split(b"\r\n\r\n", 1)[1] if b"\r\n\r\n" in raw else raw.split(b"\n\n", 1)[1]
        res = await one(server, Script(parts=[(0.0, body)]))
        assert res.ok, (name, res.record)
        assert res.record.prompt_tokens and res.record.completion_tokens
        if "hermes" in name:
            assert res.tool_calls[0]["function"]["name"] == "get_weather"
            assert orjson.loads(res.tool_calls[0]["function"]["arguments"]) == {"city": "Paris"}
            assert res.record.cached_tokens == 128
            assert res.record.finish_reason == "tool_calls"
        else:
            assert res.content and res.record.finish_reason in ("stop", "length")


async def test_reasoning_fields_and_usage_details(server: ScriptedServer) -> None:
    u = usage_chunk(50, 9, cached=32)
    u["usage"]["completion_tokens_details"] = {"reasoning_tokens": 4}
    parts = [
        (0.0, sse(chunk({"role": "assistant", "content": ""}))),
        (0.0, sse(chunk({"reasoning_content": "think "}))),
        (0.0, sse(chunk({"reasoning": "more"}))),
        (0.0, sse(chunk({"content": "answer"}))),
        (0.0, sse(chunk({}, "stop"))),
        (0.0, sse(u)),
        (0.0, DONE),
    ]
    res = await one(server, Script(parts=parts))
    assert res.reasoning == "think more"
    assert res.content == "answer"
    assert res.record.reasoning_tokens == 4
    assert res.record.cached_tokens == 32
    assert res.message(keep_reasoning=True)["reasoning_content"] == "think more"
    assert "reasoning_content" not in res.message()


async def test_usage_missing_is_estimated(server: ScriptedServer) -> None:
    res = await one(server, text_stream(["hello ", "world ", "again"], usage=False))
    assert res.ok
    assert res.record.tokens_estimated
    # max(token-bearing chunks, ≈ chars / 4): 17 characters -> 5.
    assert res.record.completion_tokens == max(3, HeuristicCounter().count("hello world again"))
    assert res.record.prompt_tokens and res.record.prompt_tokens > 0


async def test_non_stream(server: ScriptedServer) -> None:
    body = orjson.dumps(
        {
            "id": "x",
            "object": "chat.completion",
            "choices": [
                {
                    "index": 0,
                    "message": {
                        "role": "assistant",
                        "content": None,
                        "tool_calls": [
                            {
                                "id": "c1",
                                "type": "function",
                                "function": {"name": "f", "arguments": '{"a": 1}'},
                            }
                        ],
                    },
                    "finish_reason": "tool_calls",
                }
            ],
            "usage": {"prompt_tokens": 7, "completion_tokens": 5, "total_tokens": 12},
        }
    )
    server.scripts["default"] = Script(parts=[(0.0, body)], content_type="application/json")
    async with ChatClient(endpoint(server.base_url, stream=False)) as c:
        res = await c.chat(MSGS)
    assert res.ok, res.record
    assert "stream" not in server.requests[-1]["body"]
    assert res.tool_calls[0]["function"] == {"name": "f", "arguments": '{"a": 1}'}
    assert res.record.prompt_tokens == 7 and res.record.ttft_s is None


async def test_request_body_and_headers(server: ScriptedServer, monkeypatch) -> None:
    monkeypatch.setenv("AGENTLOAD_TEST_KEY", "sk-secret-123")
    server.scripts["default"] = text_stream(["ok"])
    ep = endpoint(
        server.base_url,
        api_key_env="AGENTLOAD_TEST_KEY",
        headers={"X-Team": "t1"},
        extra_body={"chat_template_kwargs": {"enable_thinking": False}},
    )
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
    async with ChatClient(ep) as c:
        res = await c.chat(
            MSGS,
            tools=tools,
            tool_choice="required",
            max_tokens=33,
            seed=7,
            extra_body={"ignore_eos": True},
            session_id="s-1",
            role="agent",
            turn=3,
        )
    req = server.requests[-1]
    assert req["headers"]["Authorization"] == "Bearer sk-secret-123"
    assert req["headers"]["X-Session-ID"] == "s-1"
    assert req["headers"]["X-Team"] == "t1"
    b = req["body"]
    assert b["stream"] is True and b["stream_options"] == {"include_usage": True}
    assert b["tools"] == tools and b["tool_choice"] == "required"
    assert b["max_tokens"] == 33 and b["seed"] == 7 and b["ignore_eos"] is True
    assert b["chat_template_kwargs"] == {"enable_thinking": False}
    rec_json = res.record.to_json()
    assert b"sk-secret-123" not in rec_json
    back = CallRecord.from_dict(orjson.loads(rec_json))
    assert back == res.record
    assert back.role == "agent" and back.turn == 3 and back.session_id == "s-1"


# --- error taxonomy -----------------------------------------------------------------------


async def test_connect_error_closed_port() -> None:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    async with ChatClient(endpoint(f"http://127.0.0.1:{port}/v1")) as c:
        res = await c.chat(MSGS)
    assert res.record.error_kind == "connect_error"
    assert res.record.status == "error" and res.record.attempts == 1


async def test_timeout_connect_full_backlog() -> None:
    # A listener that never accepts, with its tiny backlog filled: further SYNs are dropped.
    lsock = socket.socket()
    lsock.bind(("127.0.0.1", 0))
    lsock.listen(0)
    port = lsock.getsockname()[1]
    fillers = []
    for _ in range(4):
        f = socket.socket()
        f.setblocking(False)
        try:
            f.connect(("127.0.0.1", port))
        except BlockingIOError:
            pass
        fillers.append(f)
    await asyncio.sleep(0.05)
    try:
        ep = endpoint(f"http://127.0.0.1:{port}/v1", timeouts=Timeouts(connect=0.3))
        async with ChatClient(ep) as c:
            res = await c.chat(MSGS)
        assert res.record.error_kind in ("timeout_connect", "timeout_first_token")
        if res.record.error_kind == "timeout_first_token":
            pytest.skip("kernel accepted the connection despite the full backlog")
        assert res.record.e2e_s == pytest.approx(0.3, abs=0.15)
    finally:
        for f in fillers:
            f.close()
        lsock.close()


async def test_timeout_first_token(server: ScriptedServer) -> None:
    script = Script(parts=[(0.0, sse(chunk({"role": "assistant", "content": ""})))], end="hang")
    res = await one(server, script, timeouts=Timeouts(first_token=0.25))
    assert res.record.error_kind == "timeout_first_token"
    assert res.record.e2e_s == pytest.approx(0.25, abs=0.05)


async def test_timeout_idle(server: ScriptedServer) -> None:
    script = Script(
        parts=[(0.0, sse(chunk({"content": "a"}))), (0.0, sse(chunk({"content": "b"})))], end="hang"
    )
    res = await one(server, script, timeouts=Timeouts(idle=0.2))
    assert res.record.error_kind == "timeout_idle"
    assert res.content == "ab" and res.record.token_chunks == 2  # partial output kept
    assert res.record.e2e_s == pytest.approx(0.2, abs=0.05)


async def test_timeout_total(server: ScriptedServer) -> None:
    script = text_stream([str(i) for i in range(40)], gap=0.02)
    res = await one(server, script, timeouts=Timeouts(total=0.3, idle=5))
    assert res.record.error_kind == "timeout_total"
    assert res.record.e2e_s == pytest.approx(0.3, abs=0.05)


async def test_deadlines_on_a_callers_own_session(server: ScriptedServer) -> None:
    """The aiohttp path (a caller's session, or HTTPS) reports its deadlines like the pool's."""
    first = Script(parts=[(0.0, sse(chunk({"role": "assistant", "content": ""})))], end="hang")
    idle = Script(parts=[(0.0, sse(chunk({"content": "a"})))], end="hang")
    async with aiohttp.ClientSession() as session:
        for script, kind, limit in (
            (first, "timeout_first_token", Timeouts(first_token=0.25)),
            (idle, "timeout_idle", Timeouts(idle=0.25)),
        ):
            server.scripts["default"] = script
            ep = endpoint(server.base_url, timeouts=limit)
            async with ChatClient(ep, session=session) as c:
                res = await c.chat(MSGS)
            assert res.record.error_kind == kind
            assert res.record.e2e_s == pytest.approx(0.25, abs=0.06)
        assert not session.closed  # a caller's session stays the caller's


async def test_http_error_with_excerpt(server: ScriptedServer) -> None:
    body = orjson.dumps({"error": {"message": "engine exploded", "type": "InternalError"}})
    res = await one(server, Script(parts=[(0, body)], status=500, content_type="application/json"))
    assert res.record.error_kind == "http_500"
    assert res.record.http_status == 500
    assert res.record.error_message == "engine exploded"


async def test_context_overflow(server: ScriptedServer) -> None:
    msg = (
        "This model's maximum context length is 4096 tokens. However, you requested 5000 "
        "tokens (4900 in the messages, 100 in the completion)."
    )
    body = orjson.dumps({"object": "error", "message": msg, "type": "BadRequestError", "code": 400})
    res = await one(server, Script(parts=[(0, body)], status=400, content_type="application/json"))
    assert res.record.error_kind == "context_overflow"
    assert res.record.http_status == 400
    assert "maximum context length" in (res.record.error_message or "")


async def test_plain_400_is_http_400(server: ScriptedServer) -> None:
    body = orjson.dumps({"error": {"message": "n > 1 is not supported"}})
    res = await one(server, Script(parts=[(0, body)], status=400, content_type="application/json"))
    assert res.record.error_kind == "http_400"


async def test_stream_error_event(server: ScriptedServer) -> None:
    parts = [
        (0.0, sse(chunk({"content": "partial"}))),
        (0.0, sse({"error": {"message": "scheduler died", "code": 500}})),
        (0.0, DONE),
    ]
    res = await one(server, Script(parts=parts))
    assert res.record.error_kind == "stream_error"
    assert "scheduler died" in (res.record.error_message or "")
    assert res.content == "partial"


@pytest.mark.parametrize(
    ("parts", "end"),
    [
        ([(0.0, sse(chunk({"content": "a"}))), (0.0, b"data: {not json\n\n")], "normal"),
        ([(0.0, sse(chunk({"content": "a"}))), (0.0, sse(chunk({}, "stop")))], "normal"),
        ([(0.0, sse(chunk({"content": "a"}))), (0.01, b'data: {"cho')], "abort"),
    ],
    ids=["bad-json", "no-done", "reset-mid-stream"],
)
async def test_malformed_stream(server: ScriptedServer, parts, end) -> None:
    res = await one(server, Script(parts=parts, end=end))
    assert res.record.error_kind == "malformed_stream", res.record
    assert res.record.status == "error"


async def test_cancelled_is_recorded_and_propagates(server: ScriptedServer) -> None:
    server.scripts["default"] = Script(parts=[(0.0, sse(chunk({"content": "a"})))], end="hang")
    seen: list[CallRecord] = []
    async with ChatClient(endpoint(server.base_url), on_record=seen.append) as c:
        task = asyncio.create_task(c.chat(MSGS))
        await asyncio.sleep(0.1)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    assert [r.error_kind for r in seen] == ["cancelled"]


# --- retries --------------------------------------------------------------------------------


def _status(code: int) -> Script:
    return Script(
        parts=[(0, b'{"error": {"message": "busy"}}')], status=code, content_type="application/json"
    )


async def test_retries_then_success(server: ScriptedServer) -> None:
    server.scripts["default"] = [_status(503), _status(429), text_stream(["ok"])]
    ep = endpoint(server.base_url, retry=RetryPolicy(max_attempts=4, backoff_base=0.01))
    async with ChatClient(ep) as c:
        res = await c.chat(MSGS)
    assert res.ok and res.content == "ok"
    assert res.record.attempts == 3
    assert len(server.requests) == 3
    assert res.record.total_s >= res.record.e2e_s


async def test_retries_exhausted(server: ScriptedServer) -> None:
    server.scripts["default"] = _status(502)
    ep = endpoint(server.base_url, retry=RetryPolicy(max_attempts=3, backoff_base=0.01))
    async with ChatClient(ep) as c:
        res = await c.chat(MSGS)
    assert res.record.error_kind == "http_502" and res.record.attempts == 3
    assert len(server.requests) == 3


async def test_non_retryable_not_retried(server: ScriptedServer) -> None:
    server.scripts["default"] = _status(500)
    ep = endpoint(server.base_url, retry=RetryPolicy(max_attempts=5, backoff_base=0.01))
    async with ChatClient(ep) as c:
        res = await c.chat(MSGS)
    assert res.record.error_kind == "http_500" and res.record.attempts == 1


async def test_missing_api_key_env_is_a_clear_error(server: ScriptedServer) -> None:
    ep = endpoint(server.base_url, api_key_env="AGENTLOAD_NOT_SET_ANYWHERE")
    async with ChatClient(ep) as c:
        res = await c.chat(MSGS)
    assert res.record.error_kind == "config_error"
    assert "AGENTLOAD_NOT_SET_ANYWHERE" in (res.record.error_message or "")
    assert server.requests == []
