"""The console summary of a run (rich)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rich.console import Group, RenderableType
from rich.table import Table

from agentload.fmt import count, duration, num, pct, secs
from agentload.util import dig


def summary_table(summary: Mapping[str, Any]) -> RenderableType:
    """Calls per role and endpoint, then episodes / SLO figures when there are any."""
    window = summary.get("window") or {}
    calls = Table(
        title=f"agentload: calls (window {duration(window.get('duration_s'))})",
        title_justify="left",
    )
    calls.add_column("role @ endpoint")
    for col in (
        "calls",
        "failed",
        "TTFT p50",
        "TTFT p90",
        "TTFT p99",
        "e2e p90",
        "ITL mean",
        "cached",
        "out tok/s",
    ):
        calls.add_column(col, justify="right")
    for name, b in (dig(summary, "calls", "by_role_endpoint") or {}).items():
        calls.add_row(
            name,
            count(b.get("calls")),
            count(b.get("failed")),
            secs(dig(b, "ttft_s", "p50")),
            secs(dig(b, "ttft_s", "p90")),
            secs(dig(b, "ttft_s", "p99")),
            secs(dig(b, "e2e_s", "p90")),
            secs(dig(b, "itl_s", "mean")),
            pct(dig(b, "tokens", "cached_share")),
            num(dig(b, "throughput", "output_tokens_per_s"), 1),
        )
    parts: list[RenderableType] = [calls]

    ep = summary.get("episodes")
    slo = summary.get("slo")
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
            t.add_row("goodput (episodes / min)", num(slo.get("goodput_per_min")))
        errs = dig(summary, "errors", "by_kind") or {}
        if errs:
            t.add_row("errors", ", ".join(f"{k} {v}" for k, v in errs.items()))
        parts.append(t)
    from agentload.report.errors import error_table

    errors = error_table(summary)
    if errors is not None:
        parts.append(errors)
    return Group(*parts)
