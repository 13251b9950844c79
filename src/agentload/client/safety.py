"""Guards the client applies to what servers send back and to what it stores.

Everything here runs once per call (or once per client), never per chunk: `Retry-After`
parsing, secret redaction (of the values `agentload.redact.endpoint_secrets` finds), URL
credentials, and checking the server's `usage` numbers.
"""

from __future__ import annotations

import base64
import datetime as dt
import email.utils
from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import unquote, urlsplit, urlunsplit

from agentload.redact import MIN_SECRET_LEN, REDACTED

# The longest wait a `Retry-After` header can impose before the next attempt, in seconds. A
# server asking for more (or for a date far ahead) gets this; the wait is in the record.
RETRY_AFTER_MAX_S = 60.0

# Secrets shorter than this are not searched for in messages: replacing a one- or
# two-letter placeholder key ("x") would mangle every message and protect nothing. The same
# bound as the results folder's scrubber.
_MIN_SECRET_LEN = MIN_SECRET_LEN

# Token counts at or above 2**53 cannot be real and no longer survive a float round trip.
_MAX_COUNT = 1 << 53


class BadShape(Exception):
    """A reply whose structure or value types are not the OpenAI ones; carries the reason."""


def parse_retry_after(value: str | None, now: dt.datetime | None = None) -> float | None:
    """Seconds to wait from a `Retry-After` value (delay-seconds or an HTTP date).

    Returns None when the header is absent or unreadable (the caller then uses its own
    backoff); a date in the past gives 0. The result is not capped here.
    """
    if not value:
        return None
    value = value.strip()
    try:
        seconds = float(value)
    except ValueError:
        pass
    else:
        # Finite and non-negative only: "nan", "inf" and "-3" are not waits.
        return seconds if 0 <= seconds < float("inf") else None
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    if when.tzinfo is None:  # an HTTP date is GMT by definition
        when = when.replace(tzinfo=dt.UTC)
    now = now or dt.datetime.now(dt.UTC)
    return max(0.0, (when - now).total_seconds())


def redact(text: str, secrets: Iterable[str]) -> str:
    """`text` with every occurrence of each secret replaced by the project's marker (longest
    first, so a value that holds another, `user:password`, is replaced whole)."""
    for secret in sorted(secrets, key=len, reverse=True):
        if len(secret) >= _MIN_SECRET_LEN and secret in text:
            text = text.replace(secret, REDACTED)
    return text


def split_userinfo(url: str) -> tuple[str, str | None]:
    """(url without `user:pass@`, its `Authorization: Basic` value or None).

    aiohttp refuses a request whose URL holds credentials when an `Authorization` header is
    also set, so the credentials are taken out of the URL and sent as a header by the
    client, and only when no API key is configured. (What to redact of them, in every form:
    `agentload.redact.endpoint_secrets`.)
    """
    parts = urlsplit(url)
    userinfo, at, hostport = parts.netloc.rpartition("@")
    if not at:
        return url, None
    raw_user, _, raw_password = userinfo.partition(":")
    user, password = unquote(raw_user), unquote(raw_password)
    token = base64.b64encode(f"{user}:{password}".encode()).decode("ascii")
    return urlunsplit(parts._replace(netloc=hostport)), "Basic " + token


def without_userinfo(
    url: str, headers: Mapping[str, str] | None
) -> tuple[str, dict[str, str] | None]:
    """(url, headers) for aiohttp, which refuses URL credentials next to an Authorization
    header: `user:pass@` leaves the URL and becomes a Basic header unless one is set."""
    clean, basic = split_userinfo(url)
    if basic is None:
        return url, dict(headers) if headers is not None else None
    out = dict(headers or {})
    if not any(k.lower() == "authorization" for k in out):
        out["Authorization"] = basic
    return clean, out


def _count(usage: Mapping[str, Any], key: str, where: str) -> int | None:
    v = usage.get(key)
    if v is None:
        return None
    if v.__class__ is not int or not 0 <= v < _MAX_COUNT:
        raise BadShape(f"{where}{key} is not a token count: {str(v)[:40]!r}")
    return v


def usage_counts(
    usage: Any,
) -> tuple[int | None, int | None, int | None, int | None]:
    """(prompt, completion, cached, reasoning) tokens from a `usage` object, checked.

    Raises BadShape when `usage` or a count in it has the wrong type or an impossible value
    (negative, fractional, a string, beyond 2**53).
    """
    if usage.__class__ is not dict:
        raise BadShape(f"usage is not an object: {str(usage)[:60]!r}")
    prompt = _count(usage, "prompt_tokens", "usage.")
    completion = _count(usage, "completion_tokens", "usage.")
    cached = reasoning = None
    ptd = usage.get("prompt_tokens_details")
    if ptd is not None:
        if ptd.__class__ is not dict:
            raise BadShape("usage.prompt_tokens_details is not an object")
        cached = _count(ptd, "cached_tokens", "usage.prompt_tokens_details.")
    ctd = usage.get("completion_tokens_details")
    if ctd is not None:
        if ctd.__class__ is not dict:
            raise BadShape("usage.completion_tokens_details is not an object")
        reasoning = _count(ctd, "reasoning_tokens", "usage.completion_tokens_details.")
    return prompt, completion, cached, reasoning
