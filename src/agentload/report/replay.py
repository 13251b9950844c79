"""The report's replay section: windows, conversations, per-turn roll-ups, send lag."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agentload.fmt import DASH, count, duration, num, pct, secs
from agentload.report.document import Document
from agentload.util import dig


def replay_section(doc: Document, rp: Mapping[str, Any]) -> None:
    doc.h("Replay")
    _overview(doc, rp)
    _windows(doc, rp.get("windows") or {})
    _by_turn(doc, rp.get("by_turn") or [])


def _overview(doc: Document, rp: Mapping[str, Any]) -> None:
    terms = ", ".join(f"{k} {v}" for k, v in (rp.get("terminations") or {}).items()) or DASH
    doc.table(
        ["figure", "value"],
        [
            ["conversations", count(rp.get("conversations"))],
            ["history", ", ".join(rp.get("history") or []) or DASH],
            ["terminations", terms],
            [
                "turns sent / aborted",
                f"{count(rp.get('turns_sent'))} / {count(rp.get('turns_aborted'))}",
            ],
            ["tool-call divergences", count(rp.get("divergences"))],
            [
                "conversation duration p50 / p90 / p99",
                " / ".join(
                    secs(dig(rp, "conversation_duration_s", k)) for k in ("p50", "p90", "p99")
                ),
            ],
            [
                "send lag p50 / p99 / max",
                " / ".join(secs(dig(rp, "send_lag_s", k)) for k in ("p50", "p99", "max")),
            ],
            [
                "output tokens recorded / actual",
                f"{count(dig(rp, 'output_tokens', 'recorded'))} / "
                f"{count(dig(rp, 'output_tokens', 'actual'))}",
            ],
        ],
    )
    doc.p(
        "Send lag: actual minus intended send time of each turn (the previous answer's end "
        "plus the recorded delay); a large lag means the client, not the server, was late."
    )


def _windows(doc: Document, windows: Mapping[str, Any]) -> None:
    doc.h("Windows", 3)
    doc.table(
        [
            "window",
            "duration",
            "conversations ended",
            "calls",
            "calls/s",
            "output tok/s",
            "TTFT p50",
            "TTFT p90",
        ],
        [
            [
                name,
                duration(w.get("duration_s")),
                count(w.get("conversations_ended")),
                count(w.get("calls")),
                num(w.get("calls_per_s"), 1),
                num(w.get("output_tokens_per_s"), 0),
                secs(dig(w, "ttft_s", "p50")),
                secs(dig(w, "ttft_s", "p90")),
            ]
            for name, w in windows.items()
        ],
    )
    doc.p(
        "performance: from the first start until the first slot had no next conversation "
        "(MLPerf's window); complete: until the last conversation ended."
    )
    perf = windows.get("performance") or {}
    ub = perf.get("ttft_s_upper_bound") or {}
    if ub.get("p90") is not None:
        doc.p(
            f"Early stopping (performance window, {pct(ub.get('confidence'), 0)} confidence): "
            f"TTFT p90 ≤ {secs(ub.get('p90'))}, p99 ≤ {secs(ub.get('p99'))}."
        )


def _by_turn(doc: Document, turns: list[Any]) -> None:
    if turns:
        doc.h("By turn", 3)
        doc.table(
            ["turn", "calls", "failed", "diverged", "TTFT p50", "TTFT p90", "cached share"],
            [
                [
                    str(t.get("turn")),
                    count(t.get("calls")),
                    count(t.get("failed")),
                    count(t.get("diverged")),
                    secs(dig(t, "ttft_s", "p50")),
                    secs(dig(t, "ttft_s", "p90")),
                    pct(t.get("cached_share")),
                ]
                for t in turns[:50]
            ],
        )
