"""Side-by-side comparison of two results directories with bootstrap confidence intervals."""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from agentload.results.context import context_differences, run_context
from agentload.results.summary import (
    SUCCESS_REWARD,
    UNGRADED_KINDS,
    MeasuredRun,
    load_measured,
)
from agentload.results.window import rate_seconds, session_window

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


class Clusters:
    """Calls grouped by episode, for a cluster bootstrap: calls of one episode share its
    context, its server state and its fate, so they are resampled together. Calls outside
    episodes are clusters of one."""

    def __init__(self, session_ids: np.ndarray) -> None:
        keys = np.array(
            [f"call:{i}" if s is None else f"s:{s}" for i, s in enumerate(session_ids)],
            dtype=object,
        )
        _, codes = np.unique(keys, return_inverse=True)
        self.order = np.argsort(codes, kind="stable")
        counts = np.bincount(codes)
        self.starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
        self.lengths = counts
        self.n = counts.size

    def resample(self, rng: np.random.Generator) -> np.ndarray:
        """Indices (into the calls) of one resample: n episodes drawn with replacement."""
        pick = rng.integers(0, self.n, size=self.n)
        lens = self.lengths[pick]
        total = int(lens.sum())
        # Position i of the resample: start of its episode + offset within it.
        ends = np.cumsum(lens)
        offsets = np.arange(total) - np.repeat(ends - lens, lens)
        return self.order[np.repeat(self.starts[pick], lens) + offsets]


def cluster_bootstrap(
    clusters: Clusters,
    stat: Callable[[np.ndarray], Sequence[float]],
    *,
    n_resamples: int = RESAMPLES,
    confidence: float = CONFIDENCE,
    seed: int = 0,
) -> list[tuple[float, float]] | None:
    """Percentile CIs of the statistics `stat(call indices)` over episode resamples."""
    if clusters.n < 2:
        return None
    rng = np.random.default_rng(seed)
    res = np.array([stat(clusters.resample(rng)) for _ in range(n_resamples)], dtype=float)
    alpha = (1 - confidence) / 2
    with warnings.catch_warnings():
        # A statistic with no sample in any resample (an all-NaN column) gets NaN bounds,
        # which the tables show as missing: numpy's warning about it is noise.
        warnings.simplefilter("ignore", RuntimeWarning)
        bounds = np.nanpercentile(res, [100 * alpha, 100 * (1 - alpha)], axis=0)
    return [(float(lo), float(hi)) for lo, hi in bounds.T]


def _finite_pcts(v: np.ndarray) -> list[float]:
    v = v[np.isfinite(v)]
    return np.percentile(v, QS).tolist() if v.size else [math.nan] * len(QS)


def _percentiles(
    values: np.ndarray, clusters: Clusters, name: str, seed: int
) -> dict[str, dict[str, Any]]:
    n = int(np.isfinite(values).sum())
    cis = cluster_bootstrap(clusters, lambda idx: _finite_pcts(values[idx]), seed=seed)
    points = _finite_pcts(values)
    return {
        f"{name}_p{q}": {
            "value": None if n == 0 else float(p),
            "ci": cis[i] if cis else None,
            "n": n,
        }
        for i, (q, p) in enumerate(zip(QS, points, strict=True))
    }


def _gap_mean(means: np.ndarray, counts: np.ndarray) -> float:
    """The mean of all inter-token gaps: per-call means weighted by their gap counts (the
    definition of summary.json's itl_s.mean)."""
    ok = np.isfinite(means) & (counts > 0)
    tot = counts[ok].sum()
    return float((means[ok] * counts[ok]).sum() / tot) if tot else math.nan


def _mean_metric(values: np.ndarray, seed: int) -> dict[str, Any]:
    v = values[np.isfinite(values)]
    cis = bootstrap(v, lambda m: m.mean(axis=1), seed=seed)
    return {
        "value": float(v.mean()) if v.size else None,
        "ci": cis[0] if cis else None,
        "n": int(v.size),
    }


def compare_metrics(run: MeasuredRun, role: str | None = "agent") -> dict[str, dict[str, Any]]:
    """Headline metrics of one run with 95 % bootstrap CIs (calls of `role`, else all).

    Call metrics resample whole episodes (cluster bootstrap); success rate resamples
    episodes. Each figure has the definition summary.json gives it.
    """
    a = run.calls
    m = run.measured & a.ok
    if role is not None and (m & (a.role == role)).any():
        m = m & (a.role == role)
    sel = np.flatnonzero(m)
    cl = Clusters(a.session_id[sel])
    out: dict[str, dict[str, Any]] = {}
    out.update(_percentiles(a.ttft[sel], cl, "ttft", seed=1))
    out.update(_percentiles(a.e2e[sel], cl, "e2e", seed=2))
    out["tpot_p50"] = _percentiles(a.tpot[sel], cl, "tpot", seed=3)["tpot_p50"]
    means, counts = a.itl_mean[sel], a.itl_count[sel]
    value = _gap_mean(means, counts)
    cis = cluster_bootstrap(cl, lambda idx: [_gap_mean(means[idx], counts[idx])], seed=4)
    out["itl_mean"] = {
        "value": None if math.isnan(value) else value,
        "ci": cis[0] if cis else None,
        "n": int(counts[np.isfinite(means)].sum()),
    }
    if run.sessions:
        kinds = {s.kind for s in run.sessions}
        noun = "episodes"
        if kinds <= set(UNGRADED_KINDS):
            # A replay's conversations, synthetic requests: no reward to compare.
            noun = "conversations" if kinds == {"replay"} else "sessions"
        else:
            succ = np.array([float((s.reward or 0.0) >= SUCCESS_REWARD) for s in run.sessions])
            out["success_rate"] = _mean_metric(succ, seed=5)
        # the summary's window: monotonic clock, robust to wall-clock steps
        minutes = (rate_seconds(session_window(run.sessions)) or 0.0) / 60
        out[f"{noun}_per_min"] = {
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
            "conversations_per_min",
            "sessions_per_min",
        )
        if k in rows
    ]

    return {
        "a": str(dir_a),
        "b": str(dir_b),
        "confidence": CONFIDENCE,
        "resampling": "episodes (cluster bootstrap)",
        # Every way the two runs' contexts differ: a difference in numbers may come from here.
        "context_differences": context_differences(run_context(dir_a), run_context(dir_b)),
        "metrics": {k: rows[k] for k in order},
    }
