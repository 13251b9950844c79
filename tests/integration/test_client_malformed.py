"""Replies of every wrong shape become one classified record; the client never raises.

Each case below is served by a real loopback server (tests/scripted_server.py) inside an
otherwise valid stream, so what is checked is exactly the one bad chunk. The count of cases is
quoted in docs/reliability.md.
"""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from agentload.client import CallRecord, ChatClient, EndpointConfig, RetryPolicy
from scripted_server import DONE, Script, ScriptedServer, chunk, sse, usage_chunk

MSGS = [{"role": "user", "content": "hi"}]
MALFORMED = "malformed_stream"


def _choice(**kw: Any) -> dict[str, Any]:
    c = chunk({"content": "x"})
    c["choices"][0].update(kw)
    return c


def _tool(**kw: Any) -> dict[str, Any]:
    tc: dict[str, Any] = {"index": 0, "id": "call_1", "type": "function"}
    tc["function"] = {"name": "f", "arguments": "{}"}
    tc.update(kw)
    return chunk({"tool_calls": [tc]})


def _usage(**kw: Any) -> dict[str, Any]:
    u = usage_chunk(10, 2)
    u["usage"].update(kw)
    return u


def _raw(obj: Any) -> bytes:
    return sse(obj)


# (id, the bad SSE event as bytes, expected error kind)
STREAM_CASES: list[tuple[str, bytes, str]] = [
    # content of the wrong type
    ("content-int", _raw(chunk({"content": 123})), MALFORMED),
    ("content-true", _raw(chunk({"content": True})), MALFORMED),
    ("content-object", _raw(chunk({"content": {"a": 1}})), MALFORMED),
    ("content-list", _raw(chunk({"content": ["a"]})), MALFORMED),
    ("content-zero", _raw(chunk({"content": 0})), MALFORMED),
    ("reasoning-int", _raw(chunk({"reasoning_content": 42})), MALFORMED),
    # choices
    ("choices-null-item", _raw({"choices": [None]}), MALFORMED),
    ("choices-int-item", _raw({"choices": [1]}), MALFORMED),
    ("choices-string", _raw({"choices": "x"}), MALFORMED),
    ("choices-object", _raw({"choices": {"0": {"delta": {"content": "a"}}}}), MALFORMED),
    ("choices-number", _raw({"choices": 5}), MALFORMED),
    ("choices-empty-object", _raw({"choices": {}}), MALFORMED),
    # delta
    ("delta-empty-list", _raw(_choice(delta=[])), MALFORMED),
    ("delta-string", _raw(_choice(delta="x")), MALFORMED),
    ("delta-list", _raw(_choice(delta=[{"content": "a"}])), MALFORMED),
    ("delta-missing-message-nested", _raw({"choices": [{"message": {"content": "a"}}]}), MALFORMED),
    # tool calls
    ("tool-calls-string", _raw(chunk({"tool_calls": "x"})), MALFORMED),
    ("tool-calls-null-item", _raw(chunk({"tool_calls": [None]})), MALFORMED),
    ("tool-calls-object", _raw(chunk({"tool_calls": {"index": 0}})), MALFORMED),
    ("tool-calls-zero", _raw(chunk({"tool_calls": 0})), MALFORMED),
    ("tool-index-string", _raw(_tool(index="0")), MALFORMED),
    ("tool-index-huge", _raw(_tool(index=1e30)), MALFORMED),
    ("tool-index-negative", _raw(_tool(index=-1)), MALFORMED),
    ("tool-id-int", _raw(_tool(id=7)), MALFORMED),
    ("tool-type-int", _raw(_tool(type=3)), MALFORMED),
    ("tool-function-string", _raw(_tool(function="f()")), MALFORMED),
    ("tool-name-int", _raw(_tool(function={"name": 5, "arguments": "{}"})), MALFORMED),
    # finish reason
    ("finish-reason-int", _raw(_choice(finish_reason=7)), MALFORMED),
    ("finish-reason-object", _raw(_choice(finish_reason={"type": "stop"})), MALFORMED),
    # usage
    ("usage-string", _raw({"choices": [], "usage": "x"}), MALFORMED),
    ("usage-list", _raw({"choices": [], "usage": []}), MALFORMED),
    ("usage-tokens-string", _raw(_usage(prompt_tokens="many")), MALFORMED),
    ("usage-tokens-negative", _raw(_usage(completion_tokens=-3)), MALFORMED),
    ("usage-tokens-float", _raw(_usage(prompt_tokens=1e300)), MALFORMED),
    ("usage-tokens-bool", _raw(_usage(prompt_tokens=True)), MALFORMED),
    (
        "usage-tokens-beyond-int64",
        b'data: {"choices":[],"usage":{"prompt_tokens":123456789012345678901234567890}}\n\n',
        MALFORMED,
    ),
    ("usage-details-string", _raw(_usage(prompt_tokens_details="x")), MALFORMED),
    ("usage-cached-string", _raw(_usage(prompt_tokens_details={"cached_tokens": "9"})), MALFORMED),
    ("usage-reasoning-list", _raw(_usage(completion_tokens_details=[])), MALFORMED),
    # not JSON, or not a JSON object
    ("not-json", b"data: hello world\n\n", MALFORMED),
    ("truncated-json", b'data: {"choices":[{"delta":{"content":"a"\n\n', MALFORMED),
    ("number-overflow", b'data: {"choices":[],"usage":{"prompt_tokens":1e400}}\n\n', MALFORMED),
    ("nested-too-deep", b"data: " + b"[" * 3000 + b"]" * 3000 + b"\n\n", MALFORMED),
    ("invalid-utf8", b'data: {"choices":[{"delta":{"content":"\xff\xfe"}}]}\n\n', MALFORMED),
    ("top-level-list", b"data: [1, 2, 3]\n\n", MALFORMED),
    ("top-level-number", b"data: 42\n\n", MALFORMED),
    ("top-level-string", b'data: "chunk"\n\n', MALFORMED),
    ("top-level-null", b"data: null\n\n", MALFORMED),
    ("garbage-bytes", b"data: \x00\x01\x02\x9c\n\n", MALFORMED),
    # error objects of odd shapes are still the server's error
    ("error-message-int", _raw({"error": {"message": 5, "code": "x"}}), "stream_error"),
    ("error-number", _raw({"error": 5}), "stream_error"),
    ("error-list", _raw({"error": ["boom"]}), "stream_error"),
]


