"""A reply's bytes -> the accumulators of one attempt: streamed events and full bodies.

The streamed path runs once per socket read, inside the HTTP layer's `data_received` (or from
an aiohttp read loop): the read's events are split by the SSE parser and decoded by ONE
`msgspec` call (the events joined as a JSON array) into structs holding only the fields the
record needs, then folded into the accumulators with attribute reads. A read the typed decoder
refuses (a field of an unexpected type, an event that is not JSON) is decoded again into
dicts by orjson and folded by the general path, which accepts or names the bad chunk exactly
as before: the typed path is only ever a faster way to the same result. Every token-bearing
chunk stamps the read's arrival time; nothing else is kept per chunk.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, Protocol

import msgspec
import orjson

from agentload.client.errors import (
    SHAPE_ERRORS,
    CallError,
    raise_error_event,
    raw_excerpt,
    why,
)
from agentload.client.safety import BadShape, usage_counts
from agentload.client.sse import SSEParser

_loads = orjson.loads
_DONE = b"[DONE]"


class _Delta(msgspec.Struct, gc=False):
    content: str | None = None
    reasoning_content: str | None = None
    reasoning: str | None = None
    tool_calls: list[Any] | None = None


class _Choice(msgspec.Struct, gc=False):
    delta: _Delta | None = None
    finish_reason: str | None = None
    message: Any = msgspec.UNSET  # only its presence matters (a full message in a stream)


class _Chunk(msgspec.Struct, gc=False):
    choices: list[_Choice] | None = None
    usage: Any = None
    error: Any = msgspec.UNSET


_typed = msgspec.json.Decoder(list[_Chunk]).decode
_UNSET = msgspec.UNSET
# Invalid UTF-8 surfaces as UnicodeDecodeError (a ValueError), not as a DecodeError.
_TYPED_ERRORS = (msgspec.MsgspecError, ValueError)


class Deadlines(Protocol):
    """What the reader tells the attempt's watchdog (see watchdog.Watchdog)."""

    last_ns: int | None

    def first_token(self, now: int) -> None: ...


class Attempt:
    """Accumulators of one HTTP attempt (reset between retries)."""

    __slots__ = (
        "content",
        "counts",
        "finish_reason",
        "first_token_ns",
        "headers_ns",
        "reasoning",
        "saw_done",
        "secrets",
        "token_times",
        "tool_slots",
        "usage",
    )

    def __init__(self, secrets: tuple[str, ...] = ()) -> None:
        self.secrets = secrets  # redacted from every message built from the reply
        self.headers_ns: int | None = None
        self.first_token_ns: int | None = None
        self.token_times: list[int] = []
        self.content: list[str] = []
        self.reasoning: list[str] = []
        self.tool_slots: dict[int, list[Any]] = {}  # index -> [id, type, name, [arg pieces]]
        self.finish_reason: str | None = None
        self.usage: dict[str, Any] | None = None
        self.counts: tuple[int | None, ...] = (None, None, None, None)  # checked usage
        self.saw_done = False


