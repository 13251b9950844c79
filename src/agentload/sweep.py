"""The sweep: the same run at several load points (one sub-folder each), tabulated, with the
highest load that meets the SLO."""

from __future__ import annotations

import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import orjson
import yaml

from agentload.config import ConfigError, RunConfig, build_config, config_to_dict
from agentload.fmt import num, pct, secs
from agentload.runner import (
    EXIT_INTERRUPTED,
    EXIT_OK,
    RunOutcome,
    Say,
    execute_run,
    results_lock,
    say_stderr,
)
from agentload.util import dig

SWEEP_SCHEMA = "agentload.sweep/1"


def sweep_row(point: float, kind: str, out: RunOutcome) -> dict[str, Any]:
    s = out.summary or {}
    agent = dig(s, "calls", "by_role", "agent") or dig(s, "calls", "all") or {}
    eps = dig(s, "episodes") or {}
    slo = dig(s, "slo")
    client = dig(s, "client") or {}
    return {
        kind: point,
        "dir": out.out_dir.name,
        "status": out.stop_reason,
        "episodes": dig(s, "counts", "sessions"),
        "episodes_per_min": dig(eps, "episodes_per_min"),
        "calls_per_s": dig(agent, "throughput", "calls_per_s"),
        "output_tokens_per_s": dig(agent, "throughput", "output_tokens_per_s"),
        "ttft_p50": dig(agent, "ttft_s", "p50"),
        "ttft_p90": dig(agent, "ttft_s", "p90"),
        "ttft_p99": dig(agent, "ttft_s", "p99"),
        "e2e_p50": dig(agent, "e2e_s", "p50"),
        "e2e_p99": dig(agent, "e2e_s", "p99"),
        "success_rate": dig(eps, "success_rate"),
        "error_rate": dig(s, "errors", "error_rate"),
        "slo_met": None if not slo else bool(slo.get("all_met")),
        "slo_call_attainment": None if not slo else slo.get("call_attainment"),
        "goodput_per_min": None if not slo else slo.get("goodput_per_min"),
        "loop_lag_p99": dig(client, "event_loop_lag_s", "p99"),
        "sched_delay_p99": dig(client, "sched_delay_s", "p99"),
    }


def point_dir_name(kind: str, point: float) -> str:
    if kind == "concurrency":
        return f"c{int(point):04d}"
    return f"r{point:g}".replace(".", "_")


def _fmt(v: Any, unit: str = "") -> str:
    if unit == "s":
        return secs(v)
    if unit == "%":
        return pct(v)
    return num(v) if isinstance(v, float) else ("-" if v is None else str(v))


SWEEP_COLUMNS = [
    ("episodes", "episodes", ""),
    ("episodes/min", "episodes_per_min", ""),
    ("calls/s", "calls_per_s", ""),
    ("out tok/s", "output_tokens_per_s", ""),
    ("TTFT p50", "ttft_p50", "s"),
    ("TTFT p90", "ttft_p90", "s"),
    ("TTFT p99", "ttft_p99", "s"),
    ("e2e p99", "e2e_p99", "s"),
    ("success", "success_rate", "%"),
    ("errors", "error_rate", "%"),
    ("SLO", "slo_met", ""),
    ("goodput/min", "goodput_per_min", ""),
]


def sweep_markdown(doc: Mapping[str, Any]) -> str:
    kind = doc["kind"]
    head = [kind] + [c[0] for c in SWEEP_COLUMNS]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in doc["points"]:
        cells = [f"{row[kind]:g}"]
        for _, key, unit in SWEEP_COLUMNS:
            v = row.get(key)
            cells.append(
                ("yes" if v else "no") if key == "slo_met" and v is not None else _fmt(v, unit)
            )
        lines.append("| " + " | ".join(cells) + " |")
    best = doc.get("best_point")
    if doc.get("slo"):
        slo = ", ".join(f"{k} ≤ {v:g}s" for k, v in doc["slo"].items())
        lines.append("")
        lines.append(
            f"Highest {kind} meeting the SLO ({slo}): **{best:g}**"
            if best is not None
            else f"No point met the SLO ({slo})."
        )
    return "\n".join(lines) + "\n"


