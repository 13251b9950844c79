"""The client's error taxonomy in code: CallError and how replies and events map onto it."""

from __future__ import annotations

import contextlib
import re
from collections.abc import Sequence
from typing import Any

import orjson

from agentload.client.safety import BadShape, redact

# How servers word a prompt that does not fit: vLLM ("This model's maximum context length is
# N tokens", "longer than the maximum model length"), SGLang ("exceeds the maximum allowed
# length", "maximum context length"), OpenAI (code context_length_exceeded), llama.cpp's
# server ("exceeds the available context size").
OVERFLOW_RE = re.compile(
    r"maximum context length|context length|context_length_exceeded|maximum model length"
    r"|max_model_len|maximum allowed length|context window|context size|prompt is too long",
    re.IGNORECASE,
)
_EXCERPT = 300
# What a chunk or body of the wrong shape raises when the per-chunk code meets it: caught once
# around the whole chunk instead of type checks on every field of every chunk.
SHAPE_ERRORS = (TypeError, AttributeError, KeyError, IndexError, ValueError, BadShape)


class CallError(Exception):
    """Raised inside an attempt; carries the error kind of the taxonomy."""

    def __init__(
        self,
        kind: str,
        message: str = "",
        http_status: int | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message or kind)
        self.kind = kind
        self.message = message
        self.http_status = http_status
        self.retry_after = retry_after  # seconds, from a 429/503's Retry-After header


def excerpt(message: str, secrets: Sequence[str], limit: int = _EXCERPT) -> str:
    # Redact before cutting, so a key cut in half by the limit cannot leak its first part.
    return " ".join(redact(message, secrets).split())[:limit]


def raw_excerpt(data: bytes, secrets: Sequence[str]) -> str:
    """A short, redacted, printable excerpt of raw reply bytes for an error message."""
    text = redact(data[:4096].decode("utf-8", "replace"), secrets)
    return repr(text[:120])


def error_text(err: Any) -> str:
    """The message of an OpenAI-style `error` value, whatever its shape."""
    if isinstance(err, dict):
        msg = err.get("message") or err.get("detail") or err
        return msg if isinstance(msg, str) else str(msg)
    return err if isinstance(err, str) else str(err)


def classify_http_error(status: int, body: bytes, secrets: Sequence[str] = ()) -> CallError:
    text = body[:4096].decode("utf-8", "replace")
    message = text
    with contextlib.suppress(Exception):
        obj = orjson.loads(body)
        err = obj.get("error", obj) if isinstance(obj, dict) else obj
        if isinstance(err, dict):
            message = error_text(err) if (err.get("message") or err.get("detail")) else text
        elif isinstance(err, str):
            message = err
    short = excerpt(message, secrets)
    if status in (400, 413, 422) and OVERFLOW_RE.search(text):
        return CallError("context_overflow", short, status)
    return CallError(f"http_{status}", short, status)


def why(exc: BaseException) -> str:
    return str(exc) if isinstance(exc, BadShape) else f"{type(exc).__name__}: {exc}"[:120]


def raise_error_event(err: Any, secrets: Sequence[str]) -> None:
    """Raise the CallError of an `{"error": ...}` object sent instead of a reply."""
    msg = error_text(err)
    code = err.get("code") if isinstance(err, dict) else None
    kind = "context_overflow" if OVERFLOW_RE.search(msg) else "stream_error"
    raise CallError(
        kind, excerpt(msg, secrets), code if code.__class__ is int and 100 <= code < 600 else None
    )
