"""Log a run or a sweep to MLflow: parameters (the run's context), metrics (headline figures)
and artifacts (report with its charts, summary, records).

A sweep is a parent run (the sweep's parameters, knee and best point, sweep.html / .md / .json)
with one nested child run per load point, logged like a run; a run and a sweep point carry the
same metric names (`run_metrics`).

Enabled by `--mlflow` or by MLFLOW_TRACKING_URI in the environment; needs the `mlflow` extra
(MLflow 2.14 up to 3.x).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from contextlib import redirect_stdout
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import orjson

from agentload.redact import redact_text
from agentload.results.context import flatten
from agentload.results.records import Describe, Summary, as_summary

EXPERIMENT = "agentload"
ARTIFACTS = (
    "report.html",
    "report.md",
    "summary.json",
    "config.yaml",
    "run.json",
    "calls.jsonl",
    "sessions.jsonl",
    "trajectories.jsonl",
    "server_metrics.jsonl",
)
# report.md's images point at charts/<name>.png: logged beside it, so it renders in MLflow.
CHART_DIRS = ("charts",)
SWEEP_ARTIFACTS = ("sweep.html", "sweep.md", "sweep.json", "config.yaml")


class MlflowError(Exception):
    """MLflow logging cannot proceed; one line for the user."""


def enabled(flag: bool) -> bool:
    return flag or bool(os.environ.get("MLFLOW_TRACKING_URI"))


def one_line(e: BaseException) -> str:
    """An exception as one whole line: its type and its message, whitespace folded (MLflow's
    messages span lines and carry the URL and the remedy, so none of it is cut), with any
    credentials in it (a tracking URI's userinfo, a token) masked."""
    text = redact_text(" ".join(str(e).split()))
    return f"{type(e).__name__}: {text}" if text else type(e).__name__


def _is_file_store(uri: str) -> bool:
    scheme = urlparse(uri).scheme
    # A bare path (or a Windows drive letter) is a file store too.
    return scheme in ("", "file") or len(scheme) == 1


def _mlflow(uri: str | None) -> Any:
    # MLflow's HTTP defaults retry an unreachable server for minutes at the end of a run;
    # a benchmark should say so in seconds (the user's own settings win).
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "2")
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", "10")
    target = uri or os.environ.get("MLFLOW_TRACKING_URI") or ""
    if target and _is_file_store(target):
        # MLflow 3 keeps the file store in maintenance mode and refuses it unless this opt-in
        # is set; a `file:` URI the user named is that opt-in (their own setting wins).
        os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
    try:
        import mlflow
    except ImportError:
        raise MlflowError("MLflow logging needs mlflow: pip install 'agentload[mlflow]'") from None
    if uri:
        mlflow.set_tracking_uri(uri)
    return mlflow


def run_metrics(summary: Summary | Mapping[str, Any]) -> dict[str, float]:
    """Headline figures of a summary (a dict, or its model as it is), flat and numeric
    (MLflow metric names, the same for a run and for each sweep point)."""
    s = as_summary(summary)
    agent, allc = s.agent_calls(), s.calls.all
    out: dict[str, Any] = {}
    for key in ("ttft_s", "e2e_s", "tpot_s"):
        block: Describe = getattr(agent, key)
        for p in ("p50", "p90", "p99", "mean"):
            out[f"{key[:-2]}_{p}_s"] = block.stat(p)
    gaps = agent.itl_s.all_gaps or Describe()
    for p in ("p50", "p90", "p99"):
        out[f"itl_{p}_s"] = gaps.stat(p)
    out["itl_mean_s"] = agent.itl_s.mean
    if "calls" in s.model_fields_set:
        out["calls"] = allc.calls
        out["failed_calls"] = allc.failed
    out["error_rate"] = s.errors.error_rate
    out["output_tokens_per_s"] = allc.throughput.output_tokens_per_s
    out["cached_share"] = allc.tokens.cached_share
    ep = s.episodes
    if ep is not None:
        for key in ("episodes", "success_rate", "mean_reward", "episodes_per_min"):
            out[key] = getattr(ep, key)
        for k, v in ep.pass_hat_k.items():
            out[f"pass_hat_{k}"] = v
    if s.slo is not None:
        out["slo_call_attainment"] = s.slo.call_attainment
        out["goodput_per_min"] = s.slo.goodput_per_min
    lag = s.client.event_loop_lag_s if s.client else None
    out["event_loop_lag_p99_s"] = lag.stat("p99") if lag else None
    return {k: float(v) for k, v in out.items() if isinstance(v, int | float)}


