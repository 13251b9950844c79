"""The proxy's meter scores a reply exactly as the client does: one parser, one accounting."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from agentload.client.client import CallResult, finish_call
from agentload.client.record import CallRecord
from agentload.client.stream import fold_stream
from agentload.client.tokens import HeuristicCounter
from agentload.proxy.meter import finish_record, parse_body, parse_stream


def _reads(*chunks: Any) -> list[bytes]:
    body = b"".join(b"data: " + orjson.dumps(c) + b"\n\n" for c in chunks) + b"data: [DONE]\n\n"
    return [body[:50], body[50:]]  # split mid-event


def _tool(frag: dict[str, Any]) -> dict[str, Any]:
    return {"choices": [{"delta": {"tool_calls": [frag]}}]}


def _client_record(reads: list[bytes]) -> CallRecord:
    acc, err = fold_stream(reads, [10, 20], ("sk-x",))
    rec = CallRecord(call_id="c1", start_ns=0, end_ns=30)
    finish_call(rec, CallResult(rec), acc, err, [], None, HeuristicCounter())
    return rec


def _meter_record(reads: list[bytes]) -> CallRecord:
    ans, failure = parse_stream(reads, [10, 20], ("sk-x",))
    rec = CallRecord(call_id="c1", start_ns=0, end_ns=30)
    finish_record(rec, ans, failure, [], None)
    return rec


@pytest.mark.parametrize(
    ("frag", "why"),
    [
        ({"index": 0, "id": 5, "function": {"name": "f"}}, "tool_calls[].id is not a string"),
        ({"index": 0, "type": 3}, "tool_calls[].type is not a string"),
        ({"index": 0, "function": {"name": 9}}, "tool_calls[].function.name is not a string"),
        ({"index": 0, "function": "f"}, "object has no attribute"),
        ({"index": "0"}, "tool_calls[].index is not a small integer"),
    ],
)
def test_malformed_tool_call_fragments_scored_alike(frag: dict[str, Any], why: str) -> None:
    reads = _reads({"choices": [{"delta": {"content": "a"}}]}, _tool(frag))
    client, meter = _client_record(reads), _meter_record(reads)
    assert client.error_kind == meter.error_kind == "malformed_stream"
    assert why in str(meter.error_message)
    assert meter.error_message == client.error_message
    assert meter.token_chunks == client.token_chunks == 1


def test_good_stream_same_record() -> None:
    reads = _reads(
        {"choices": [{"delta": {"content": "a"}}]},
        _tool({"index": 0, "id": "t1", "function": {"name": "f", "arguments": "{}"}}),
        {"choices": [{"delta": {}, "finish_reason": "tool_calls"}]},
        {"choices": [], "usage": {"prompt_tokens": 4, "completion_tokens": 2}},
    )
    client, meter = _client_record(reads), _meter_record(reads)
    assert meter.status == "ok" and meter.http_status == 200
    assert meter.num_tool_calls == 1 and meter.finish_reason == "tool_calls"
    assert (meter.prompt_tokens, meter.completion_tokens) == (4, 2)
    assert meter.itl == client.itl and meter.itl_hist == client.itl_hist
    assert meter.ttft_s == client.ttft_s == 10e-9


def test_non_streamed_body_stamps_its_arrival() -> None:
    body = orjson.dumps(
        {
            "choices": [{"message": {"content": "hi"}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 3, "completion_tokens": 1},
        }
    )
    ans, failure = parse_body(body, 25, ())
    rec = CallRecord(call_id="c1", start_ns=0, end_ns=30)
    finish_record(rec, ans, failure, [], None)
    assert rec.ok and rec.token_chunks == 1 and rec.first_token_ns == 25
    assert ans.message("c1") == {"role": "assistant", "content": "hi"}
