"""The error table of a run: per error kind, its most frequent messages and their counts."""

from __future__ import annotations

from rich.table import Table

from agentload.fmt import count
from agentload.results.records import Summary

HEADER = ["error kind", "message (redacted)", "calls"]


def error_rows(s: Summary) -> list[list[str]]:
    """[kind, message, calls] rows: the kind's most frequent messages, then what is left."""
    errors = s.errors
    rows: list[list[str]] = []
    for kind, n in errors.by_kind.items():
        msgs = errors.messages.get(kind) or []
        shown = 0
        for i, m in enumerate(msgs):
            rows.append([kind if i == 0 else "", str(m["message"]), count(m["count"])])
            shown += int(m["count"])
        if not msgs:
            rows.append([kind, "", count(n)])
        elif n > shown:
            rows.append(["", "(other messages)", count(n - shown)])
    return rows


def error_table(s: Summary) -> Table | None:
    """The console's error table, or None when no call failed."""
    rows = error_rows(s)
    if not rows:
        return None
    t = Table(title="agentload: errors", title_justify="left")
    t.add_column(HEADER[0])
    t.add_column(HEADER[1], overflow="fold")
    t.add_column(HEADER[2], justify="right")
    for row in rows:
        t.add_row(*row)
    return t