class StreamReader:
    """Folds a streamed reply into an Attempt, one read at a time (`http_body`)."""

    __slots__ = ("acc", "dog", "parser")

    def __init__(self, acc: Attempt, dog: Deadlines) -> None:
        self.acc = acc
        self.dog = dog
        self.parser = SSEParser()

    def http_body(self, raw: bytes, now: int) -> None:
        dog = self.dog
        if dog.last_ns is not None:
            dog.last_ns = now
        parser = self.parser
        events = parser.feed(raw)
        if parser.errors:
            self._error_event(parser.errors[0])
        if events:
            if events[-1] == _DONE:  # where the end usually is: last event, last read
                self.acc.saw_done = True
                events.pop()
                if not events:
                    return
            self._fold(events, now)

    def end(self) -> None:
        """The reply ended: check it was complete."""
        for data in self.parser.flush():
            if data == _DONE:
                self.acc.saw_done = True
        if self.parser.errors:
            self._error_event(self.parser.errors[0])
        if not self.acc.saw_done:
            raise CallError("malformed_stream", "stream ended without [DONE]")

    def _error_event(self, data: bytes) -> None:
        """An SSE `event: error`: its `error` object, or its whole data, is the error."""
        try:
            obj: Any = _loads(data)
        except orjson.JSONDecodeError:
            obj = data.decode("utf-8", "replace") or "an SSE error event with no data"
        if isinstance(obj, dict) and "error" in obj:
            obj = obj["error"]
        raise_error_event(obj, self.acc.secrets)

    def _fold(self, events: list[bytes], now: int) -> None:
        """One read's events into the accumulators: all decoded by one call when it can."""
        try:
            chunks = _typed(b"[" + b",".join(events) + b"]")
        except _TYPED_ERRORS:
            chunks = None
        # An event holding several values ("{},{}") would add elements: then count them.
        if chunks is not None and len(chunks) == len(events):
            self._fold_typed(events, chunks, now)
            return
        if _DONE in events:  # the end of the stream not last (it is no JSON value)
            self.acc.saw_done = True
            events = [e for e in events if e != _DONE]
        if events:
            self._fold_dicts(events, now)

    def _fold_typed(self, events: list[bytes], chunks: list[_Chunk], now: int) -> None:
        """The usual read: every chunk decoded into structs of the expected field types."""
        acc = self.acc
        add_content = acc.content.append
        tokens = 0  # token-bearing chunks of this read, stamped once at the end
        obj = None
        try:
            for obj in chunks:
                choices = obj.choices
                if choices:
                    ch = choices[0]
                    delta = ch.delta
                    if delta is not None:
                        c = delta.content
                        if c:
                            add_content(c)
                            tokens += 1
                        if delta.reasoning_content or delta.reasoning or delta.tool_calls:
                            tokens += _rest_of_typed_delta(acc, delta, c)
                    elif ch.message is not _UNSET:
                        raise BadShape("a non-streamed message inside a stream")
                    if ch.finish_reason:
                        acc.finish_reason = ch.finish_reason
                elif obj.error is not _UNSET:
                    raise_error_event(obj.error, acc.secrets)
                u = obj.usage
                if u is not None:
                    acc.counts = usage_counts(u)
                    acc.usage = u
        except SHAPE_ERRORS as e:
            data = events[next(i for i, o in enumerate(chunks) if o is obj)]
            raise _wrong_shape(e, data, acc.secrets) from None
        finally:
            # Also when a chunk fails: the tokens before it were received.
            if tokens:
                self._stamp(now, tokens)

    def _stamp(self, now: int, chunks: int = 1) -> None:
        """`chunks` token-bearing chunks received at `now` (the first token's time too)."""
        acc = self.acc
        acc.token_times += [now] * chunks
        if acc.first_token_ns is None:
            acc.first_token_ns = now
            self.dog.first_token(now)

    def _fold_dicts(self, events: list[bytes], now: int) -> None:
        """Any read the typed decoder refused: dicts, checked field by field."""
        acc = self.acc
        secrets = acc.secrets
        objs: Any
        if len(events) == 1:
            objs = (_load_one(events[0], secrets),)
        else:
            objs = _decode_all(events) or _decode_each(events, secrets)
        for data, obj in zip(events, objs, strict=True):
            # Any chunk of the wrong shape (a number for a string, null for an object, a
            # list for a dict) fails inside this block with one of SHAPE_ERRORS; content and
            # reasoning pieces of the wrong type are caught when joined (client._collect).
            try:
                choices = obj.get("choices")
                if choices:
                    self._fold_choice(choices[0], now)
                elif choices is not None and choices.__class__ is not list:
                    raise BadShape("choices is not a list")
                elif "error" in obj:
                    raise_error_event(obj["error"], secrets)
                u = obj.get("usage")
                if u is not None:
                    # Checked on arrival: a later good chunk must not hide a bad one.
                    acc.counts = usage_counts(u)
                    acc.usage = u
            except SHAPE_ERRORS as e:
                raise _wrong_shape(e, data, secrets) from None

    def _fold_choice(self, ch: Any, now: int) -> None:
        """One event's first choice, checked field by field (raises one of SHAPE_ERRORS)."""
        acc = self.acc
        delta = ch.get("delta")
        if delta:
            c = delta.get("content")
            # Most events carry only "content": skip the other look-ups then.
            rest = len(delta) > 1 or not c
            if c:
                # stamped before the rest is checked, as on the typed path: the content came
                # even if a tool-call fragment beside it is malformed
                acc.content.append(c)
                self._stamp(now)
            if rest and _rest_of_delta(acc, delta, c) and not c:
                self._stamp(now)
        elif delta is None:
            # Choices without a delta occur (content-filter notes); a full `message` where
            # the delta belongs would lose the answer.
            if "message" in ch:
                raise BadShape("a non-streamed message inside a stream")
        elif delta.__class__ is not dict:
            raise BadShape("delta is not an object")
        fr = ch.get("finish_reason")
        if fr:
            if fr.__class__ is not str:
                raise BadShape("finish_reason is not a string")
            acc.finish_reason = fr