def _params(context: Mapping[str, Any]) -> dict[str, str]:
    # MLflow caps a parameter value at 6000 characters; keep them short and readable.
    return {k: str(v)[:500] for k, v in flatten(context).items() if v is not None}


def _start(mlflow: Any) -> None:
    mlflow.set_experiment(os.environ.get("MLFLOW_EXPERIMENT_NAME") or EXPERIMENT)


def _log_files(mlflow: Any, folder: Path, files: tuple[str, ...]) -> None:
    for f in files:
        if (folder / f).is_file():
            mlflow.log_artifact(str(folder / f))
    for d in CHART_DIRS:
        if (folder / d).is_dir():
            mlflow.log_artifacts(str(folder / d), artifact_path=d)


def _log_run_body(mlflow: Any, out_dir: Path, s: Summary) -> None:
    mlflow.log_params(_params(s.context or {}))
    mlflow.log_metrics(run_metrics(s))
    _log_files(mlflow, out_dir, ARTIFACTS)


def log_run(
    out_dir: Path | str, summary: Summary | Mapping[str, Any], *, uri: str | None = None
) -> str:
    """Log one results folder as an MLflow run; returns the MLflow run id."""
    out_dir = Path(out_dir)
    mlflow = _mlflow(uri)
    _start(mlflow)
    s = as_summary(summary)  # parsed once, for the name and the metrics
    name = str((s.run or {}).get("run_id") or out_dir.name)
    # MLflow prints "View run … at: URL" on stdout for a server; stdout may carry --json.
    with redirect_stdout(sys.stderr), mlflow.start_run(run_name=name) as r:
        mlflow.set_tag("agentload.kind", "run")
        _log_run_body(mlflow, out_dir, s)
        return str(r.info.run_id)


# A sweep row's figures under run_metrics' names, for a point whose summary.json is gone
# (only those with the same meaning: the row's throughput counts agent calls alone).
_ROW_NAMES = {
    **{f"{d}_{p}": f"{d}_{p}_s" for d in ("ttft", "e2e", "itl") for p in ("p50", "p90", "p99")},
    "loop_lag_p99": "event_loop_lag_p99_s",
    **{k: k for k in ("episodes", "episodes_per_min", "success_rate", "error_rate")},
    **{k: k for k in ("slo_call_attainment", "goodput_per_min")},
}


def row_metrics(row: Mapping[str, Any]) -> dict[str, float]:
    return {
        name: float(row[key])
        for key, name in _ROW_NAMES.items()
        if isinstance(row.get(key), int | float)
    }


def _read_summary(point_dir: Path) -> Summary | None:
    try:
        doc = orjson.loads((point_dir / "summary.json").read_bytes())
    except (OSError, orjson.JSONDecodeError):
        return None
    return as_summary(doc) if isinstance(doc, dict) else None


def log_sweep(root: Path | str, doc: Mapping[str, Any], *, uri: str | None = None) -> str:
    """Log a sweep as a parent MLflow run (the sweep's parameters, knee, best point and files)
    with one nested run per load point (its parameters, metrics named as a run's, its report
    and records); returns the parent's run id."""
    root = Path(root)
    mlflow = _mlflow(uri)
    _start(mlflow)
    kind = str(doc.get("kind"))
    with redirect_stdout(sys.stderr), mlflow.start_run(run_name=f"sweep {root.name}") as parent:
        mlflow.set_tag("agentload.kind", "sweep")
        mlflow.log_params(
            {
                "sweep.kind": kind,
                "sweep.points": ",".join(f"{p:g}" for p in doc.get("points_planned") or []),
                **_params(doc.get("context") or {}),
            }
        )
        top = {"points": float(len(doc.get("points") or []))}
        for key in ("knee", "best_point"):
            if isinstance(doc.get(key), int | float):
                top[key] = float(doc[key])
        mlflow.log_metrics(top)
        _log_files(mlflow, root, SWEEP_ARTIFACTS)
        for row in doc.get("points") or []:
            point = float(row[kind])
            point_dir = root / str(row.get("dir") or "")
            summary = _read_summary(point_dir) if row.get("dir") else None
            with mlflow.start_run(run_name=f"{kind} {point:g}", nested=True):
                mlflow.set_tags({"agentload.kind": "sweep point", "status": str(row.get("status"))})
                mlflow.log_params({"sweep.kind": kind, "sweep.point": f"{point:g}"})
                if summary is not None:
                    _log_run_body(mlflow, point_dir, summary)
                else:
                    mlflow.log_metrics(row_metrics(row))
        return str(parent.info.run_id)
