"""The report's replay section: windows, conversations, per-turn roll-ups, send lag."""

from __future__ import annotations

from agentload.fmt import DASH, count, duration, num, pct, secs
from agentload.report.document import Document
from agentload.results.records import ReplayBlock, ReplayTurn, ReplayWindow


def warm_cache_text(rp: ReplayBlock) -> str | None:
    """The warning of a replay whose server already held the dataset's prompts."""
    w = rp.warm_cache
    if not w:
        return None
    return (
        f"the server's prefix cache already held this dataset: the run's first call was "
        f"{100 * float(w.get('cached_share') or 0):.0f}% cached, which nothing sent before it "
        "in this run explains (a previous replay?), so every TTFT is lower than a cold server's; "
        "restart the engine (or reset its prefix cache, e.g. vLLM's POST /reset_prefix_cache) "
        "before measuring again"
    )


def replay_section(doc: Document, rp: ReplayBlock) -> None:
    doc.h("Replay")
    if text := warm_cache_text(rp):
        doc.p(f"**Warning:** {text}.")
    _overview(doc, rp)
    _windows(doc, rp.windows)
    _by_turn(doc, rp.by_turn)


def _overview(doc: Document, rp: ReplayBlock) -> None:
    terms = ", ".join(f"{k} {v}" for k, v in rp.terminations.items()) or DASH
    doc.table(
        ["figure", "value"],
        [
            ["conversations", count(rp.conversations)],
            ["history", ", ".join(rp.history) or DASH],
            ["terminations", terms],
            ["turns sent / aborted", f"{count(rp.turns_sent)} / {count(rp.turns_aborted)}"],
            ["tool-call divergences", count(rp.divergences)],
            [
                "conversation duration p50 / p90 / p99",
                " / ".join(secs(rp.conversation_duration_s.stat(k)) for k in ("p50", "p90", "p99")),
            ],
            [
                "send lag p50 / p99 / max",
                " / ".join(secs(rp.send_lag_s.stat(k)) for k in ("p50", "p99", "max")),
            ],
            [
                "output tokens recorded / actual",
                f"{count(rp.output_tokens.get('recorded'))} / "
                f"{count(rp.output_tokens.get('actual'))}",
            ],
        ],
    )
    doc.p(
        "Send lag: actual minus intended send time of each turn (the previous answer's end "
        "plus the recorded delay); a large lag means the client, not the server, was late."
    )


def _windows(doc: Document, windows: dict[str, ReplayWindow]) -> None:
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
                duration(w.duration_s),
                count(w.conversations_ended),
                count(w.calls),
                num(w.calls_per_s, 1),
                num(w.output_tokens_per_s, 0),
                secs(w.ttft_s.stat("p50")),
                secs(w.ttft_s.stat("p90")),
            ]
            for name, w in windows.items()
        ],
    )
    doc.p(
        "performance: from the first start until the first slot had no next conversation "
        "(MLPerf's window); complete: until the last conversation ended."
    )
    perf = windows.get("performance")
    ub = perf.ttft_s_upper_bound if perf else None
    if ub is not None and ub.p90 is not None:
        doc.p(
            f"Early stopping (performance window, {pct(ub.confidence, 0)} confidence): "
            f"TTFT p90 ≤ {secs(ub.p90)}, p99 ≤ {secs(ub.p99)}."
        )


def _by_turn(doc: Document, turns: list[ReplayTurn]) -> None:
    if not turns:
        return
    doc.h("By turn", 3)
    doc.table(
        ["turn", "calls", "failed", "diverged", "TTFT p50", "TTFT p90", "cached share"],
        [
            [
                str(t.turn),
                count(t.calls),
                count(t.failed),
                count(t.diverged),
                secs(t.ttft_s.stat("p50")),
                secs(t.ttft_s.stat("p90")),
                pct(t.cached_share),
            ]
            for t in turns[:50]
        ],
    )