def sweep_table(doc: Mapping[str, Any]) -> Any:
    from rich.table import Table

    kind = doc["kind"]
    t = Table(title=f"sweep over {kind}")
    t.add_column(kind, justify="right")
    for name, _, _ in SWEEP_COLUMNS:
        t.add_column(name, justify="right")
    for row in doc["points"]:
        cells = [f"{row[kind]:g}"]
        for _, key, unit in SWEEP_COLUMNS:
            v = row.get(key)
            if key == "slo_met" and v is not None:
                cells.append("[green]yes[/]" if v else "[red]no[/]")
            else:
                cells.append(_fmt(v, unit))
        t.add_row(*cells)
    return t


async def execute_sweep(cfg: RunConfig, **kwargs: Any) -> tuple[dict[str, Any], int]:
    """A sweep holds its root folder's lock; each point holds its own folder's."""
    with results_lock(Path(cfg.out), "sweep"):
        return await _execute_sweep(cfg, **kwargs)


async def _execute_sweep(
    cfg: RunConfig,
    *,
    kind: str,  # concurrency | rate
    points: list[float],
    stop_on_slo_fail: bool = False,
    progress: str = "auto",
    say: Say = say_stderr,
    progress_interval_s: float = 10.0,
    overwrite: bool = False,
) -> tuple[dict[str, Any], int]:
    """Run every point into <out>/<point>/; writes sweep.json and sweep.md in <out>."""
    root = _sweep_root(cfg, overwrite)
    base = cfg.model_dump(by_alias=True)
    doc: dict[str, Any] = {
        "schema": SWEEP_SCHEMA,
        "kind": kind,
        "points_planned": points,
        "slo": dict(cfg.slo),
        "started_at": time.time(),
        "points": [],
        "best_point": None,
        "status": "running",
    }
    _write_text(root / "config.yaml", yaml.safe_dump(config_to_dict(cfg), sort_keys=False))
    code = EXIT_OK
    for i, point in enumerate(points):
        data = dict(base)
        data["out"] = str(root / point_dir_name(kind, point))
        load = dict(data["load"])
        if kind == "concurrency":
            load["concurrency"], load["rate"], load["max_concurrency"] = int(point), None, None
        else:
            load["rate"], load["concurrency"] = float(point), None
        data["load"] = load
        point_cfg = build_config(data=data)
        say(f"sweep point {i + 1}/{len(points)}: {kind} {point:g}")
        out = await execute_run(
            point_cfg,
            progress=progress,
            say=say,
            progress_interval_s=progress_interval_s,
            progress_title=f"{kind} {point:g}",
            overwrite=overwrite,
        )
        row = sweep_row(point, kind, out)
        doc["points"].append(row)
        if row["slo_met"]:
            doc["best_point"] = (
                point if doc["best_point"] is None else max(doc["best_point"], point)
            )
        _write_sweep(root, doc)
        if out.exit_code != EXIT_OK:
            code = out.exit_code
            break
        if stop_on_slo_fail and cfg.slo and row["slo_met"] is False:
            say(f"{kind} {point:g} misses the SLO: stopping the sweep (--stop-on-slo-fail)")
            doc["stopped_on_slo_fail"] = point
            break
    doc["ended_at"] = time.time()
    doc["status"] = {EXIT_OK: "completed", EXIT_INTERRUPTED: "interrupted"}.get(code, "failed")
    _write_sweep(root, doc)
    return doc, code


def _sweep_root(cfg: RunConfig, overwrite: bool) -> Path:
    root = Path(cfg.out)
    root.mkdir(parents=True, exist_ok=True)
    if (root / "sweep.json").exists() and not overwrite:
        raise ConfigError(f"{root} already holds a sweep; choose another --out (or --overwrite)")
    return root


def _write_text(path: Path, text: str) -> None:
    path.write_text(text, encoding="utf-8")


def _write_sweep(root: Path, doc: Mapping[str, Any]) -> None:
    from agentload.results.jsonl import atomic_write_bytes

    atomic_write_bytes(root / "sweep.json", orjson.dumps(doc, option=orjson.OPT_INDENT_2))
    atomic_write_bytes(root / "sweep.md", sweep_markdown(doc).encode())
