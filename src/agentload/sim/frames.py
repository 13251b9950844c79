"""The simulator's bytes on the wire, in vLLM's OpenAI-compatible format: the HTTP chunk
framing, a stream's SSE events, a full reply's JSON body and the error bodies.

Both outputs (`outputs.py`: the stream and the collected reply) and both HTTP front ends
(aiohttp's application and `fasthttp.py`) render through these, so each field is written once.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import orjson

from agentload.version import __version__

if TYPE_CHECKING:
    from agentload.sim.engine import Seq


VERSION = __version__
FINGERPRINT = f"agentload-sim-{VERSION}"
MAX_BODY = 64 << 20
"""The largest request body accepted (aiohttp's application answers 413 above it)."""

# What each generated token shows on the wire (an item is (kind, text, tool-call index)).
HIDDEN, CONTENT, REASONING, TOOL_HEADER, TOOL_ARGS = range(5)
Item = tuple[int, str, int]

NULL_DELTA_SUFFIX = b',"logprobs":null,"finish_reason":null,"token_ids":null}]}\n\n'
"""The end of a chat event whose token does not finish the answer."""
TEXT_SUFFIX = b',"logprobs":null,"finish_reason":null,"stop_reason":null}]}\n\n'
"""The end of a completions event whose token does not finish the answer."""
DONE = b"data: [DONE]\n\n"
END = b"0\r\n\r\n"
"""The chunked body's last chunk."""
FILLER_DELTA = b'{"content":" the"}'
"""The chat delta of a token past the plan (`ignore_eos`)."""
ERROR_EVENT = (
    b'data: {"error":{"object":"error","message":"Internal server error '
    b'(injected by agentload sim)","type":"InternalServerError","param":null,'
    b'"code":500}}\n\n' + DONE
)
"""The `error_event` fault: an error in the stream, then its end."""


def frame(data: bytes) -> bytes:
    """One HTTP/1.1 chunk."""
    return b"%x\r\n%b\r\n" % (len(data), data)


def unframe(framed: bytes) -> bytes:
    """The data of one HTTP/1.1 chunk."""
    return framed[framed.index(b"\r\n") + 2 : -2]


def error_body(
    message: str, status: int, etype: str = "BadRequestError", param: str | None = None
) -> dict[str, Any]:
    return {"error": {"message": message, "type": etype, "param": param, "code": status}}


class RequestError(Exception):
    """A request the simulator refuses, with its status and OpenAI-style error body."""

    def __init__(
        self, status: int, message: str, etype: str = "BadRequestError", param: str | None = None
    ) -> None:
        super().__init__(message)
        self.status = status
        self.body = error_body(message, status, etype, param)


# -- the parts both outputs share ------------------------------------------------------------
def finish_name(finish: str, has_tools: bool) -> str:
    """The finish reason on the wire: a stop after tool calls is `tool_calls`."""
    return "tool_calls" if finish == "stop" and has_tools else finish


def usage(seq: Seq, details: bool = True) -> dict[str, Any]:
    """The usage object (without the cache details in a stream's per-event usage)."""
    counts: dict[str, Any] = {
        "prompt_tokens": seq.prompt_len,
        "total_tokens": seq.prompt_len + seq.num_output,
        "completion_tokens": seq.num_output,
    }
    if details:
        counts["prompt_tokens_details"] = {
            "cached_tokens": seq.cached_tokens,
            "created_cache_tokens": seq.created_cache_tokens,
        }
    return counts


# -- a stream's events -----------------------------------------------------------------------
def event_head(rid: str, chat: bool, created: int, model: str) -> bytes:
    """The start every event of a stream shares: its id, object, creation time and model."""
    obj = b"chat.completion.chunk" if chat else b"text_completion"
    return (
        b'data: {"id":"'
        + rid.encode()
        + b'","object":"'
        + obj
        + b'","created":'
        + str(created).encode()
        + b',"model":'
        + orjson.dumps(model)
    )


def choice_prefix(head: bytes, chat: bool) -> bytes:
    """The start of an event that carries a token: the head and the choice's delta or text."""
    return head + (
        b',"choices":[{"index":0,"delta":' if chat else b',"choices":[{"index":0,"text":'
    )


def chat_delta(item: Item, tool_ids: list[str]) -> bytes | None:
    """The chat delta a token shows (None for a hidden one)."""
    kind, text, idx = item
    if kind == CONTENT:
        return orjson.dumps({"content": text})
    if kind == REASONING:
        return orjson.dumps({"reasoning_content": text})
    if kind == TOOL_HEADER:
        call = {"id": tool_ids[idx], "type": "function", "index": idx, "function": {"name": text}}
        return orjson.dumps({"content": None, "tool_calls": [call]})
    if kind == TOOL_ARGS:
        return orjson.dumps(
            {"content": None, "tool_calls": [{"index": idx, "function": {"arguments": text}}]}
        )
    return None


def role_event(prefix: bytes) -> bytes:
    """A chat stream's first event: the assistant's role, before the first token."""
    return (
        prefix + b'{"role":"assistant","content":""},"logprobs":null,'
        b'"finish_reason":null}],"prompt_token_ids":null,"prompt_text":null}\n\n'
    )


def _finish_suffix(reason: str) -> bytes:
    return (
        b',"logprobs":null,"finish_reason":"'
        + reason.encode()
        + b'","stop_reason":null,"token_ids":null}]}\n\n'
    )


def finish_events(
    prefix: bytes, delta: bytes | None, name: str, *, chat: bool, has_tools: bool
) -> list[bytes]:
    """The last token's events: its delta (if it shows) with the finish reason `name`."""
    if not chat:
        return [
            prefix + (delta or b'""') + b',"logprobs":null,'
            b'"finish_reason":"' + name.encode() + b'","stop_reason":null}]}\n\n'
        ]
    if delta is not None and not has_tools:
        return [prefix + delta + _finish_suffix(name)]
    parts = [] if delta is None else [prefix + delta + NULL_DELTA_SUFFIX]
    empty = b'{"content":""}' if name == "stop" else b"{}"
    parts.append(prefix + empty + _finish_suffix(name))
    return parts


def usage_event(head: bytes, seq: Seq) -> bytes:
    """The usage event after the last token (`stream_options.include_usage`)."""
    return (
        head
        + b',"choices":[],"usage":'
        + orjson.dumps(usage(seq))
        + b',"system_fingerprint":"'
        + FINGERPRINT.encode()
        + b'"}\n\n'
    )


def with_usage(parts: list[bytes], seq: Seq) -> list[bytes]:
    """The events with the usage so far in each that carries a token
    (`stream_options.continuous_usage_stats`)."""
    counts = b',"usage":' + orjson.dumps(usage(seq, details=False)) + b"}\n\n"
    return [p[:-3] + counts if p.endswith(b"}]}\n\n") else p for p in parts]


def malformed_opening(head: bytes) -> bytes:
    """The `malformed` fault: an event cut off inside its JSON."""
    return head + b',"choices":[{"index":0,"delta":{"content":"\n\n'


# -- a full reply's body ---------------------------------------------------------------------
def reply_body(
    rid: str,
    created: int,
    model: str,
    items: list[Item],
    tool_ids: list[str],
    seq: Seq,
    name: str,
    *,
    chat: bool,
) -> bytes:
    """The JSON body of a non-streamed answer: the first `seq.num_output` tokens of `items`,
    finished for reason `name`."""
    n = seq.num_output
    shown = items[:n]
    content = "".join(t for k, t, _ in shown if k == CONTENT)
    if seq.ignore_eos and n > seq.plan_len:
        content += " the" * (n - seq.plan_len)
    if not chat:
        text_body = {
            "id": rid,
            "object": "text_completion",
            "created": created,
            "model": model,
            "choices": [
                {
                    "index": 0,
                    "text": content,
                    "logprobs": None,
                    "finish_reason": name,
                    "stop_reason": None,
                    "prompt_logprobs": None,
                }
            ],
            "usage": usage(seq),
            "kv_transfer_params": None,
        }
        return orjson.dumps(text_body)
    chat_body = {
        "id": rid,
        "object": "chat.completion",
        "created": created,
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": _message(shown, tool_ids, content),
                "logprobs": None,
                "finish_reason": name,
                "stop_reason": None,
                "token_ids": None,
            }
        ],
        "service_tier": None,
        "system_fingerprint": FINGERPRINT,
        "usage": usage(seq),
        "prompt_logprobs": None,
        "prompt_token_ids": None,
        "kv_transfer_params": None,
    }
    return orjson.dumps(chat_body)


def _message(items: list[Item], tool_ids: list[str], content: str) -> dict[str, Any]:
    """A chat answer's message: its content, reasoning and tool calls."""
    calls: list[dict[str, Any]] = []
    for k, text, idx in items:
        if k == TOOL_HEADER:
            calls.append(
                {
                    "id": tool_ids[idx],
                    "type": "function",
                    "function": {"name": text, "arguments": ""},
                }
            )
        elif k == TOOL_ARGS and calls:
            calls[-1]["function"]["arguments"] += text
    reasoning = "".join(t for k, t, _ in items if k == REASONING)
    return {
        "role": "assistant",
        "content": content or (None if calls else ""),
        "refusal": None,
        "annotations": None,
        "audio": None,
        "function_call": None,
        "tool_calls": calls,
        "reasoning_content": reasoning or None,
    }
