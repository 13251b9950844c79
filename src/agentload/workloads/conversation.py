"""What every dataset format reads into: conversations of client turns, the index of where
each lies in its file (:class:`Dataset`), and the line-level checks every reader shares (each
error names file:line and the field).

Below the readers (agentload.workloads.dataset for MLPerf rows, trajectories and OpenAI
messages; agentload.workloads.traces for ShareGPT and Mooncake files): a Dataset reads a
conversation back through the reader that indexed it.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO, Protocol

import numpy as np
import orjson

TRACE_FORMATS = ("sharegpt", "mooncake")  # read by agentload.workloads.traces
CACHED_CONVERSATIONS = 4096
DIST_PERCENTILES = (50, 90, 99)


class SpanReader(Protocol):
    """How one family of formats reads a conversation back from its span, or walks the file."""

    def read_span(self, ds: Dataset, span: Span, data: bytes) -> Conversation: ...

    def walk(self, ds: Dataset, f: BinaryIO) -> Iterator[Conversation]: ...


class DatasetError(ValueError):
    """A dataset that cannot be replayed; the message names file:line and the field."""


@dataclass(slots=True)
class ClientTurn:
    """One call of a replayed conversation: the messages the client adds (a user message,
    or the tool results of the previous answer), then the recorded answer, if any."""

    index: int  # 0-based client turn index (the call's `turn`)
    row: int  # dataset turn number (MLPerf `turn`) of its first row, or message index
    line: int
    messages: list[dict[str, Any]]
    delay_s: float = 0.0
    max_tokens: int | None = None
    model: str | None = None
    stream: bool | None = None
    answer: dict[str, Any] | None = None
    answer_tokens: int | None = None  # recorded answer length, estimated


@dataclass(slots=True)
class Conversation:
    id: str
    system: str | None = None
    tools: list[dict[str, Any]] | None = None
    turns: list[ClientTurn] = field(default_factory=list)
    line: int = 0

    def prefix_messages(self) -> list[dict[str, Any]]:
        return [{"role": "system", "content": self.system}] if self.system is not None else []

    def messages(self) -> list[dict[str, Any]]:
        """The whole recorded conversation as OpenAI messages."""
        out = self.prefix_messages()
        for t in self.turns:
            out.extend(t.messages)
            if t.answer is not None:
                out.append(t.answer)
        return out


@dataclass(slots=True)
class Span:
    """Where one conversation is in the file, and what the index learnt about it."""

    id: str
    offset: int
    end: int
    line: int
    has_system: bool = False
    turns: int = 0
    has_tools: bool = False
    arrival_s: float | None = None  # a trace's recorded send time (Mooncake's timestamp)


@dataclass
class Dataset:
    path: Path
    format: str
    spans: list[Span]
    client_turns: int = 0
    reader: SpanReader | None = None  # how its format reads; None: the format's module's
    blocks: Any = None  # traces.BlockText of a Mooncake trace: how its prompts are built
    skipped: dict[str, int] = field(default_factory=dict)  # records a replay cannot send

    @property
    def ids(self) -> list[str]:
        return [s.id for s in self.spans]

    def span(self, cid: str) -> Span:
        return self._by_id[cid]

    def __post_init__(self) -> None:
        self._by_id = {s.id: s for s in self.spans}
        self._cache: dict[str, Conversation] = {}
        self._kept: dict[str, Conversation] = {}

    def keep(self, convs: dict[str, Conversation]) -> None:
        """Hold these conversations for good (a small dataset is parsed once, at index)."""
        self._kept = convs

    def load(self, cid: str) -> Conversation:
        """One conversation, parsed from its span; the most recent ones are kept (replays
        never change a Conversation), so repeats do not parse again."""
        conv = self._kept.get(cid) or self._cache.get(cid)
        if conv is None:
            conv = self._read(cid)
            if self.format == "mooncake":
                return conv  # a built prompt is cheap to build again, and large to keep
            if len(self._cache) >= CACHED_CONVERSATIONS:
                self._cache.pop(next(iter(self._cache)))
            self._cache[cid] = conv
        return conv

    def _read(self, cid: str) -> Conversation:
        s = self._by_id[cid]
        with self.path.open("rb") as fh:
            fh.seek(s.offset)
            data = fh.read(s.end - s.offset)
        return self._reader().read_span(self, s, data)

    def _reader(self) -> SpanReader:
        if self.reader is None:
            raise DatasetError(f"{self.path}: no reader for format {self.format!r}")
        return self.reader

    def __iter__(self) -> Iterator[Conversation]:
        with self.path.open("rb") as f:
            yield from self._reader().walk(self, f)


# ---- checks every reader shares ---------------------------------------------------------------


def where(path: Path, line: int) -> str:
    return f"{path.name}:{line}"


def line_error(path: Path, line: int, field_name: str | None, msg: str) -> DatasetError:
    at = where(path, line)
    return DatasetError(f"{at}: field '{field_name}': {msg}" if field_name else f"{at}: {msg}")


def read_lines(f: BinaryIO, first_line: int = 1) -> Iterator[tuple[int, int, int, bytes]]:
    """(line number, start offset, end offset, stripped bytes) of every non-blank line."""
    offset = f.tell()
    for n, raw in enumerate(f, start=first_line):
        start = offset
        offset += len(raw)
        text = raw.strip()
        if text:
            yield n, start, offset, text


_NOT_JSONL = (
    "not JSONL: {what}; a dataset holds one JSON object per line (`jq -c '.[]'` writes an "
    "array that way)"
)


def json_line(path: Path, line: int, text: bytes) -> dict[str, Any]:
    try:
        obj = orjson.loads(text)
    except orjson.JSONDecodeError as e:
        if text in (b"{", b"[") or (text[:1] in b"{[" and text.rstrip(b",")[-1:] in b"{[:"):
            # The first line of a value that goes on over the next lines.
            what = "a JSON value spread over several lines (pretty-printed JSON?)"
            raise line_error(path, line, None, _NOT_JSONL.format(what=what)) from None
        raise line_error(path, line, None, f"not valid JSON ({e})") from None
    if isinstance(obj, list):
        raise line_error(path, line, None, _NOT_JSONL.format(what="a JSON array on one line"))
    if not isinstance(obj, dict):
        raise line_error(path, line, None, "expected a JSON object per line")
    return obj


def printable_id(path: Path, line: int, name: str, value: Any) -> str:
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise line_error(path, line, name, f"expected a string id, got {type(value).__name__}")
    text = str(value)
    if not text or not text.isprintable():
        raise line_error(path, line, name, f"id {text!r} is empty or not printable")
    return text


def value_dist(values: list[float]) -> dict[str, Any]:
    if not values:
        return {"count": 0}
    arr = np.asarray(values, dtype=float)
    out: dict[str, Any] = {
        "count": int(arr.size),
        "mean": float(arr.mean()),
        "min": float(arr.min()),
        "max": float(arr.max()),
    }
    for p in DIST_PERCENTILES:
        out[f"p{p}"] = float(np.percentile(arr, p))
    return out
