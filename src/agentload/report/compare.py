"""Side-by-side comparison of two results directories with bootstrap confidence intervals."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from agentload.results.summary import SUCCESS_REWARD, MeasuredRun, load_measured, session_end

CONFIDENCE = 0.95
RESAMPLES = 1000
_CHUNK_ELEMENTS = 4_000_000  # resamples are drawn in chunks to bound memory on 100k-call runs


def bootstrap(
    values: np.ndarray, stat: Callable[[np.ndarray], np.ndarray], *,
    n_resamples: int = RESAMPLES, confidence: float = CONFIDENCE, seed: int = 0,
) -> tuple[float, float] | None:
    """Percentile-bootstrap CI of `stat` (which reduces axis 1 of a resample matrix).

    Same method as `agentload.stats.bootstrap_ci`, drawn in chunks so that a run with 100k
    calls does not need a (resamples x calls) matrix in memory at once.
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
        out.append(np.asarray(stat(v[rng.integers(0, v.size, size=(k, v.size))]), dtype=float))
        left -= k
    stats = np.concatenate(out)
    alpha = (1 - confidence) / 2
    lo, hi = np.percentile(stats, [100 * alpha, 100 * (1 - alpha)])
    return float(lo), float(hi)


def _pct(q: float) -> Callable[[np.ndarray], np.ndarray]:
    return lambda m: np.percentile(m, q, axis=1)


def _mean(m: np.ndarray) -> np.ndarray:
    return m.mean(axis=1)


def _metric(values: np.ndarray, stat: Callable[[np.ndarray], np.ndarray],
            point: Callable[[np.ndarray], float], seed: int) -> dict[str, Any]:
    v = values[np.isfinite(values)]
    return {
        "value": point(v) if v.size else None,
        "ci": bootstrap(v, stat, seed=seed),
        "n": int(v.size),
    }


def compare_metrics(run: MeasuredRun, role: str | None = "agent") -> dict[str, dict[str, Any]]:
    """Headline metrics of one run with 95 % bootstrap CIs (calls of `role`, else all)."""
    a = run.calls
    m = run.measured & a.ok
    if role is not None and (m & (a.role == role)).any():
        m = m & (a.role == role)
    out: dict[str, dict[str, Any]] = {}
    for name, arr in (("ttft", a.ttft), ("e2e", a.e2e)):
        for q in (50, 90, 99):
            out[f"{name}_p{q}"] = _metric(arr[m], _pct(q),
                                          lambda v, q=q: float(np.percentile(v, q)), seed=q)
    out["itl_mean"] = _metric(a.itl_mean[m], _mean, lambda v: float(v.mean()), seed=1)
    out["tpot_p50"] = _metric(a.tpot[m], _pct(50), lambda v: float(np.percentile(v, 50)),
                              seed=2)
    if run.sessions:
        succ = np.array([float((s.get("reward") or 0.0) >= SUCCESS_REWARD)
                         for s in run.sessions])
        out["success_rate"] = _metric(succ, _mean, lambda v: float(v.mean()), seed=3)
        start = min(float(s.get("started_at") or 0.0) for s in run.sessions)
        end = max(session_end(s) for s in run.sessions)
        minutes = (end - start) / 60
        out["episodes_per_min"] = {"value": len(run.sessions) / minutes if minutes > 0 else None,
                                   "ci": None, "n": len(run.sessions)}
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
            "a": ma.get(key), "b": mb.get(key),
            "delta": None if va is None or vb is None else vb - va,
            "relative": None if not va or vb is None else (vb - va) / va,
            "significant": separated,
        }
    order = [k for k in ("ttft_p50", "ttft_p90", "ttft_p99", "e2e_p50", "e2e_p90", "e2e_p99",
                         "tpot_p50", "itl_mean", "success_rate", "episodes_per_min")
             if k in rows]
    return {"a": str(dir_a), "b": str(dir_b), "confidence": CONFIDENCE,
            "metrics": {k: rows[k] for k in order}}
