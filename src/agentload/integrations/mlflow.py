"""Log a run or a sweep to MLflow: parameters (the run's context), metrics (headline figures;
per load point for a sweep) and artifacts (report, summary, records).

Enabled by `--mlflow` or by MLFLOW_TRACKING_URI in the environment; needs the `mlflow` extra.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from agentload.results.context import _flat
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
SWEEP_ARTIFACTS = ("sweep.html", "sweep.md", "sweep.json", "config.yaml")


class MlflowError(Exception):
    """MLflow logging cannot proceed; one line for the user."""


def enabled(flag: bool) -> bool:
    return flag or bool(os.environ.get("MLFLOW_TRACKING_URI"))


def _mlflow(uri: str | None) -> Any:
    # MLflow's HTTP defaults retry an unreachable server for minutes at the end of a run;
    # a benchmark should say so in seconds (the user's own settings win).
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "2")
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", "10")
    try:
        import mlflow
    except ImportError:
        raise MlflowError("MLflow logging needs mlflow: pip install 'agentload[mlflow]'") from None
    if uri:
        mlflow.set_tracking_uri(uri)
    return mlflow


def run_metrics(summary: Summary | Mapping[str, Any]) -> dict[str, float]:
    """Headline figures of a summary (a dict, or its model as it is), flat and numeric
    (MLflow metric names)."""
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
    return {k: str(v)[:500] for k, v in _flat(context).items() if v is not None}


def log_run(out_dir: Path | str, summary: Mapping[str, Any], *, uri: str | None = None) -> str:
    """Log one results folder as an MLflow run; returns the MLflow run id."""
    out_dir = Path(out_dir)
    mlflow = _mlflow(uri)
    mlflow.set_experiment(os.environ.get("MLFLOW_EXPERIMENT_NAME") or EXPERIMENT)
    s = as_summary(summary)  # parsed once, for the name and the metrics
    name = str((s.run or {}).get("run_id") or out_dir.name)
    with mlflow.start_run(run_name=name) as r:
        mlflow.log_params(_params(summary.get("context") or {}))
        mlflow.log_metrics(run_metrics(s))
        for f in ARTIFACTS:
            if (out_dir / f).exists():
                mlflow.log_artifact(str(out_dir / f))
        return str(r.info.run_id)


def log_sweep(root: Path | str, doc: Mapping[str, Any], *, uri: str | None = None) -> str:
    """Log a sweep as one MLflow run: one metric series per figure, step = point index
    (the load value itself is the `load` series), plus the sweep's files."""
    root = Path(root)
    mlflow = _mlflow(uri)
    mlflow.set_experiment(os.environ.get("MLFLOW_EXPERIMENT_NAME") or EXPERIMENT)
    kind = str(doc.get("kind"))
    with mlflow.start_run(run_name=f"sweep {root.name}") as r:
        mlflow.log_params(
            {
                "sweep.kind": kind,
                "sweep.points": ",".join(f"{p:g}" for p in doc.get("points_planned") or []),
                **_params(doc.get("context") or {}),
            }
        )
        for i, row in enumerate(doc.get("points") or []):
            metrics = {"load": float(row[kind])}
            metrics.update(
                {k: float(v) for k, v in row.items() if isinstance(v, int | float) and k != kind}
            )
            mlflow.log_metrics(metrics, step=i)
        if doc.get("knee") is not None:
            mlflow.log_metric("knee", float(doc["knee"]))
        for f in SWEEP_ARTIFACTS:
            if (root / f).exists():
                mlflow.log_artifact(str(root / f))
        return str(r.info.run_id)