def _wrong_shape(e: Exception, data: bytes, secrets: Sequence[str]) -> CallError:
    return CallError(
        "malformed_stream", f"chunk of the wrong shape ({why(e)}): {raw_excerpt(data, secrets)}"
    )


def _load_one(data: bytes, secrets: tuple[str, ...]) -> Any:
    try:
        return _loads(data)
    except orjson.JSONDecodeError:
        raise CallError(
            "malformed_stream", f"bad JSON in stream: {raw_excerpt(data, secrets)}"
        ) from None


def _decode_each(events: list[bytes], secrets: tuple[str, ...]) -> Iterator[Any]:
    """Event by event, so that the chunks before a bad one are still taken."""
    for data in events:
        yield _load_one(data, secrets)


def _decode_all(events: list[bytes]) -> list[Any] | None:
    """A read's events decoded by one orjson call, or None if any is not one JSON value."""
    try:
        objs = _loads(b"[" + b",".join(events) + b"]")
    except orjson.JSONDecodeError:
        return None
    # An event holding a bare list of values ("1,2") would add elements: count them.
    return objs if len(objs) == len(events) else None


def _rest_of_delta(acc: Attempt, delta: dict[str, Any], c: Any) -> bool:
    """Reasoning and tool-call pieces of a delta; True if it carried a token."""
    if c is not None and c.__class__ is not str:
        raise BadShape("delta.content is not a string")
    tok = False
    r = delta.get("reasoning_content") or delta.get("reasoning")
    if r:
        acc.reasoning.append(r)
        tok = True
    tcs = delta.get("tool_calls")
    if tcs:
        merge_tool_calls(acc.tool_slots, tcs)
        tok = True
    elif tcs is not None and tcs.__class__ is not list:
        raise BadShape("delta.tool_calls is not a list")
    return tok


def _rest_of_typed_delta(acc: Attempt, delta: _Delta, c: str | None) -> int:
    """Reasoning and tool-call pieces of a typed delta; 1 if it carried a token that its
    content did not already count."""
    r = delta.reasoning_content or delta.reasoning
    if r:
        acc.reasoning.append(r)
    tcs = delta.tool_calls
    if tcs:
        merge_tool_calls(acc.tool_slots, tcs)
    return 0 if c else 1


def parse_full(raw: bytes, acc: Attempt) -> None:
    """A non-streamed reply's body into the accumulators."""
    try:
        obj = _loads(raw)
    except orjson.JSONDecodeError:
        raise CallError(
            "malformed_stream", f"bad JSON response: {raw_excerpt(raw, acc.secrets)}"
        ) from None
    if isinstance(obj, dict) and not obj.get("choices") and "error" in obj:
        raise_error_event(obj["error"], acc.secrets)
    try:
        choices = obj["choices"]
        if choices.__class__ is not list or not choices:
            raise BadShape("no choices")
        ch = choices[0]
        msg = ch["message"]
        if msg.__class__ is not dict:
            raise BadShape("message is not an object")
        c = msg.get("content")
        if c:
            acc.content.append(c)
        elif c is not None and c.__class__ is not str:
            raise BadShape("message.content is not a string")
        r = msg.get("reasoning_content") or msg.get("reasoning")
        if r:
            acc.reasoning.append(r)
        tcs = msg.get("tool_calls")
        if tcs:
            merge_tool_calls(acc.tool_slots, tcs)
        elif tcs is not None and tcs.__class__ is not list:
            raise BadShape("message.tool_calls is not a list")
        fr = ch.get("finish_reason")
        if fr is not None and fr.__class__ is not str:
            raise BadShape("finish_reason is not a string")
        acc.finish_reason = fr
        u = obj.get("usage")
        if u is not None:
            acc.counts = usage_counts(u)
            acc.usage = u
    except SHAPE_ERRORS as e:
        raise CallError(
            "malformed_stream",
            f"response of the wrong shape ({why(e)}): {raw_excerpt(raw, acc.secrets)}",
        ) from None
    acc.saw_done = True


