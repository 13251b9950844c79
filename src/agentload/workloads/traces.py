"""Public trace files for replay: ShareGPT-style conversations and Mooncake-style traces.

**ShareGPT** (the format of the ShareGPT_V3 dump that `vllm bench serve` and GuideLLM read): a
JSON array, or JSONL, of objects with `conversations: [{from, value}]` (`from` human / gpt /
system; `messages: [{role, content}]` is taken too) and an optional `id`. The array is streamed:
:func:`json_array_items` scans it in 1 MiB reads and hands out one element's bytes at a time,
so a 650 MB file is never in memory. Each conversation replays turn by turn like the others:
human messages are client turns, gpt messages their recorded answers. What real dumps hold and
a replay cannot send is skipped and counted (`Dataset.skipped`): empty conversations, answers
before the first human message, conversations without a human message. Consecutive gpt
messages are one answer.

**Mooncake** (the trace format of Mooncake's FAST'25 release, github.com/kvcache-ai/Mooncake,
`FAST25-release/traces/`): JSONL rows `{timestamp (ms), input_length, output_length, hash_ids}`
where `hash_ids` names the prompt's blocks of 512 tokens, and the same id means the same block
content. Each row becomes a one-call conversation whose prompt is the text of its blocks (the
same text for the same id, :class:`BlockText`), cut to `input_length`, with `max_tokens =
output_length`, sent at its timestamp (replay.py). Prompts are built when they are sent, never
kept: the index holds one small span per row.
"""

from __future__ import annotations

import itertools
import math
import random
import re
from collections import OrderedDict
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

import orjson

from agentload.client.tokens import HeuristicCounter, TokenCounter, message_text
from agentload.workloads.conversation import (
    TRACE_FORMATS,
    ClientTurn,
    Conversation,
    Dataset,
    DatasetError,
    Span,
    json_line,
    line_error,
    printable_id,
    read_lines,
    value_dist,
)

BLOCK_TOKENS = 512  # Mooncake's block size
CHUNK = 1 << 20
CACHED_BLOCKS = 8192  # block texts kept (512 tokens ≈ 2 KB each)


class TokenizerError(DatasetError):
    """A tokenizer.json that cannot build exact prompt blocks."""


USER_FROM = frozenset({"human", "user"})
ASSISTANT_FROM = frozenset({"gpt", "assistant", "chatgpt", "bard", "bing", "model"})


# ---- a streamed top-level JSON array --------------------------------------------------------

# A whole string (escapes included), a bracket, or a lone quote: the start of a string that
# goes on past the bytes read so far.
_TOKEN = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{}"]', re.S)
_SEPARATOR = re.compile(rb"\s*,\s*")


