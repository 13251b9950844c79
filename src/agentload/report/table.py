"""The console summary of a run (rich)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rich.console import Group, RenderableType
from rich.table import Table

from agentload.fmt import count, duration, num, pct, secs
from agentload.report.columns import CALL_COLUMNS, console_columns
from agentload.report.context import load_text
from agentload.report.health import client_warnings
from agentload.util import dig


def summary_table(summary: Mapping[str, Any]) -> RenderableType:
    """Context line, calls per role and endpoint, episodes / SLO figures, client warnings."""
    window = summary.get("window") or {}
    ctx = summary.get("context") or {}
    parts: list[RenderableType] = []
    models = ", ".join(ctx.get("models") or []) or "–"
    urls = ", ".join(sorted({str(e.get("url")) for e in (ctx.get("endpoints") or {}).values()}))
    if ctx:
        parts.append(f"[bold]{models}[/] @ {urls or '–'}; {load_text(ctx.get('load') or {})}")
    calls = Table(
        title=f"agentload: calls (window {duration(window.get('duration_s'))})",
        title_justify="left",
    )
    cols = console_columns(CALL_COLUMNS)
    calls.add_column("role @ endpoint")
    for c in cols:
        calls.add_column(c.label, justify="right")
    for name, b in (dig(summary, "calls", "by_role_endpoint") or {}).items():
        calls.add_row(name, *[c.cell(b) for c in cols])
    parts.append(calls)

    ep = summary.get("episodes")
    slo = summary.get("slo")
    rp = summary.get("replay")
    if rp:
        # Replayed conversations are not graded: no success rate or pass^k.
        t = Table(title="agentload: replay", title_justify="left", show_header=False)
        t.add_column("figure")
        t.add_column("value", justify="right")
        t.add_row("conversations", count(rp.get("conversations")))
        t.add_row("turns sent / aborted", f"{rp.get('turns_sent')} / {rp.get('turns_aborted')}")
        t.add_row("terminations", ", ".join(f"{k} {v}" for k, v in rp["terminations"].items()))
        perf = dig(rp, "windows", "performance") or {}
        t.add_row("calls / s (performance window)", num(perf.get("calls_per_s"), 1))
        t.add_row("send lag p99", secs(dig(rp, "send_lag_s", "p99")))
        parts.append(t)
        ep = None
    if ep or slo:
        t = Table(title="agentload: episodes", title_justify="left", show_header=False)
        t.add_column("figure")
        t.add_column("value", justify="right")
        if ep:
            t.add_row("episodes", count(ep.get("episodes")))
            t.add_row("success rate", pct(ep.get("success_rate")))
            pk = ep.get("pass_hat_k") or {}
            if pk:
                t.add_row("pass^k", "  ".join(f"{k}:{pct(v)}" for k, v in list(pk.items())[:5]))
            t.add_row("episodes / min", num(ep.get("episodes_per_min")))
            terms = ep.get("terminations") or {}
            if terms:
                t.add_row("terminations", ", ".join(f"{k} {v}" for k, v in terms.items()))
        if slo:
            for k, c in (slo.get("conditions") or {}).items():
                t.add_row(
                    f"SLO {k} ≤ {secs(c.get('threshold'))}",
                    f"{secs(c.get('observed'))} {'ok' if c.get('met') else 'MISSED'}",
                )
            t.add_row("calls meeting every SLO", pct(slo.get("call_attainment")))
            t.add_row("goodput (episodes / min)", num(slo.get("goodput_per_min")))
        errs = dig(summary, "errors", "by_kind") or {}
        if errs:
            t.add_row("errors", ", ".join(f"{k} {v}" for k, v in errs.items()))
        parts.append(t)
    from agentload.report.errors import error_table

    errors = error_table(summary)
    if errors is not None:
        parts.append(errors)
    parts.extend(f"[yellow]warning:[/] {w}" for w in client_warnings(summary))
    return Group(*parts)