def merge_tool_calls(slots: dict[int, list[Any]], fragments: list[dict[str, Any]]) -> None:
    # Called only for events that carry tool calls, so these type checks cost nothing on the
    # content path; a wrong type here would otherwise surface later, in the caller's code.
    for tc in fragments:
        idx = tc.get("index")
        tc_id = tc.get("id")
        if tc_id is not None and tc_id.__class__ is not str:
            raise BadShape("tool_calls[].id is not a string")
        if idx is None:
            # Servers that omit the index: a new id starts a new call, otherwise continue.
            last = max(slots) if slots else -1
            idx = last + 1 if last < 0 or (tc_id and tc_id != slots[last][0]) else last
        elif idx.__class__ is not int or not 0 <= idx < 1 << 16:
            raise BadShape(f"tool_calls[].index is not a small integer: {str(idx)[:40]!r}")
        slot = slots.get(idx)
        if slot is None:
            slot = slots[idx] = [None, None, "", []]
        if tc_id and not slot[0]:
            slot[0] = tc_id
        typ = tc.get("type")
        if typ is not None and typ.__class__ is not str:
            raise BadShape("tool_calls[].type is not a string")
        if typ and not slot[1]:
            slot[1] = typ
        fn = tc.get("function")
        if fn:
            name = fn.get("name")
            if name is not None and name.__class__ is not str:
                raise BadShape("tool_calls[].function.name is not a string")
            if name and not slot[2]:
                slot[2] = name
            args = fn.get("arguments")
            if args:
                slot[3].append(args if isinstance(args, str) else orjson.dumps(args).decode())
        elif fn is not None and fn.__class__ is not dict:
            raise BadShape("tool_calls[].function is not an object")


class _NoDeadlines:
    """Deadlines for a reply folded after the fact (the proxy's meter): nothing to enforce."""

    __slots__ = ("last_ns",)

    def __init__(self) -> None:
        self.last_ns: int | None = None

    def first_token(self, now: int) -> None:
        self.last_ns = now


def fold_stream(
    reads: Sequence[bytes], times: Sequence[int], secrets: Sequence[str] = ()
) -> tuple[Attempt, CallError | None]:
    """Already-received SSE reads (`reads[i]` arrived at `times[i]`) folded exactly as the
    client folds a live stream; on failure, the accumulators hold what came before it."""
    acc = Attempt(tuple(secrets))
    reader = StreamReader(acc, _NoDeadlines())
    try:
        for raw, now in zip(reads, times, strict=True):
            reader.http_body(raw, now)
        reader.end()
    except CallError as e:
        return acc, e
    return acc, None


def fold_body(raw: bytes, secrets: Sequence[str] = ()) -> tuple[Attempt, CallError | None]:
    """A non-streamed reply's body folded as the client folds it (see parse_full)."""
    acc = Attempt(tuple(secrets))
    try:
        parse_full(raw, acc)
    except CallError as e:
        return acc, e
    return acc, None


def assemble(acc: Attempt, call_id: str) -> tuple[str, str, list[dict[str, Any]]]:
    """Text, reasoning and tool calls of the accumulators; raises one of SHAPE_ERRORS when a
    piece has the wrong type (content 123), which the fold lets through to be caught here."""
    tool_calls = (
        [
            {
                "id": s[0] or f"call_{call_id}_{i}",
                "type": s[1] or "function",
                "function": {"name": s[2], "arguments": "".join(s[3])},
            }
            for i, s in sorted(acc.tool_slots.items())
        ]
        if acc.tool_slots
        else []
    )
    reasoning = "".join(acc.reasoning) if acc.reasoning else ""
    return "".join(acc.content), reasoning, tool_calls
