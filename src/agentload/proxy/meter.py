"""The proxy's own measurement of a passed-through reply.

On the forwarding path the proxy only keeps each upstream chunk and its arrival time (two list
appends); everything else — SSE parsing, JSON decoding, assembling the answer, the CallRecord —
happens here, after the last byte has been written to the caller. The figures follow the
definitions agentload's client uses (docs/metrics.md): TTFT is the arrival of the first chunk
that carries a token of any kind (content, reasoning or a tool-call fragment), ITL the gaps
between such chunks, token counts the server's usage (estimated, and marked so, when absent).

Built only on public pieces (`client.sse`, `client.record`, `client.safety`, `client.tokens`,
`client.itlhist`, `client.errors`), so the client's hot path can change without touching the proxy.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from agentload.client import itl_summary, itlhist
from agentload.client.errors import (
    OVERFLOW_RE,
    SHAPE_ERRORS,
    classify_http_error,
    error_text,
    excerpt,
)
from agentload.client.record import CallRecord
from agentload.client.safety import BadShape, usage_counts
from agentload.client.sse import SSEParser
from agentload.client.tokens import HeuristicCounter, count_prompt_tokens

_DONE = b"[DONE]"
_COUNTER = HeuristicCounter()


class Failure(Exception):
    """Why a proxied call counts as failed: an error kind of the taxonomy (record.ERROR_KINDS)."""

    def __init__(self, kind: str, message: str = "", http_status: int | None = None) -> None:
        super().__init__(message or kind)
        self.kind = kind
        self.message = message
        self.http_status = http_status


@dataclass(slots=True)
class Answer:
    """What one reply said, assembled from its chunks."""

    content: list[str] = field(default_factory=list)
    reasoning: list[str] = field(default_factory=list)
    tool_slots: dict[int, list[Any]] = field(
        default_factory=dict
    )  # index -> [id, type, name, args]
    finish_reason: str | None = None
    usage: dict[str, Any] | None = None
    token_times: list[int] = field(default_factory=list)
    saw_done: bool = False

    def message(self, call_id: str) -> dict[str, Any]:
        """The assistant message, as the trajectory keeps it."""
        msg: dict[str, Any] = {"role": "assistant", "content": "".join(self.content) or None}
        calls = self.tool_calls(call_id)
        if calls:
            msg["tool_calls"] = calls
        return msg

    def tool_calls(self, call_id: str) -> list[dict[str, Any]]:
        return [
            {
                "id": s[0] or f"call_{call_id}_{i}",
                "type": s[1] or "function",
                "function": {"name": s[2], "arguments": "".join(s[3])},
            }
            for i, s in sorted(self.tool_slots.items())
        ]


def http_failure(status: int, body: bytes, secrets: Sequence[str]) -> Failure:
    """The failure an HTTP error reply stands for (`http_<status>` or `context_overflow`)."""
    e = classify_http_error(status, body, secrets)
    return Failure(e.kind, e.message, e.http_status)


def _error_event(err: Any, secrets: Sequence[str]) -> Failure:
    msg = error_text(err)
    code = err.get("code") if isinstance(err, dict) else None
    kind = "context_overflow" if OVERFLOW_RE.search(msg) else "stream_error"
    status = code if code.__class__ is int and 100 <= code < 600 else None
    return Failure(kind, excerpt(msg, secrets), status)


def _merge_tool_calls(slots: dict[int, list[Any]], fragments: list[Any]) -> None:
    for tc in fragments:
        idx = tc.get("index")
        tc_id = tc.get("id")
        if idx is None:  # servers that omit the index: a new id starts a new call
            last = max(slots) if slots else -1
            idx = last + 1 if last < 0 or (tc_id and tc_id != slots[last][0]) else last
        elif idx.__class__ is not int or not 0 <= idx < 1 << 16:
            raise BadShape("tool_calls[].index is not a small integer")
        slot = slots.setdefault(idx, [None, None, "", []])
        if tc_id and not slot[0]:
            slot[0] = str(tc_id)
        if tc.get("type") and not slot[1]:
            slot[1] = str(tc["type"])
        fn = tc.get("function") or {}
        if fn.get("name") and not slot[2]:
            slot[2] = str(fn["name"])
        args = fn.get("arguments")
        if args:
            slot[3].append(args if isinstance(args, str) else orjson.dumps(args).decode())


def _take(ans: Answer, msg: dict[str, Any]) -> bool:
    """Add one delta (or message) to the answer; whether it carried a token."""
    tok = False
    c = msg.get("content")
    if c:
        if c.__class__ is not str:
            raise BadShape("content is not a string")
        ans.content.append(c)
        tok = True
    r = msg.get("reasoning_content") or msg.get("reasoning")
    if r:
        ans.reasoning.append(str(r))
        tok = True
    tcs = msg.get("tool_calls")
    if tcs:
        if tcs.__class__ is not list:
            raise BadShape("tool_calls is not a list")
        _merge_tool_calls(ans.tool_slots, tcs)
        tok = True
    return tok


def _event(ans: Answer, obj: Any, secrets: Sequence[str]) -> bool:
    """One parsed stream chunk into the answer; whether it carried a token."""
    tok = False
    choices = obj.get("choices")
    if choices:
        ch = choices[0]
        delta = ch.get("delta")
        if delta:
            tok = _take(ans, delta)
        elif delta is None and "message" in ch:
            raise BadShape("a non-streamed message inside a stream")
        fr = ch.get("finish_reason")
        if fr:
            ans.finish_reason = str(fr)
    elif "error" in obj and not choices:
        raise _error_event(obj["error"], secrets)
    u = obj.get("usage")
    if u is not None:
        usage_counts(u)  # checked on arrival: raises on a count of the wrong type
        ans.usage = u
    return tok


def parse_stream(
    chunks: Sequence[bytes], times: Sequence[int], secrets: Sequence[str]
) -> tuple[Answer, Failure | None]:
    """The answer an SSE reply carried; `times[i]` is when `chunks[i]` arrived."""
    ans = Answer()
    parser = SSEParser()
    try:
        for raw, now in zip(chunks, times, strict=True):
            for data in parser.feed(raw):
                if data == _DONE:
                    ans.saw_done = True
                    continue
                try:
                    obj = orjson.loads(data)
                except orjson.JSONDecodeError:
                    bad = excerpt(data[:120].decode("utf-8", "replace"), secrets)
                    raise Failure("malformed_stream", f"bad JSON in stream: {bad!r}") from None
                try:
                    tok = _event(ans, obj, secrets)
                except SHAPE_ERRORS as e:
                    raise Failure("malformed_stream", f"chunk of the wrong shape: {e}") from None
                if tok:
                    ans.token_times.append(now)
        ans.saw_done = ans.saw_done or _DONE in parser.flush()
    except Failure as f:
        return ans, f
    if not ans.saw_done:
        return ans, Failure("malformed_stream", "stream ended without [DONE]")
    return ans, None


def parse_body(raw: bytes, arrived: int, secrets: Sequence[str]) -> tuple[Answer, Failure | None]:
    """The answer of a non-streamed reply (its tokens all arrive at once, at `arrived`)."""
    ans = Answer(saw_done=True)
    try:
        obj = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return ans, Failure("malformed_stream", "bad JSON response")
    try:
        if isinstance(obj, dict) and not obj.get("choices") and "error" in obj:
            return ans, _error_event(obj["error"], secrets)
        ch = obj["choices"][0]
        if _take(ans, ch["message"]):
            ans.token_times.append(arrived)
        ans.finish_reason = ch.get("finish_reason")
        u = obj.get("usage")
        if u is not None:
            usage_counts(u)
            ans.usage = u
    except SHAPE_ERRORS as e:
        return Answer(saw_done=True), Failure("malformed_stream", f"reply of the wrong shape: {e}")
    return ans, None


def finish_record(
    rec: CallRecord,
    ans: Answer,
    err: Failure | None,
    messages: Sequence[Any],
    tools: Sequence[Any] | None,
) -> None:
    """Fill `rec` (whose start_ns, end_ns and headers_ns are set) from the answer."""
    rec.e2e_s = (rec.end_ns - rec.start_ns) / 1e9
    rec.total_s = rec.e2e_s
    times = ans.token_times
    if times:
        rec.first_token_ns = times[0]
        rec.ttft_s = (times[0] - rec.start_ns) / 1e9
    rec.token_chunks = len(times)
    rec.itl, gaps = itl_summary(times)
    if gaps:
        rec.itl_hist = itlhist.encode(gaps)
    calls = ans.tool_calls(rec.call_id)
    rec.num_tool_calls = len(calls)
    rec.finish_reason = ans.finish_reason
    if ans.usage:
        prompt, completion, cached, reasoning = usage_counts(ans.usage)
        rec.prompt_tokens, rec.completion_tokens = prompt, completion
        rec.cached_tokens, rec.reasoning_tokens = cached, reasoning
    elif err is None or times:
        # No usage from the server: estimate, and say so.
        rec.tokens_estimated = True
        rec.prompt_tokens = count_prompt_tokens(_COUNTER, messages, list(tools) if tools else None)
        text = "".join(ans.content) + "".join(
            tc["function"]["name"] + tc["function"]["arguments"] for tc in calls
        )
        reasoning_text = "".join(ans.reasoning)
        rec.reasoning_tokens = _COUNTER.count(reasoning_text) if reasoning_text else None
        rec.completion_tokens = max(len(times), _COUNTER.count(text) + (rec.reasoning_tokens or 0))
    if rec.completion_tokens and rec.completion_tokens > 1 and rec.ttft_s is not None:
        rec.tpot_s = (rec.e2e_s - rec.ttft_s) / (rec.completion_tokens - 1)
    if err is None:
        rec.status, rec.http_status = "ok", 200
    else:
        rec.status, rec.error_kind = "error", err.kind
        rec.error_message = err.message or None
        rec.http_status = err.http_status
