"""The run's context as report rows: what was measured, and against what."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agentload.fmt import DASH, duration
from agentload.results.records import Summary
from agentload.sim.profiles import profile_note


def _join(v: Any) -> str:
    if v is None or v == [] or v == {}:
        return DASH
    if isinstance(v, list | tuple):
        return ", ".join(str(x) for x in v)
    if isinstance(v, Mapping):
        return ", ".join(f"{k}={_join(x)}" for k, x in v.items())
    return str(v)


def load_text(load: Mapping[str, Any], noun: str = "episodes") -> str:
    if not load:
        return DASH
    if load.get("mode") == "open":
        rate = load.get("rate")
        # A sweep's context lists its swept rates ("0.5, 1, 2"), not one number.
        shown = f"{rate:g}" if isinstance(rate, int | float) else rate
        text = f"open loop, {shown} {noun}/s"
        if load.get("max_concurrency"):
            text += f", at most {load['max_concurrency']} active"
    else:
        text = f"closed loop, concurrency {load.get('concurrency')}"
    if load.get("num_episodes"):
        text += f", {load['num_episodes']} {noun}"
    if load.get("duration_s"):
        text += f", for {duration(load['duration_s'])}"
    return text


def noun_of(ctx: Mapping[str, Any]) -> str:
    """What the run calls a unit of work ("episodes", "conversations")."""
    described = ctx.get("workload_described")
    noun = described.get("noun") if isinstance(described, Mapping) else None
    return str(noun or "episodes")


def _workload_rows(ctx: Mapping[str, Any]) -> list[list[str]]:
    """What ran, in its kind's words: an episodes run's tasks, trials and strategies; another
    kind's own description (a replay's dataset, history and passes)."""
    kind = ctx.get("kind") or "episodes"
    described = ctx.get("workload_described")
    if kind != "episodes" and isinstance(described, Mapping):
        return [["workload", str(kind)]] + [
            [str(k).replace("_", " "), _join(v)]
            for k, v in described.items()
            if k not in ("kind", "noun") and v not in (None, False, [], {})
        ]
    w = ctx.get("workload") or {}
    rows: list[list[str]] = []
    tasks = _join(w.get("tasks") or w.get("domains") or "all built-in")
    if w.get("tasks_selected") is not None:
        tasks += f" ({w['tasks_selected']} tasks)"
    rows.append(["tasks", tasks])
    rows.append(["trials per task", _join(w.get("trials"))])
    if w.get("tau2_split") is not None:
        judge = "a judge endpoint" if w.get("tau2_judge") else "no judge (NL assertions partial)"
        rows.append(["τ²-bench", f"split {w['tau2_split']}, {judge}"])
    if w.get("agent"):
        rows.append(["agent / user", f"{w.get('agent')} / {w.get('user')}"])
    return rows


def context_rows(
    ctx: Mapping[str, Any], summary: Summary | Mapping[str, Any] | None = None
) -> list[list[str]]:
    """Rows of the "Run context" table (a context dict from agentload.results.context)."""
    rows: list[list[str]] = []
    eps = ctx.get("endpoints") or {}
    for role, e in eps.items():
        rows.append(
            [f"{role} endpoint", f"{e.get('url') or DASH} (model {e.get('model') or DASH})"]
        )
    engines = ctx.get("engines") or {}
    if engines:
        rows.append(["engine", _join(engines)])
    else:
        rows.append(["engine", "not detected"])
    sim = ctx.get("simulator")
    if sim:
        text = f"embedded, profile {sim.get('profile')}, speedup {sim.get('speedup')}"
        note = profile_note(sim.get("profile"), short=True)
        if note:
            text += f" ({note})"
        if sim.get("fault_rate"):
            text += f", fault rate {sim['fault_rate']}"
        rows.append(["simulator", text])
    rows.append(["load", load_text(ctx.get("load") or {}, noun_of(ctx))])
    rows += _workload_rows(ctx)
    for role, e in eps.items():
        rows.append([f"{role} sampling", _join(e.get("sampling")) or DASH])
    if ctx.get("slo"):
        rows.append(["SLO", _join(ctx["slo"])])
    rows.append(["agentload", _join(ctx.get("agentload_version"))])
    rows.append(["host", _join(ctx.get("host"))])
    return rows