def json_array_items(path: Path, f: BinaryIO) -> Iterator[tuple[int, int, int, bytes]]:
    """(line, start offset, end offset, bytes) of each element of the file's top-level JSON
    array, read in CHUNK pieces: memory is bounded by the largest element plus one chunk.
    Elements are not parsed here; what lies between them (commas) is checked."""
    buf = f.read(CHUNK)
    base = 0  # file offset of buf[0]
    line = 1  # line number at offset `counted`
    counted = 0  # offset into buf up to which newlines are counted
    bom = 3 if buf.startswith(b"\xef\xbb\xbf") else 0
    pos = bom + len(buf[bom:]) - len(buf[bom:].lstrip())
    if buf[pos : pos + 1] != b"[":
        raise line_error(path, 1, None, "expected a JSON array of conversations")
    pos += 1
    depth = 1
    start: int | None = None  # offset in buf of the element being read
    after = pos  # end of the last element (or of the `[`)
    first = True
    eof = False
    while True:
        m = _TOKEN.search(buf, pos)
        if m is None or (m.group() == b'"' and not eof):
            if eof:
                where = line + buf.count(b"\n", counted, len(buf))
                raise line_error(path, where, None, "the JSON array ends early (unterminated)")
            keep = start if start is not None else after
            line += buf.count(b"\n", counted, keep)
            chunk = f.read(CHUNK)
            eof = not chunk
            base += keep
            pos -= keep
            after -= keep
            if start is not None:
                start -= keep
            buf = buf[keep:] + chunk
            counted = 0
            continue
        tok = m.group()[:1]
        if tok == b'"' and len(m.group()) == 1:
            where = line + buf.count(b"\n", counted, m.start())
            raise line_error(path, where, None, "unterminated string")
        if depth == 1:
            where = line + buf.count(b"\n", counted, after)
            _between(path, where, buf[after : m.start()], tok, first)
            if tok == b"]":
                rest = buf[m.end() :].strip() + (b"" if eof else f.read(CHUNK).strip())
                if rest:
                    where = line + buf.count(b"\n", counted, m.end())
                    raise line_error(path, where, None, "data after the end of the JSON array")
                return
            start = m.start()
            line += buf.count(b"\n", counted, start)
            counted = start
            first = False
        if tok in (b"{", b"["):
            depth += 1
        elif tok in (b"}", b"]"):
            depth -= 1
            if depth == 1 and start is not None:
                yield line, base + start, base + m.end(), buf[start : m.end()]
                after = m.end()
                start = None
        pos = m.end()


def first_array_item(path: Path, f: BinaryIO) -> dict[str, Any] | None:
    """The first element of the file's JSON array, if it is an object that reads."""
    try:
        for _, _, _, data in json_array_items(path, f):
            obj = orjson.loads(data)
            return obj if isinstance(obj, dict) else None
    except (DatasetError, orjson.JSONDecodeError):
        pass
    return None


def _between(path: Path, line: int, gap: bytes, tok: bytes, first: bool) -> None:
    """Checks what lies between two elements (`line`: where it starts) and what follows:
    one comma, none before the first element or before the closing `]`, then an object."""
    # Before `]` or the first element nothing may stand (a trailing comma, a stray value).
    ok = not gap.strip() if tok == b"]" or first else bool(_SEPARATOR.fullmatch(gap))
    if not ok:
        text = gap.strip()[:40].decode("utf-8", "replace")
        raise line_error(path, line, None, f"expected ',' between conversations, found {text!r}")
    if tok not in (b"{", b"]"):
        line += gap.count(b"\n")
        raise line_error(path, line, None, "expected a conversation object")


def _records(path: Path, f: BinaryIO) -> Iterator[tuple[int, int, int, bytes]]:
    """(line, start, end, bytes) of each record: array elements, or JSONL lines."""
    head = f.read(4096)
    f.seek(0)
    if head.lstrip(b"\xef\xbb\xbf \t\r\n")[:1] == b"[":
        yield from json_array_items(path, f)
    else:
        yield from ((n, s, e, t) for n, s, e, t in read_lines(f))


def _object(path: Path, line: int, data: bytes) -> dict[str, Any]:
    """One record; a multi-line array element is parsed whole (JSONL lines by _json)."""
    if b"\n" not in data:
        return json_line(path, line, data)
    try:
        obj = orjson.loads(data)
    except orjson.JSONDecodeError as e:
        where = line + data.count(b"\n", 0, e.pos)
        raise line_error(path, where, None, f"not valid JSON ({e})") from None
    if not isinstance(obj, dict):
        raise line_error(path, line, None, "expected a conversation object")
    return obj


# ---- ShareGPT --------------------------------------------------------------------------------


