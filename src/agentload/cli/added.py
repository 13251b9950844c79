"""How `agentload compare --gateway` shows the latency a gateway adds, per role."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table

from agentload.fmt import secs

_DASH = "–"


def _signed(v: float | None) -> str:
    if v is None:
        return _DASH
    return ("+" if v >= 0 else "−") + secs(abs(v))


def _pct(v: float | None) -> str:
    return _DASH if v is None else f"{v * 100:+.1f}%"


def _span(ci: Any, f: Any) -> str:
    return f"[{f(ci[0])}, {f(ci[1])}]" if ci else _DASH


def _where(check: dict[str, Any]) -> str:
    """`concurrency 4 ` for a check of a sweep point, nothing for a single run."""
    return "".join(
        f"{k} {v:g} " for k, v in check.items() if k not in ("role", "metric", "verdict")
    )


def print_added(console: Console, res: dict[str, Any]) -> None:
    """One table per role, then the verdict line when a limit was given."""
    for role, r in res["roles"].items():
        t = Table(
            title=(
                f"added latency, {role} calls: {r['calls']['direct']} direct / "
                f"{r['calls']['gateway']} via gateway "
                f"({r['episodes']['direct']} / {r['episodes']['gateway']} episodes), "
                "95% bootstrap CI"
            ),
            title_justify="left",
        )
        for col in ("metric", "direct", "gateway", "added", "CI", "added %", "CI %"):
            t.add_column(col, justify="left" if col == "metric" else "right")
        for name, m in r["metrics"].items():
            t.add_row(
                name,
                secs(m["direct"]),
                secs(m["gateway"]),
                _signed(m["added"]),
                _span(m["added_ci"], _signed),
                _pct(m["relative"]),
                _span(m["relative_ci"], _pct),
            )
        console.print(t)
    for role in res.get("missing_roles") or ():
        console.print(f"[yellow]warning:[/] no ok calls of role {role!r} in both runs")
    gate = res.get("gate")
    if not gate:
        return
    bad = [c for c in gate["checks"] if c["verdict"] != "within"]
    what = ", ".join(_where(c) + f"{c['role']} {c['metric']}: {c['verdict']}" for c in bad)
    line = {
        "within": f"WITHIN: the gateway adds at most {gate['max_added']} "
        f"({', '.join(gate['metrics'])}, every role; upper 95% bounds)",
        "exceeds": f"EXCEEDS: the gateway adds more than {gate['max_added']} ({what})",
        "inconclusive": f"INCONCLUSIVE: the CIs straddle {gate['max_added']} "
        f"({what or 'no calls'}); more episodes narrow them",
    }[gate["verdict"]]
    style = {"within": "green", "exceeds": "red", "inconclusive": "yellow"}[gate["verdict"]]
    console.print(f"[{style}]{line}[/]", highlight=False)
