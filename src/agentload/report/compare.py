"""Side-by-side comparison of two results directories with bootstrap confidence intervals."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from agentload.results.summary import SUCCESS_REWARD, MeasuredRun, load_measured
from agentload.results.window import session_window

CONFIDENCE = 0.95
RESAMPLES = 1000
_CHUNK_ELEMENTS = 4_000_000  # resamples are drawn in chunks to bound memory on 100k-call runs


def bootstrap(
    values: np.ndarray,
    stat: Callable[[np.ndarray], np.ndarray],
    *,
    n_resamples: int = RESAMPLES,
    confidence: float = CONFIDENCE,
    seed: int = 0,
) -> list[tuple[float, float]] | None:
    """Percentile-bootstrap CIs of `stat`, which maps a (resamples, n) matrix to one row of
    statistics per resample, shape (resamples,) or (m, resamples) for m statistics at once.

    Same method as `agentload.stats.bootstrap_ci`, drawn in chunks so that a run with 100k
    calls does not need a (resamples x calls) matrix in memory at once; several statistics of
    the same values (p50 / p90 / p99) share the resamples.
    """
    v = values[np.isfinite(values)]
    if v.size < 2:
        return None
    rng = np.random.default_rng(seed)
    per_chunk = max(1, _CHUNK_ELEMENTS // v.size)
    out: list[np.ndarray] = []
    left = n_resamples
    while left > 0:
        k = min(per_chunk, left)
        res = np.asarray(stat(v[rng.integers(0, v.size, size=(k, v.size))]), dtype=float)
        out.append(np.atleast_2d(res))
        left -= k
    stats = np.concatenate(out, axis=1)
    alpha = (1 - confidence) / 2
    bounds = np.percentile(stats, [100 * alpha, 100 * (1 - alpha)], axis=1)
    return [(float(lo), float(hi)) for lo, hi in bounds.T]


QS = (50, 90, 99)


def _percentiles(values: np.ndarray, name: str, seed: int) -> dict[str, dict[str, Any]]:
    v = values[np.isfinite(values)]
    cis = bootstrap(v, lambda m: np.percentile(m, QS, axis=1), seed=seed)
    points = np.percentile(v, QS) if v.size else [None] * len(QS)
    return {
        f"{name}_p{q}": {
            "value": None if p is None else float(p),
            "ci": cis[i] if cis else None,
            "n": int(v.size),
        }
        for i, (q, p) in enumerate(zip(QS, points, strict=True))
    }


def _mean_metric(values: np.ndarray, seed: int) -> dict[str, Any]:
    v = values[np.isfinite(values)]
    cis = bootstrap(v, lambda m: m.mean(axis=1), seed=seed)
    return {
        "value": float(v.mean()) if v.size else None,
        "ci": cis[0] if cis else None,
        "n": int(v.size),
    }


def compare_metrics(run: MeasuredRun, role: str | None = "agent") -> dict[str, dict[str, Any]]:
    """Headline metrics of one run with 95 % bootstrap CIs (calls of `role`, else all)."""
    a = run.calls
    m = run.measured & a.ok
    if role is not None and (m & (a.role == role)).any():
        m = m & (a.role == role)
    out: dict[str, dict[str, Any]] = {}
    out.update(_percentiles(a.ttft[m], "ttft", seed=1))
    out.update(_percentiles(a.e2e[m], "e2e", seed=2))
    out["tpot_p50"] = _percentiles(a.tpot[m], "tpot", seed=3)["tpot_p50"]
    out["itl_mean"] = _mean_metric(a.itl_mean[m], seed=4)
    if run.sessions:
        succ = np.array([float((s.get("reward") or 0.0) >= SUCCESS_REWARD) for s in run.sessions])
        out["success_rate"] = _mean_metric(succ, seed=5)
        # the summary's window: monotonic clock, robust to wall-clock steps
        minutes = (session_window(run.sessions)["duration_s"] or 0.0) / 60
        out["episodes_per_min"] = {
            "value": len(run.sessions) / minutes if minutes > 0 else None,
            "ci": None,
            "n": len(run.sessions),
        }
    return out


def compare_dirs(dir_a: Path, dir_b: Path, role: str | None = "agent") -> dict[str, Any]:
    ma = compare_metrics(load_measured(dir_a), role)
    mb = compare_metrics(load_measured(dir_b), role)
    rows: dict[str, Any] = {}
    for key in ma.keys() | mb.keys():
        va, vb = ma.get(key, {}).get("value"), mb.get(key, {}).get("value")
        ca, cb = ma.get(key, {}).get("ci"), mb.get(key, {}).get("ci")
        # CIs that do not overlap: the difference is unlikely to be resampling noise.
        separated = bool(ca and cb and (ca[1] < cb[0] or cb[1] < ca[0]))
        rows[key] = {
            "a": ma.get(key),
            "b": mb.get(key),
            "delta": None if va is None or vb is None else vb - va,
            "relative": None if not va or vb is None else (vb - va) / va,
            "significant": separated,
        }
    order = [
        k
        for k in (
            "ttft_p50",
            "ttft_p90",
            "ttft_p99",
            "e2e_p50",
            "e2e_p90",
            "e2e_p99",
            "tpot_p50",
            "itl_mean",
            "success_rate",
            "episodes_per_min",
        )
        if k in rows
    ]
    return {
        "a": str(dir_a),
        "b": str(dir_b),
        "confidence": CONFIDENCE,
        "metrics": {k: rows[k] for k in order},
    }
