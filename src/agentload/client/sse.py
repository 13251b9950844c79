"""Incremental Server-Sent Events parser for OpenAI-style streams.

Written here rather than taken from a library because the client needs three things at once
that the common SSE packages do not give together: bytes in at arbitrary boundaries, no limit
on line length (a 1 MB `data:` line must parse), and near-zero work per event on the hot path
(one `in` test and one slice for the usual single-line `data:` event).
"""

from __future__ import annotations

_NL = b"\n"
_CR = b"\r"
_BLANK = b"\n\n"
_DATA = b"data: "
_NEXT_DATA = b"\n\ndata: "


class SSEParser:
    """Feed raw bytes, get back the `data` payloads of completed events, in order.

    Handles `\\n`, `\\r\\n` and `\\r` line endings (also when split between two feeds),
    comment lines (`: keep-alive`), multi-line `data:` fields (joined with `\\n`), and
    ignores `event:`, `id:` and `retry:` fields except that `event:` names are kept for the
    caller via :attr:`last_event`. The data of an `event: error` is not returned with the
    rest but collected in :attr:`errors`: it is the server's error, not a chunk.
    """

    __slots__ = ("_cr", "_pending", "errors", "last_event")

    def __init__(self) -> None:
        self._pending: list[bytes] = []
        self._cr = False
        self.last_event: bytes | None = None
        self.errors: list[bytes] = []

    def feed(self, chunk: bytes) -> list[bytes]:
        if self._cr or _CR in chunk:
            chunk = self._lf_only(chunk)
        if _NL not in chunk:
            # Only part of a line: stash it without scanning the whole buffer again, so a
            # multi-megabyte line costs O(n) in all.
            if chunk:
                self._pending.append(chunk)
            return []
        if self._pending:
            self._pending.append(chunk)
            buf = b"".join(self._pending)
            self._pending.clear()
        else:
            buf = chunk
        if _BLANK not in buf:
            self._pending.append(buf)
            return []
        end = buf.rindex(_BLANK) + 2
        done = buf[:end] if end < len(buf) else buf
        # The usual read: nothing but single-line `data: ` events. Split them all in C; it
        # was that shape if no newline is left inside an event (else a comment, another
        # field or a multi-line `data:` is among them: the general path below decides).
        if done.startswith(_DATA):
            events = done[6:-2].split(_NEXT_DATA)
            if _NL not in b"".join(events):
                if end < len(buf):
                    self._pending.append(buf[end:])
                return events
        return self._split_blocks(buf)

    def _lf_only(self, chunk: bytes) -> bytes:
        """CR LF and lone CR line ends as LF (a CR at the end waits for the next read)."""
        if self._cr:
            chunk = _CR + chunk
            self._cr = False
        if _CR in chunk:
            if chunk.endswith(_CR):
                # The matching \n may arrive in the next read; decide then.
                chunk = chunk[:-1]
                self._cr = True
            chunk = chunk.replace(b"\r\n", _NL).replace(_CR, _NL)
        return chunk

    def _split_blocks(self, buf: bytes) -> list[bytes]:
        """The general path: events of any shape (comments, other fields, multi-line data)."""
        blocks = buf.split(_BLANK)
        tail = blocks.pop()
        if tail:
            self._pending.append(tail)
        out: list[bytes] = []
        for block in blocks:
            if block.startswith(b"data:") and _NL not in block:
                out.append(block[6:] if block[5:6] == b" " else block[5:])
            elif block:
                data = self._parse_block(block)
                if data is not None:
                    out.append(data)
        return out

    def _parse_block(self, block: bytes) -> bytes | None:
        data: list[bytes] = []
        event = None
        for line in block.split(_NL):
            if not line or line.startswith(b":"):
                continue
            name, _, value = line.partition(b":")
            if value.startswith(b" "):
                value = value[1:]
            if name == b"data":
                data.append(value)
            elif name == b"event":
                self.last_event = event = value
        if event == b"error":
            self.errors.append(_NL.join(data))
            return None
        if not data:
            return None
        return _NL.join(data)

    def flush(self) -> list[bytes]:
        """Events left when the stream ends without a final blank line."""
        self._cr = False
        if not self._pending:
            return []
        buf = b"".join(self._pending).strip(_NL)
        self._pending.clear()
        if not buf:
            return []
        return [d for b in buf.split(_BLANK) if (d := self._parse_block(b)) is not None]

    @property
    def buffered(self) -> int:
        """Bytes held for an incomplete event."""
        return sum(len(p) for p in self._pending)
