"""The most frequent error messages of a run, per error kind, redacted and shortened.

Counts alone (`http_404: 120`) do not say what went wrong; the server's own words do ("The
model `x` does not exist."). Messages that differ only in numbers (token counts, ports,
request ids) are counted together and shown by their first occurrence.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

from agentload.redact import redact_text

MAX_MESSAGE_CHARS = 200
MESSAGES_PER_KIND = 3

_NUMBER = re.compile(r"\d+(?:\.\d+)?")


def redact_message(text: str, *, max_chars: int = MAX_MESSAGE_CHARS) -> str:
    """One line, secrets masked (agentload.redact's rules), at most `max_chars` characters (an
    ellipsis marks a cut)."""
    out = redact_text(" ".join(str(text).split()))
    if len(out) > max_chars:
        out = out[: max_chars - 1].rstrip() + "…"
    return out


def top_error_messages(
    calls: Iterable[Mapping[str, Any]], *, per_kind: int = MESSAGES_PER_KIND
) -> dict[str, list[dict[str, Any]]]:
    """{error kind: [{"message", "count"}, ...]} for failed calls, most frequent first.

    Kinds are ordered by their number of failed calls; a call without a message counts as
    "(no message)" so the counts add up to the kind's total.
    """
    by_kind: dict[str, Counter[str]] = {}
    shown: dict[tuple[str, str], str] = {}
    for c in calls:
        if c.get("status", "ok") == "ok":
            continue
        kind = str(c.get("error_kind") or "unknown")
        msg = redact_message(c.get("error_message") or "(no message)")
        key = _NUMBER.sub("#", msg)
        shown.setdefault((kind, key), msg)
        by_kind.setdefault(kind, Counter())[key] += 1
    ordered = sorted(by_kind.items(), key=lambda kv: (-sum(kv[1].values()), kv[0]))
    return {
        kind: [
            {"message": shown[(kind, key)], "count": n} for key, n in counts.most_common(per_kind)
        ]
        for kind, counts in ordered
    }
