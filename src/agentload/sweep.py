"""The sweep: the same run at several load points (one sub-folder each), tabulated, with the
highest load that meets the SLO."""

from __future__ import annotations

import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from agentload.config import ConfigError, RunConfig, build_config, config_to_dict
from agentload.report.columns import SWEEP_COLUMNS, THIN_NOTE, any_thin, console_columns
from agentload.report.points import finish_doc, summary_row, write_sweep
from agentload.results.dirs import load_sweep
from agentload.results.jsonl import ResultsError
from agentload.results.records import as_summary
from agentload.runner import (
    EXIT_INTERRUPTED,
    EXIT_OK,
    RunOutcome,
    Say,
    execute_run,
    load_saved_config,
    results_lock,
    say_stderr,
)

SWEEP_SCHEMA = "agentload.sweep/1"


def sweep_row(point: float, kind: str, out: RunOutcome) -> dict[str, Any]:
    return summary_row(point, kind, out.out_dir.name, out.stop_reason, out.summary or {})


def point_dir_name(kind: str, point: float) -> str:
    if kind == "concurrency":
        return f"c{int(point):04d}"
    return f"r{point:g}".replace(".", "_")


def sweep_table(doc: Mapping[str, Any]) -> Any:
    from rich.table import Table

    kind = doc["kind"]
    t = Table(title=f"sweep over {kind}")
    cols = console_columns(SWEEP_COLUMNS)
    t.add_column(kind, justify="right")
    for c in cols:
        t.add_column(c.label, justify="right")
    for row in doc["points"]:
        cells = [f"{row[kind]:g}"]
        for c in cols:
            v = c.value(row)
            if c.label == "SLO" and v is not None:
                cells.append("[green]yes[/]" if v else "[red]no[/]")
            else:
                cells.append(c.cell(row))
        t.add_row(*cells)
    if any_thin(cols, doc["points"]):
        t.caption = THIN_NOTE
        t.caption_justify = "left"
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
    resume: bool = False,
) -> tuple[dict[str, Any], int]:
    """Run every point into <out>/<point>/; writes sweep.json, sweep.md and sweep.html.

    `resume=True` continues a sweep in `cfg.out`: finished points are kept, an interrupted
    point resumes in its folder (`run --resume`), the rest run.
    """
    root = Path(cfg.out)
    doc = _resume_doc(root) if resume else None
    if doc is None:
        root = _sweep_root(cfg, overwrite)
        doc = {
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
    kind, points = str(doc["kind"]), [float(p) for p in doc["points_planned"]]
    done = {float(r[kind]) for r in doc["points"] if r.get("status") in _DONE}
    doc["points"] = [r for r in doc["points"] if float(r[kind]) in done]
    doc["status"] = "running"
    base = cfg.model_dump(by_alias=True)
    code = EXIT_OK
    for i, point in enumerate(points):
        if point in done:
            say(f"sweep point {i + 1}/{len(points)}: {kind} {point:g} already finished")
            continue
        point_dir = root / point_dir_name(kind, point)
        again = resume and (point_dir / "run.json").exists()
        say(
            f"sweep point {i + 1}/{len(points)}: {kind} {point:g}" + (" (resumed)" if again else "")
        )
        out = await execute_run(
            load_saved_config(point_dir) if again else _point_config(base, kind, point, point_dir),
            resume=again,
            progress=progress,
            say=say,
            progress_interval_s=progress_interval_s,
            progress_title=f"{kind} {point:g}",
            overwrite=overwrite,
        )
        row = sweep_row(point, kind, out)
        doc["points"].append(row)
        doc.setdefault("context", as_summary(out.summary).context)
        finish_doc(doc)
        write_sweep(root, doc)
        if out.exit_code != EXIT_OK:
            code = out.exit_code
            break
        if stop_on_slo_fail and cfg.slo and row["slo_met"] is False:
            say(f"{kind} {point:g} misses the SLO: stopping the sweep (--stop-on-slo-fail)")
            doc["stopped_on_slo_fail"] = point
            break
    doc["ended_at"] = time.time()
    doc["status"] = {EXIT_OK: "completed", EXIT_INTERRUPTED: "interrupted"}.get(code, "failed")
    finish_doc(doc)
    write_sweep(root, doc)
    return doc, code


# Stop reasons of a point that need no resume.
_DONE = ("completed", "duration")


def _point_config(base: Mapping[str, Any], kind: str, point: float, out: Path) -> RunConfig:
    data = dict(base)
    data["out"] = str(out)
    load = dict(data["load"])
    if kind == "concurrency":
        load["concurrency"], load["rate"], load["max_concurrency"] = int(point), None, None
    else:
        load["rate"], load["concurrency"] = float(point), None
    data["load"] = load
    return build_config(data=data)


def _resume_doc(root: Path) -> dict[str, Any]:
    if not (root / "sweep.json").exists():
        raise ConfigError(f"--resume {root}: no sweep.json there (not a sweep folder?)")
    try:
        # Resuming needs the plan itself: the points listed are only those that started.
        return load_sweep(root, derive_planned=False)
    except ResultsError as e:
        raise ConfigError(f"--resume {root}: {e}") from None


def _sweep_root(cfg: RunConfig, overwrite: bool) -> Path:
    root = Path(cfg.out)
    root.mkdir(parents=True, exist_ok=True)
    if (root / "sweep.json").exists() and not overwrite:
        raise ConfigError(
            f"{root} already holds a sweep; choose another --out, --overwrite, "
            f"or continue it with `agentload sweep --resume {root}`"
        )
    return root


def _write_text(path: Path, text: str) -> None:
    path.write_text(text, encoding="utf-8")
