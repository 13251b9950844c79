"""The typed (msgspec) fold of a read against the dict fold it stands in for.

Every read goes first to the typed decoder; whatever it accepts must leave the accumulators,
the token times and any error exactly as the general dict path would have.
"""

from __future__ import annotations

from typing import Any

import msgspec
import orjson
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from agentload.client import stream
from agentload.client.errors import CallError
from agentload.client.stream import Attempt, StreamReader, _NoDeadlines

_MISSING = object()
_text = st.sampled_from(["hi", "", None, 7, ["x"], _MISSING])
_frag = st.fixed_dictionaries(
    {},
    optional={
        "index": st.sampled_from([0, 1, None, "0", -1]),
        "id": st.sampled_from(["call_a", None, 5]),
        "type": st.sampled_from(["function", None, 3]),
        "function": st.sampled_from(
            [{"name": "f", "arguments": '{"a"'}, {"arguments": "1}"}, {"arguments": {"k": 1}}, 4]
        ),
    },
)
_delta = st.one_of(
    st.fixed_dictionaries(
        {},
        optional={
            "content": _text,
            "reasoning_content": _text,
            "reasoning": _text,
            "tool_calls": st.one_of(st.lists(_frag, max_size=2), st.sampled_from(["x", None])),
            "role": st.just("assistant"),
        },
    ),
    st.sampled_from([None, "d", [], 0, _MISSING]),
)
_choice = st.one_of(
    st.fixed_dictionaries(
        {"delta": _delta},
        optional={
            "finish_reason": st.sampled_from(["stop", None, 0, 5, ""]),
            "message": st.sampled_from([{"content": "x"}, None]),
        },
    ),
    st.sampled_from([None, 1]),
)
_usage = st.sampled_from(
    [None, {"prompt_tokens": 3, "completion_tokens": 2}, {"prompt_tokens": "3"}, "u", _MISSING]
)
_chunk = st.one_of(
    st.fixed_dictionaries(
        {"choices": st.one_of(st.lists(_choice, max_size=2), st.sampled_from([None, "c"]))},
        optional={"usage": _usage, "error": st.sampled_from([{"message": "boom"}, "bad", None])},
    ),
    st.sampled_from([1, None, "s", []]),
)


def _strip(value: Any) -> Any:
    """Drop the keys whose value is _MISSING (absent rather than null)."""
    if isinstance(value, dict):
        return {k: _strip(v) for k, v in value.items() if v is not _MISSING}
    if isinstance(value, list):
        return [_strip(v) for v in value if v is not _MISSING]
    return value


def _fold(reads: list[bytes]) -> tuple[Any, ...]:
    acc = Attempt(("secret",))
    reader = StreamReader(acc, _NoDeadlines())
    err = None
    try:
        for i, raw in enumerate(reads):
            reader.http_body(raw, 1000 + i)
        reader.end()
    except CallError as e:
        err = (e.kind, e.message, e.http_status)
    return (
        acc.content,
        acc.reasoning,
        acc.tool_slots,
        acc.finish_reason,
        acc.usage,
        acc.counts,
        acc.token_times,
        acc.first_token_ns,
        err,
    )


def _sse(chunks: list[Any]) -> list[bytes]:
    events = [b"data: " + orjson.dumps(_strip(c)) + b"\n\n" for c in chunks]
    # Two reads: the first holds all but the last event, so both read shapes are covered.
    return [b"".join(events[:-1]), events[-1] + b"data: [DONE]\n\n"]


def _refuse(data: bytes) -> Any:
    raise msgspec.ValidationError("forced onto the dict path")


@settings(max_examples=400, deadline=None)
@given(st.lists(_chunk, min_size=1, max_size=4))
# content beside a malformed tool-call fragment: both paths keep the content's token time
@example([{"choices": [{"delta": {"content": "hi", "tool_calls": [{"id": 5}]}}]}])
def test_typed_fold_equals_dict_fold(chunks: list[Any]) -> None:
    reads = _sse(chunks)
    typed = _fold(reads)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(stream, "_typed", _refuse)
        dicts = _fold(reads)
    assert typed == dicts


def test_usual_stream_takes_the_typed_path(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_dicts(*_: Any) -> None:
        raise AssertionError("the dict path ran")

    monkeypatch.setattr(StreamReader, "_fold_dicts", no_dicts)
    chunks = [
        {"choices": [{"delta": {"role": "assistant", "content": ""}}]},
        {"choices": [{"delta": {"content": "Hel"}}]},
        {"choices": [{"delta": {"reasoning_content": "think"}}]},
        {
            "choices": [
                {
                    "delta": {
                        "tool_calls": [
                            {"index": 0, "id": "c1", "function": {"name": "f", "arguments": "{}"}}
                        ]
                    }
                }
            ]
        },
        {"choices": [{"delta": {}, "finish_reason": "tool_calls"}]},
        {"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 3}},
    ]
    content, reasoning, slots, finish, usage, counts, times, first, err = _fold(_sse(chunks))
    assert err is None
    assert (content, reasoning, finish) == (["Hel"], ["think"], "tool_calls")
    assert slots == {0: ["c1", None, "f", ["{}"]]}
    assert usage == {"prompt_tokens": 5, "completion_tokens": 3}
    assert counts == (5, 3, None, None)
    assert times == [1000, 1000, 1000] and first == 1000
