"""SSE parsing at every byte boundary, and message normalisation."""

from __future__ import annotations

import copy

import orjson

from agentload.client import SSEParser, normalize_messages

EVENTS = [
    orjson.dumps({"choices": [{"delta": {"content": "héllo 世界 🚀"}}]}),
    orjson.dumps(
        {
            "choices": [
                {
                    "delta": {
                        "tool_calls": [{"index": 0, "function": {"arguments": '{"q": "naïve"}'}}]
                    }
                }
            ]
        }
    ),
    b"[DONE]",
]


def _stream(sep: bytes) -> bytes:
    return b"".join(b"data: " + e + sep + sep for e in EVENTS)


def test_every_two_way_split_lf_and_crlf() -> None:
    for sep in (b"\n", b"\r\n", b"\r"):
        data = _stream(sep)
        for cut in range(len(data) + 1):
            p = SSEParser()
            out = p.feed(data[:cut]) + p.feed(data[cut:]) + p.flush()
            assert out == EVENTS, (sep, cut)


def test_byte_at_a_time() -> None:
    data = b": comment\n\n" + _stream(b"\r\n")
    p = SSEParser()
    out: list[bytes] = []
    for i in range(len(data)):
        out += p.feed(data[i : i + 1])
    assert out == EVENTS
    assert p.buffered == 0


def test_multiline_data_event_field_and_no_space() -> None:
    p = SSEParser()
    out = p.feed(b'event: delta\ndata:{"a":\ndata: 1}\nid: 7\n\n')
    assert out == [b'{"a":\n1}']
    assert p.last_event == b"delta"
    # An error event is the server's error: kept apart, not returned as a chunk.
    assert p.feed(b'event: error\ndata: {"m":\ndata: 1}\n\ndata: x\n\n') == [b"x"]
    assert p.errors == [b'{"m":\n1}']


def test_unterminated_last_event_is_flushed() -> None:
    p = SSEParser()
    assert p.feed(b"data: [DONE]") == []
    assert p.flush() == [b"[DONE]"]


def test_long_line_linear() -> None:
    p = SSEParser()
    payload = b"x" * 5_000_000
    data = b"data: " + payload + b"\n\n"
    out: list[bytes] = []
    for i in range(0, len(data), 4096):
        out += p.feed(data[i : i + 4096])
    assert out == [payload]


def test_normalize_returns_copies() -> None:
    history = [
        {"role": "system", "content": [{"type": "text", "text": "be brief"}]},
        {"role": "user", "content": {"type": "text", "text": "hi"}},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "a",
                    "type": "function",
                    "function": {"name": "f", "arguments": '{"x": [1, 2]}'},
                },
                {"id": "b", "type": "function", "function": {"name": "g", "arguments": "not json"}},
            ],
        },
        {
            "role": "tool",
            "tool_call_id": "a",
            "content": [{"type": "text", "text": "r1"}, {"type": "text", "text": "r2"}],
        },
    ]
    before = copy.deepcopy(history)
    out = normalize_messages(history, parse_tool_arguments=True)
    assert history == before  # caller's history untouched
    assert out[0]["content"] == "be brief"
    assert out[1]["content"] == "hi"
    assert out[2]["content"] is None
    assert out[2]["tool_calls"][0]["function"]["arguments"] == {"x": [1, 2]}
    assert out[2]["tool_calls"][1]["function"]["arguments"] == "not json"
    assert out[3]["content"] == "r1\nr2"
    out[2]["tool_calls"][0]["function"]["name"] = "changed"
    assert history[2]["tool_calls"][0]["function"]["name"] == "f"
    # Without argument parsing the strings are kept.
    plain = normalize_messages(history)
    assert plain[2]["tool_calls"][0]["function"]["arguments"] == '{"x": [1, 2]}'