def sharegpt_conversation(
    path: Path, line: int, obj: dict[str, Any], cid: str, counter: TokenCounter
) -> tuple[Conversation | None, str | None]:
    """(conversation, None), or (None, why it is skipped) for what a replay cannot send."""
    key = "conversations" if "conversations" in obj else "messages"
    msgs = obj.get(key)
    if msgs is None:
        raise line_error(path, line, "conversations", "missing (a list of {from, value} messages)")
    if not isinstance(msgs, list):
        raise line_error(path, line, key, f"expected a list of messages, got {type(msgs).__name__}")
    conv = Conversation(cid, line=line)
    dropped = 0
    for i, m in enumerate(msgs):
        f = f"{key}[{i}]"
        who_key, who, text = _sharegpt_message(path, line, f, m)
        if who == "system":
            if i != 0:
                raise line_error(path, line, f"{f}.{who_key}", "a system message comes first only")
            conv.system = text
        elif who in USER_FROM:
            msg = {"role": "user", "content": text}
            t = conv.turns[-1] if conv.turns else None
            if t is not None and t.answer is None:
                t.messages.append(msg)  # consecutive human messages: one client turn
            else:
                conv.turns.append(ClientTurn(len(conv.turns), i, line, [msg]))
        elif who in ASSISTANT_FROM:
            if not conv.turns:
                dropped += 1  # an answer to a question the dump left out
                continue
            t = conv.turns[-1]
            if t.answer is not None:  # consecutive answers: one answer
                text = f"{t.answer['content']}\n{text}"
            t.answer = {"role": "assistant", "content": text}
            t.answer_tokens = max(1, counter.count(message_text(t.answer)))
        else:
            raise line_error(
                path,
                line,
                f"{f}.{who_key}",
                f"expected human, gpt or system (or user / assistant), got {who!r}",
            )
    if not msgs:
        return None, "empty"
    if not conv.turns:
        return None, "no_human_message"
    if dropped:
        return conv, "leading_answers_dropped"
    return conv, None


def _sharegpt_message(path: Path, line: int, f: str, m: Any) -> tuple[str, Any, str]:
    """(the sender's key, the sender, the text) of one message, checked."""
    if not isinstance(m, dict):
        raise line_error(path, line, f, "expected a message object")
    who_key = "from" if "from" in m else "role"
    text_key = "value" if "value" in m or (who_key == "from" and "content" not in m) else "content"
    text = m.get(text_key)
    if not isinstance(text, str):
        raise line_error(path, line, f"{f}.{text_key}", f"expected a string, got {text!r:.40}")
    return who_key, m.get(who_key), text


def _sharegpt_id(path: Path, line: int, obj: dict[str, Any], k: int) -> str:
    for key in ("id", "conversation_id"):
        if obj.get(key) is not None:
            return printable_id(path, line, key, obj[key])
    return f"item-{k}"


def iter_sharegpt(
    path: Path, f: BinaryIO, counter: TokenCounter, skipped: dict[str, int] | None = None
) -> Iterator[tuple[Conversation, int, int]]:
    """(conversation, start, end) of each replayable conversation, ids made unique (a
    repeated id gets `#2`, `#3`, … and is counted as `duplicate_ids`)."""
    skipped = {} if skipped is None else skipped
    seen: dict[str, int] = {}
    for k, (line, start, end, data) in enumerate(_records(path, f)):
        obj = _object(path, line, data)
        cid = _sharegpt_id(path, line, obj, k)
        conv, why = sharegpt_conversation(path, line, obj, cid, counter)
        if why is not None:
            skipped[why] = skipped.get(why, 0) + 1
        if conv is None:
            continue
        n = seen.get(cid, 0) + 1
        seen[cid] = n
        if n > 1:
            skipped["duplicate_ids"] = skipped.get("duplicate_ids", 0) + 1
            conv.id = f"{cid}#{n}"
        yield conv, start, end


# ---- Mooncake --------------------------------------------------------------------------------

_CONSONANTS = "bcdfghjklmnprstvwz"
_VOWELS = "aeiou"
# Words of the estimated prompts: " " + consonant-vowel-consonant, four characters, which the
# heuristic counter and the simulator's tokenizer both count as one token.
_SYLLABLES = tuple(" " + a + b + c for a in _CONSONANTS for b in _VOWELS for c in _CONSONANTS)


