"""The proxy's HTTP/1.1 chunked decoder, fed at every possible split."""

from __future__ import annotations

import pytest

from agentload.proxy.upstream import _Chunked

BODY = [b'data: {"a": 1}\n\n', b"x" * 300, b"data: [DONE]\n\n"]
WIRE = b"".join(f"{len(p):x}\r\n".encode() + p + b"\r\n" for p in BODY) + b"0\r\n\r\n"


@pytest.mark.parametrize("extension", [b"", b";name=value"])
def test_chunked_decodes_across_any_split(extension: bytes) -> None:
    wire = WIRE.replace(b"12c\r\n", b"12c" + extension + b"\r\n")
    for cut in range(len(wire) + 1):
        d = _Chunked()
        got = d.feed(wire[:cut])
        assert not d.done or cut == len(wire)
        got += d.feed(wire[cut:])
        assert got == b"".join(BODY) and d.done, cut


def test_chunked_byte_by_byte_with_trailers() -> None:
    d = _Chunked()
    wire = WIRE[:-2] + b"X-Trailer: 1\r\n\r\n"
    out = b"".join(d.feed(wire[i : i + 1]) for i in range(len(wire)))
    assert out == b"".join(BODY) and d.done and d.buf == b""


def test_chunked_rejects_bad_framing() -> None:
    with pytest.raises(ValueError):
        _Chunked().feed(b"3\r\nabcXY")
    with pytest.raises(ValueError):
        _Chunked().feed(b"zz\r\n")
