"""SSEParser gives the same events however a stream is cut into reads, on both of its paths
(the one-split fast path for reads of plain `data: ` events, and the line-by-line one)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from agentload.client.sse import SSEParser

_payload = st.text(
    alphabet=st.characters(blacklist_characters="\r\n", blacklist_categories=("Cs",)), max_size=12
).map(str.encode)


@st.composite
def events(draw: st.DrawFn) -> tuple[bytes, bytes | None]:
    """(wire bytes of one event with its blank line, the data it carries or None)."""
    nl = draw(st.sampled_from([b"\n", b"\r\n"]))
    kind = draw(st.sampled_from(["plain", "plain", "plain", "nospace", "multi", "comment"]))
    data = draw(_payload)
    if kind == "plain":
        return b"data: " + data + nl + nl, data
    if kind == "nospace":
        data = data.lstrip(b" ")
        return b"data:" + data + nl + nl, data
    if kind == "multi":
        more = draw(_payload)
        wire = b"event: x" + nl + b"data: " + data + nl + b"data: " + more + nl + nl
        return wire, data + b"\n" + more
    return b": keep-alive" + nl + nl, None


@settings(max_examples=300, deadline=None)
@given(st.lists(events(), max_size=12), st.lists(st.integers(0, 400), max_size=8))
def test_any_split_gives_the_same_events(evs: list[tuple[bytes, bytes | None]], cuts) -> None:
    wire = b"".join(w for w, _ in evs)
    expected = [d for _, d in evs if d is not None]
    points = sorted({min(c, len(wire)) for c in cuts})
    pieces = [wire[a:b] for a, b in zip([0, *points], [*points, len(wire)], strict=True)]
    p = SSEParser()
    got: list[bytes] = []
    for piece in pieces:
        got += p.feed(piece)
    got += p.flush()
    assert got == expected


def test_fast_path_keeps_an_incomplete_tail() -> None:
    p = SSEParser()
    assert p.feed(b"data: 1\n\ndata: 2\n\ndata: 3") == [b"1", b"2"]
    assert p.feed(b"\n\n") == [b"3"]
    assert p.feed(b"data:  two spaces\n\ndata: \n\n") == [b" two spaces", b""]