class BlockText:
    """The text of each prompt block: `block_tokens` words drawn from a random generator
    seeded by the hash id, so the same id gives the same text in every prompt and run.

    Without a tokenizer the words are four-character syllables (one token each by the
    heuristic estimate and the simulator's tokenizer: `exact` is False). With a
    tokenizer.json, the words are whole-word tokens of its vocabulary that encode to one token
    with their leading space, and each block is checked to encode to exactly `block_tokens`
    tokens, so a prompt is `input_length` tokens (before the chat template's own tokens)."""

    def __init__(self, block_tokens: int = BLOCK_TOKENS, tokenizer: str | Path | None = None):
        self.block_tokens = block_tokens
        self.tokenizer = tokenizer
        self.exact = tokenizer is not None
        self._tok: Any = None
        self.words: tuple[str, ...] = _SYLLABLES
        self._cache: OrderedDict[int, list[str]] = OrderedDict()
        if tokenizer is not None:
            self._tok, self.words = _tokenizer_words(tokenizer)
            self.block(0)  # a tokenizer that merges across words fails here, not mid-run

    def block(self, hash_id: int) -> list[str]:
        words = self._cache.get(hash_id)
        if words is not None:
            self._cache.move_to_end(hash_id)
            return words
        # random.Random(int) and choices() give the same sequence on every CPython 3.
        words = random.Random(hash_id).choices(self.words, k=self.block_tokens)
        if self._tok is not None:
            n = len(self._tok.encode("".join(words), add_special_tokens=False).ids)
            if n != self.block_tokens:
                raise TokenizerError(
                    f"{self.tokenizer}: block {hash_id} encodes to {n} tokens, not "
                    f"{self.block_tokens}: this tokenizer merges across words"
                )
        self._cache[hash_id] = words
        if len(self._cache) > CACHED_BLOCKS:
            self._cache.popitem(last=False)
        return words

    def prompt(self, hash_ids: list[int], input_length: int) -> str:
        """The blocks' text, the last one cut so the prompt is `input_length` tokens."""
        parts = []
        left = input_length
        for h in hash_ids:
            words = self.block(h)
            parts.append("".join(words if left >= len(words) else words[:left]))
            left -= len(words)
            if left <= 0:
                break
        return "".join(parts)


