"""The console summary of a run (rich)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rich.console import Group, RenderableType
from rich.table import Table

from agentload.fmt import count, duration, num, pct, secs
from agentload.report.columns import CALL_COLUMNS, THIN_NOTE, any_thin, console_columns
from agentload.report.context import load_text, noun_of
from agentload.report.errors import error_table
from agentload.report.health import client_warnings
from agentload.report.replay_section import warm_cache_text
from agentload.results.records import Episodes, ReplayBlock, SloBlock, Summary, as_summary


def summary_table(summary: Summary | Mapping[str, Any]) -> RenderableType:
    """Context line, calls per role and endpoint, episodes / SLO figures, client warnings."""
    s = as_summary(summary)
    ctx = s.context or {}
    parts: list[RenderableType] = []
    models = ", ".join(ctx.get("models") or []) or "–"
    urls = ", ".join(sorted({str(e.get("url")) for e in (ctx.get("endpoints") or {}).values()}))
    if ctx:
        parts.append(
            f"[bold]{models}[/] @ {urls or '–'}; {load_text(ctx.get('load') or {}, noun_of(ctx))}"
        )
    calls = Table(
        title=f"agentload: calls (window {duration(s.window.duration_s)})",
        title_justify="left",
    )
    cols = console_columns(CALL_COLUMNS)
    calls.add_column("role @ endpoint")
    for c in cols:
        calls.add_column(c.label, justify="right")
    blocks = s.calls.by_role_endpoint
    for name, b in blocks.items():
        calls.add_row(name, *[c.cell(b) for c in cols])
    if any_thin(cols, list(blocks.values())):
        calls.caption = THIN_NOTE
        calls.caption_justify = "left"
    parts.append(calls)

    rp = s.replay
    if rp:
        parts.append(_replay_table(rp))
    # Replayed conversations are not graded: no success rate or pass^k.
    ep = None if rp else s.episodes
    if ep or s.slo:
        parts.append(_episodes_table(ep, s.slo, s.errors.by_kind))

    errors = error_table(s)
    if errors is not None:
        parts.append(errors)
    parts.extend(f"[yellow]warning:[/] {w}" for w in client_warnings(s))
    return Group(*parts)


def _replay_table(rp: ReplayBlock) -> Table:
    t = Table(title="agentload: replay", title_justify="left", show_header=False)
    t.add_column("figure")
    t.add_column("value", justify="right")
    t.add_row("conversations", count(rp.conversations))
    t.add_row("history", ", ".join(rp.history) or "-")
    t.add_row("turns sent / aborted", f"{rp.turns_sent} / {rp.turns_aborted}")
    if "live" in rp.history:  # the server's own answers sent back: where tool calls differed
        t.add_row("tool-call divergences", count(rp.divergences))
    t.add_row("terminations", ", ".join(f"{k} {v}" for k, v in rp.terminations.items()))
    perf = rp.windows.get("performance")
    t.add_row("calls / s (performance window)", num(perf.calls_per_s if perf else None, 1))
    t.add_row("send lag p99", secs(rp.send_lag_s.stat("p99")))
    if text := warm_cache_text(rp):
        t.caption = f"warning: {text}"
        t.caption_justify = "left"
    return t


def _episodes_table(ep: Episodes | None, slo: SloBlock | None, errs: Mapping[str, int]) -> Table:
    t = Table(title="agentload: episodes", title_justify="left", show_header=False)
    t.add_column("figure")
    t.add_column("value", justify="right")
    if ep:
        t.add_row("episodes", count(ep.episodes))
        t.add_row("success rate", pct(ep.success_rate))
        if ep.partial:
            t.add_row(
                "partial (no judge)",
                f"{count(ep.partial.get('episodes'))} episodes, left out of success and pass^k",
            )
        if ep.infra_error:
            t.add_row(
                "infrastructure errors",
                f"{count(ep.infra_error.get('episodes'))} episodes, left out of success and pass^k",
            )
        pk = ep.pass_hat_k
        if pk:
            t.add_row("pass^k", "  ".join(f"{k}:{pct(v)}" for k, v in list(pk.items())[:5]))
        t.add_row("episodes / min", num(ep.episodes_per_min))
        if ep.terminations:
            t.add_row("terminations", ", ".join(f"{k} {v}" for k, v in ep.terminations.items()))
    if slo:
        for k, c in slo.conditions.items():
            t.add_row(
                f"SLO {k} ≤ {secs(c.threshold)}",
                f"{secs(c.observed)} {'ok' if c.met else 'MISSED'}",
            )
        t.add_row("calls meeting every SLO", pct(slo.call_attainment))
        t.add_row("goodput (episodes / min)", num(slo.goodput_per_min))
    if errs:
        t.add_row("errors", ", ".join(f"{k} {v}" for k, v in errs.items()))
    return t
