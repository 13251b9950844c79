"""A read of whole single-line `data:` events takes the SSE parser's fast split; every other
read its general path. Whatever the read, the fold must come out as the general path's would."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentload.client.errors import CallError
from agentload.client.stream import Attempt, StreamReader, _NoDeadlines

_BLOCKS = [
    b'data: {"choices":[{"delta":{"content":"a"}}]}',
    b'data: {"choices":[{"delta":{"content":"b"},"finish_reason":"stop"}]}',
    b'data: {"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":2}}',
    b"data: [DONE]",
    b": keep-alive",
    b'event: message\ndata: {"choices":[{"delta":{"content":"e"}}]}',
    b'data: {"choices":[{"delta":\ndata: {"content":"m"}}]}',  # multi-line data
    b'data: {"choices":[{"delta":{"content":"i"}}]}\nid: 7',
    b'data: {"choices":[\n{"delta":{"content":"p"}}]}',  # a line without a field name
    b'data:{"choices":[{"delta":{"content":"n"}}]}',  # no space after the colon
    b"data: not json",
]


def _fold(reads: list[bytes]) -> tuple[Any, ...]:
    acc = Attempt(())
    reader = StreamReader(acc, _NoDeadlines())
    err = None
    try:
        for raw in reads:
            reader.http_body(raw, 5)
        reader.end()
    except CallError as e:
        err = (e.kind, e.message)
    # After an error, whether a later [DONE] of the same read was seen does not matter.
    saw_done = acc.saw_done if err is None else None
    return (acc.content, acc.finish_reason, acc.usage, acc.token_times, saw_done, err)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(_BLOCKS), min_size=1, max_size=6), st.booleans())
def test_whole_read_folds_as_the_full_parser(blocks: list[bytes], crlf: bool) -> None:
    text = b"".join(b + b"\n\n" for b in blocks)
    if crlf:
        text = text.replace(b"\n", b"\r\n")
    one_read = _fold([text])
    # One byte per read: no read is whole events, so the full parser takes every byte.
    byte_reads = _fold([text[i : i + 1] for i in range(len(text))])
    assert one_read == byte_reads


def test_done_before_more_events_still_ends_the_stream() -> None:
    reads = [b'data: [DONE]\n\ndata: {"choices":[{"delta":{"content":"late"}}]}\n\n']
    content, _, _, times, saw_done, err = _fold(reads)
    assert saw_done and err is None
    assert content == ["late"] and times == [5]


def test_a_stream_cut_mid_event_stays_on_the_typed_path(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_dicts(*_: Any) -> None:
        raise AssertionError("the dict path ran")

    monkeypatch.setattr(StreamReader, "_fold_dicts", no_dicts)
    text = b'data: {"choices":[{"delta":{"content":"a"}}]}\r\n\r\ndata: [DONE]\r\n\r\n'
    content, _, _, times, saw_done, err = _fold([text[:20], text[20:]])
    assert (content, times, saw_done, err) == (["a"], [5], True, None)