def _tokenizer_words(path: str | Path) -> tuple[Any, tuple[str, ...]]:
    try:
        from tokenizers import Tokenizer

        tok = Tokenizer.from_file(str(path))
    except Exception as e:  # missing file, bad JSON, tokenizers not installed
        raise TokenizerError(f"{path}: cannot load the tokenizer ({e})") from None
    words = set()
    for piece in tok.get_vocab():
        w = piece.lstrip("Ġ▁ ")
        if 3 <= len(w) <= 8 and w.isascii() and w.isalpha() and w.islower():
            words.add(w)
    ok = tuple(
        " " + w
        for w in sorted(words)
        if len(tok.encode(" " + w, add_special_tokens=False).ids) == 1
    )
    if len(ok) < 64:
        raise TokenizerError(
            f"{path}: the tokenizer has {len(ok)} whole-word tokens (64 needed to build "
            "prompt blocks)"
        )
    return tok, ok[:: max(1, len(ok) // 4096)][:4096]  # spread over the alphabet


def _nonneg(path: Path, line: int, key: str, value: Any, *, integer: bool = True) -> Any:
    kinds = (int,) if integer else (int, float)
    if isinstance(value, bool) or not isinstance(value, kinds) or not value >= 0:
        what = "an integer" if integer else "a number"
        raise line_error(path, line, key, f"expected {what} >= 0, got {value!r}")
    return value


def mooncake_row(
    path: Path, line: int, obj: dict[str, Any], block_tokens: int
) -> tuple[float, int, int, list[int]]:
    """(timestamp ms, input_length, output_length, hash_ids) of one row, checked."""
    for key in ("timestamp", "input_length", "output_length", "hash_ids"):
        if key not in obj:
            raise line_error(path, line, key, "missing")
    ts = _nonneg(path, line, "timestamp", obj["timestamp"], integer=False)
    if not math.isfinite(ts):
        raise line_error(path, line, "timestamp", f"expected a finite number, got {ts!r}")
    n_in = _nonneg(path, line, "input_length", obj["input_length"])
    n_out = _nonneg(path, line, "output_length", obj["output_length"])
    if n_in < 1 or n_out < 1:
        key = "input_length" if n_in < 1 else "output_length"
        raise line_error(path, line, key, "expected at least 1 token")
    ids = obj["hash_ids"]
    if not isinstance(ids, list):
        raise line_error(path, line, "hash_ids", "expected a list of block ids (integers)")
    for i, h in enumerate(ids):
        _nonneg(path, line, f"hash_ids[{i}]", h)
    want = -(-n_in // block_tokens)
    if len(ids) != want:
        raise line_error(
            path,
            line,
            "hash_ids",
            f"{len(ids)} blocks, but input_length {n_in} needs {want} blocks of {block_tokens} "
            "tokens (is the block size --trace-block-tokens right?)",
        )
    return float(ts), n_in, n_out, ids


def mooncake_conversation(
    path: Path, line: int, obj: dict[str, Any], blocks: BlockText
) -> Conversation:
    _, n_in, n_out, ids = mooncake_row(path, line, obj, blocks.block_tokens)
    msg = {"role": "user", "content": blocks.prompt(ids, n_in)}
    turn = ClientTurn(0, 1, line, [msg], max_tokens=n_out, answer_tokens=n_out)
    return Conversation(f"line-{line}", turns=[turn], line=line)


def iter_mooncake(
    path: Path, f: BinaryIO, blocks: BlockText
) -> Iterator[tuple[Conversation, int, int]]:
    for n, start, end, text in read_lines(f):
        yield mooncake_conversation(path, n, json_line(path, n, text), blocks), start, end


# ---- the dataset's entry points --------------------------------------------------------------


def iterate(
    path: Path,
    f: BinaryIO,
    fmt: str,
    counter: TokenCounter,
    blocks: BlockText | None = None,
    skipped: dict[str, int] | None = None,
) -> Iterator[tuple[Conversation, int, int]]:
    if fmt == "sharegpt":
        return iter_sharegpt(path, f, counter, skipped)
    return iter_mooncake(path, f, blocks or BlockText())


def index(path: Path, fmt: str, keep_bytes: int, blocks: BlockText | None = None) -> Dataset:
    """Check every record and keep a span per conversation (see dataset.index_dataset)."""
    blocks = blocks or BlockText()
    spans: list[Span] = []
    skipped: dict[str, int] = {}
    n_turns = 0
    kept: dict[str, Conversation] | None = None
    try:
        with path.open("rb") as f:
            if fmt == "mooncake":
                # Rows are checked, not expanded: prompts are built when sent.
                for n, start, end, text in read_lines(f):
                    ts, *_ = mooncake_row(path, n, json_line(path, n, text), blocks.block_tokens)
                    spans.append(Span(f"line-{n}", start, end, n, turns=1, arrival_s=ts / 1e3))
                    n_turns += 1
            else:
                kept = {} if path.stat().st_size <= keep_bytes else None
                for conv, start, end in iter_sharegpt(path, f, HeuristicCounter(), skipped):
                    has_system = conv.system is not None
                    spans.append(Span(conv.id, start, end, conv.line, has_system, len(conv.turns)))
                    n_turns += len(conv.turns)
                    if kept is not None:
                        kept[conv.id] = conv
    except OSError as e:
        raise DatasetError(f"{path}: cannot read ({e.strerror})") from None
    if not spans:
        raise DatasetError(f"{path}: no conversations")
    ds = Dataset(path, fmt, spans, n_turns, reader=TRACES, blocks=blocks, skipped=skipped)
    if kept:
        ds.keep(kept)
    return ds


def read_span(ds: Dataset, span: Span, data: bytes) -> Conversation:
    """The conversation of one span (its bytes as read from the file)."""
    obj = _object(ds.path, span.line, data)
    if ds.format == "mooncake":
        blocks = ds.blocks if isinstance(ds.blocks, BlockText) else BlockText()
        return mooncake_conversation(ds.path, span.line, obj, blocks)
    cid = _sharegpt_id(ds.path, span.line, obj, 0)
    conv, _ = sharegpt_conversation(ds.path, span.line, obj, cid, HeuristicCounter())
    if conv is None:
        raise DatasetError(f"{ds.path.name}:{span.line}: conversation {span.id!r} vanished")
    conv.id = span.id
    return conv


def mooncake_stats(path: Path, block_tokens: int = BLOCK_TOKENS) -> dict[str, Any]:
    """Rows, their arrival times, lengths and block sharing, from the rows alone (no prompt
    is built). `reused_block_share`: the share of prompt blocks whose id came earlier in
    the file, what a prefix cache large enough for everything would hit."""
    ts: list[float] = []
    isl: list[float] = []
    osl: list[float] = []
    seen: set[int] = set()
    blocks = reused = 0
    try:
        with path.open("rb") as f:
            for n, _, _, text in read_lines(f):
                t, n_in, n_out, ids = mooncake_row(path, n, json_line(path, n, text), block_tokens)
                ts.append(t / 1e3)
                isl.append(n_in)
                osl.append(n_out)
                blocks += len(ids)
                for h in ids:
                    if h in seen:
                        reused += 1
                    else:
                        seen.add(h)
    except OSError as e:
        raise DatasetError(f"{path}: cannot read ({e.strerror})") from None
    if not ts:
        raise DatasetError(f"{path}: no conversations")
    order = sorted(ts)
    span_s = order[-1] - order[0]
    gaps = [b - a for a, b in itertools.pairwise(order)]
    n = len(ts)
    return {
        "path": path.name,
        "format": "mooncake",
        "conversations": n,
        "client_turns": n,
        "recorded_answers": 0,
        "tool_calls": 0,
        "parallel_tool_messages": 0,
        "answers_with_reasoning": 0,
        "turns_with_delay": 0,
        "system_prompts": 0,
        # The trace's own counts, in the tokens of the model it was recorded with.
        "tokens_estimated": False,
        "turns_per_conversation": value_dist([1.0] * n),
        "isl_tokens": value_dist(isl),
        "osl_tokens": value_dist(osl),
        "delay_s": value_dist([]),
        "trace": {
            "duration_s": span_s,
            "requests_per_s": (n - 1) / span_s if span_s > 0 else None,
            "interarrival_s": value_dist(gaps),
            "block_tokens": block_tokens,
            "blocks": blocks,
            "unique_blocks": len(seen),
            "reused_block_share": reused / blocks if blocks else 0.0,
            "in_file_order": ts == order,
        },
    }


class _TraceReader:
    """ShareGPT and Mooncake files: a span is one JSON record (an array item or a row)."""

    def read_span(self, ds: Dataset, span: Span, data: bytes) -> Conversation:
        return read_span(ds, span, data)

    def walk(self, ds: Dataset, f: BinaryIO) -> Iterator[Conversation]:
        blocks = ds.blocks if isinstance(ds.blocks, BlockText) else None
        for conv, _, _ in iterate(ds.path, f, ds.format, HeuristicCounter(), blocks):
            yield conv


TRACES = _TraceReader()


__all__ = [
    "BLOCK_TOKENS",
    "TRACE_FORMATS",
    "BlockText",
    "first_array_item",
    "index",
    "iter_sharegpt",
    "iterate",
    "json_array_items",
    "mooncake_stats",
    "read_span",
]
