"""The sweep document (sweep.json) from its points' summaries: one row per point, in load
order, with the best point meeting the SLO and the knee; written together with its page.

Below the sweep's driver (agentload.sweep), so that re-reporting a sweep folder and comparing
sweeps need nothing of the driver.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import orjson

from agentload.report.sweep import knee, write_sweep_report
from agentload.results.jsonl import atomic_write_bytes
from agentload.results.records import ClientBlock, Episodes, Summary, as_summary


def summary_row(
    point: float, kind: str, dirname: str, status: str | None, s: Summary | Mapping[str, Any]
) -> dict[str, Any]:
    """One sweep point's figures from its summary (agent calls; all calls without agents)."""
    summary = as_summary(s)
    agent = summary.agent_calls()
    eps = summary.episodes or Episodes()
    slo = summary.slo
    client = summary.client or ClientBlock()
    pk = eps.pass_hat_k
    row: dict[str, Any] = {
        kind: point,
        "dir": dirname,
        "status": status,
        "episodes": summary.counts.sessions if "counts" in summary.model_fields_set else None,
        "episodes_per_min": eps.episodes_per_min,
        "calls_per_s": agent.throughput.calls_per_s,
        "output_tokens_per_s": agent.throughput.output_tokens_per_s,
        "success_rate": eps.success_rate,
        "pass_hat_k": pk,
        "pass_hat_k_max": pk[max(pk, key=int)] if pk else None,
        "error_rate": summary.errors.error_rate,
        "slo_met": None if not slo else slo.all_met,
        "slo_call_attainment": None if not slo else slo.call_attainment,
        "slo_session_attainment": None if not slo else slo.session_attainment,
        "goodput_per_min": None if not slo else slo.goodput_per_min,
        "loop_lag_p99": client.event_loop_lag_s.stat("p99") if client.event_loop_lag_s else None,
        "sched_delay_p99": client.sched_delay_s.stat("p99") if client.sched_delay_s else None,
    }
    gaps = agent.itl_s.all_gaps
    dists = {"ttft": agent.ttft_s, "e2e": agent.e2e_s, "itl": gaps}
    for p in ("p50", "p90", "p99"):
        for name, d in dists.items():
            row[f"{name}_{p}"] = d.stat(p) if d else None
    # Percentiles the point's sample is too small to carry, marked in its tables.
    row["thin"] = [f"{name}_{p}" for name, d in dists.items() if d for p in d.thin]
    return row


def finish_doc(doc: dict[str, Any]) -> None:
    """Points in load order, the best point meeting the SLO, the knee, the shared context."""
    kind = doc["kind"]
    doc["points"].sort(key=lambda r: float(r[kind]))
    met = [float(r[kind]) for r in doc["points"] if r.get("slo_met")]
    doc["best_point"] = max(met) if met else None
    doc["knee"] = knee(doc["points"], kind)
    ctx = doc.get("context")
    if isinstance(ctx, dict) and isinstance(ctx.get("load"), dict):
        # The load varies by point: show the swept values instead of the first point's.
        ctx["load"] = {**ctx["load"], kind: ", ".join(f"{p:g}" for p in doc["points_planned"])}


def rebuild_sweep(
    root: Path, doc: dict[str, Any], summaries: Mapping[str, Summary | Mapping[str, Any]]
) -> dict[str, Any]:
    """`doc` (sweep.json, from `load_sweep`) recomputed from each point's summary, written
    back with the sweep's report (`agentload report SWEEP_DIR`)."""
    kind = str(doc["kind"])
    rows = []
    for r in doc["points"]:
        s = summaries.get(str(r["dir"]))
        if s is not None:
            rows.append(summary_row(float(r[kind]), kind, str(r["dir"]), r.get("status"), s))
    doc["points"] = rows
    if rows:
        doc["context"] = as_summary(summaries.get(rows[0]["dir"])).context
    finish_doc(doc)
    write_sweep(root, doc)
    return doc


def write_sweep(root: Path, doc: Mapping[str, Any]) -> None:
    atomic_write_bytes(root / "sweep.json", orjson.dumps(doc, option=orjson.OPT_INDENT_2))
    write_sweep_report(root, doc)