def _stream(bad: bytes) -> Script:
    return Script(
        parts=[
            (0.0, sse(chunk({"role": "assistant", "content": ""}))),
            (0.0, sse(chunk({"content": "ok"}))),
            (0.0, bad),
            (0.0, sse(chunk({}, "stop"))),
            (0.0, sse(usage_chunk(10, 2))),
            (0.0, DONE),
        ]
    )


@pytest.fixture
async def server():
    async with ScriptedServer() as s:
        yield s


async def _call(server: ScriptedServer, script: Script, stream: bool = True):
    server.scripts["default"] = script
    seen: list[CallRecord] = []
    ep = EndpointConfig(
        base_url=server.base_url, model="m", retry=RetryPolicy(max_attempts=1), stream=stream
    )
    async with ChatClient(ep, on_record=seen.append) as c:
        res = await c.chat(MSGS)
    assert len(seen) == 1 and seen[0] is res.record
    # The record must survive the trip to calls.jsonl and back.
    assert CallRecord.from_dict(orjson.loads(res.record.to_json())) == res.record
    return res


def test_enough_shapes_enumerated() -> None:
    assert len(STREAM_CASES) >= 26
    assert len({c[0] for c in STREAM_CASES}) == len(STREAM_CASES)


@pytest.mark.parametrize(
    ("bad", "kind"), [c[1:] for c in STREAM_CASES], ids=[c[0] for c in STREAM_CASES]
)
async def test_bad_chunk_is_classified(server: ScriptedServer, bad: bytes, kind: str) -> None:
    res = await _call(server, _stream(bad))
    rec = res.record
    assert rec.status == "error", rec
    assert rec.error_kind == kind, rec
    assert rec.error_message
    # Every field of the record keeps its type, whatever the server sent.
    assert rec.finish_reason is None or isinstance(rec.finish_reason, str)
    for n in (rec.prompt_tokens, rec.completion_tokens, rec.cached_tokens, rec.reasoning_tokens):
        assert n is None or (type(n) is int and n >= 0)
    assert isinstance(res.content, str) and isinstance(res.reasoning, str)


async def test_control_stream_is_ok(server: ScriptedServer) -> None:
    # The same stream with a good chunk in the slot: proves the cases fail for the bad chunk.
    res = await _call(server, _stream(sse(chunk({"content": "!"}))))
    assert res.ok, res.record
    assert res.content == "ok!" and res.record.prompt_tokens == 10


async def test_choice_without_delta_is_tolerated(server: ScriptedServer) -> None:
    # Some services send choices with only annotations (content-filter results), no delta.
    note = {"choices": [{"index": 0, "finish_reason": None, "content_filter_results": {}}]}
    res = await _call(server, _stream(sse(note)))
    assert res.ok, res.record
    assert res.content == "ok"


async def test_tool_calls_empty_list_is_fine(server: ScriptedServer) -> None:
    # Some servers send `"tool_calls": []` in content deltas: not an error.
    res = await _call(server, _stream(sse(chunk({"content": "!", "tool_calls": []}))))
    assert res.ok, res.record


FULL_CASES: list[tuple[str, Any, str]] = [
    ("choices-null-item", {"choices": [None]}, MALFORMED),
    ("choices-string", {"choices": "x"}, MALFORMED),
    ("choices-empty", {"choices": []}, MALFORMED),
    ("message-string", {"choices": [{"message": "x"}]}, MALFORMED),
    ("message-missing", {"choices": [{"text": "x"}]}, MALFORMED),
    ("content-int", {"choices": [{"message": {"content": 5}}]}, MALFORMED),
    (
        "tool-calls-string",
        {"choices": [{"message": {"content": "a", "tool_calls": "x"}}]},
        MALFORMED,
    ),
    (
        "finish-reason-int",
        {"choices": [{"message": {"content": "a"}, "finish_reason": 1}]},
        MALFORMED,
    ),
    ("usage-string", {"choices": [{"message": {"content": "a"}}], "usage": "x"}, MALFORMED),
    (
        "usage-tokens-string",
        {"choices": [{"message": {"content": "a"}}], "usage": {"prompt_tokens": "many"}},
        MALFORMED,
    ),
    ("top-level-list", [1, 2], MALFORMED),
    ("error-message-int", {"error": {"message": 5}}, "stream_error"),
]


@pytest.mark.parametrize(
    ("body", "kind"), [c[1:] for c in FULL_CASES], ids=[c[0] for c in FULL_CASES]
)
async def test_bad_full_reply_is_classified(server: ScriptedServer, body: Any, kind: str) -> None:
    script = Script(parts=[(0.0, orjson.dumps(body))], content_type="application/json")
    res = await _call(server, script, stream=False)
    assert res.record.status == "error" and res.record.error_kind == kind, res.record


async def test_truncated_full_reply(server: ScriptedServer) -> None:
    script = Script(parts=[(0.0, b'{"choices": [{"mess')], content_type="application/json")
    res = await _call(server, script, stream=False)
    assert res.record.error_kind == MALFORMED
