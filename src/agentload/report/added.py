"""Latency a gateway (or `agentload proxy`) adds: the same workload run directly (A) and through
the gateway (B), compared per role with bootstrap confidence intervals of the difference.

Each arm's episodes are resampled independently (cluster bootstrap, as in `report.compare`:
the calls of one episode share its context and fate); each resample pair gives B − A and
(B − A) / A for every statistic, and the percentiles of those give the CIs. ITL percentiles are
over every inter-token gap (the calls' `itl_hist`, merged per resample), as in summary.json.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from agentload.client import itlhist
from agentload.report.compare import CONFIDENCE, RESAMPLES, Clusters
from agentload.results.dirs import load_sweep
from agentload.results.jsonl import ResultsError
from agentload.results.summary import MeasuredRun, load_measured

METRICS = ("ttft", "e2e", "itl")
STATS = ("p50", "p90", "p99", "mean")
NAMES = tuple(f"{m}_{s}" for m in METRICS for s in STATS)
DEFAULT_GATE = ("ttft_p50", "e2e_p50")
# Exit codes of `agentload compare --max-added` (2 is a usage error).
EXIT_WITHIN, EXIT_EXCEEDS, EXIT_INCONCLUSIVE = 0, 1, 3


@dataclass(frozen=True)
class Threshold:
    """`5%` (relative to the direct arm) or `2ms` / `0.002s` (absolute)."""

    value: float
    relative: bool

    def __str__(self) -> str:
        return f"{self.value * 100:g}%" if self.relative else f"{self.value * 1e3:g} ms"


_THRESHOLD = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*(%|ms|s)\s*$")


def parse_threshold(text: str) -> Threshold:
    """`5%`, `2ms` or `0.5s`; raises ValueError with one line saying what is accepted."""
    m = _THRESHOLD.match(text)
    if not m:
        raise ValueError(f"--max-added {text!r}: expected a percentage (5%) or a time (2ms, 0.5s)")
    v, unit = float(m.group(1)), m.group(2)
    if unit == "%":
        return Threshold(v / 100, True)
    return Threshold(v / 1e3 if unit == "ms" else v, False)


class _Arm:
    """One run's ok, measured calls of one role, ready for fast resampled statistics."""

    def __init__(self, run: MeasuredRun, role: str) -> None:
        a = run.calls
        sel = np.flatnonzero(run.measured & a.ok & (a.role == role))
        self.n = sel.size
        self.clusters = Clusters(a.session_id[sel])
        self.ttft, self.e2e = a.ttft[sel], a.e2e[sel]
        # Every call's ITL histogram as flat (call, bucket, count) columns, so that a resample
        # merges its histograms with one bincount.
        rows = [(i, h) for i, j in enumerate(sel) if (h := a.itl_hist[j])]
        self.h_call = np.concatenate(
            [np.full(len(h) // 2, i) for i, h in rows] or [np.zeros(0, np.int64)]
        ).astype(np.int64)
        flat = np.fromiter((x for _, h in rows for x in h), dtype=np.int64)
        self.h_bucket, self.h_count = flat[0::2], flat[1::2].astype(float)
        self.nbuckets = int(self.h_bucket.max()) + 1 if self.h_bucket.size else 1
        self.values = itlhist.bucket_value(np.arange(self.nbuckets))

    def stats(self, idx: np.ndarray | None) -> np.ndarray:
        """The 12 statistics of NAMES over the calls `idx` (None: all)."""
        out = np.full(len(NAMES), math.nan)
        for k, v in enumerate((self.ttft, self.e2e)):
            x = v if idx is None else v[idx]
            x = x[np.isfinite(x)]
            if x.size:
                out[4 * k : 4 * k + 3] = np.percentile(x, (50, 90, 99))
                out[4 * k + 3] = x.mean()
        mult = np.ones(self.n) if idx is None else np.bincount(idx, minlength=self.n)
        counts = np.bincount(
            self.h_bucket, weights=self.h_count * mult[self.h_call], minlength=self.nbuckets
        )
        total = counts.sum()
        if total > 0:
            cum = np.cumsum(counts)
            ranks = np.maximum(1, np.ceil(np.array((0.5, 0.9, 0.99)) * total))
            out[8:11] = self.values[np.searchsorted(cum, ranks)]
            out[11] = float((counts * self.values).sum() / total)
        return out


def _ci(samples: np.ndarray) -> list[tuple[float, float] | None]:
    alpha = (1 - CONFIDENCE) / 2
    out: list[tuple[float, float] | None] = []
    for col in samples.T:
        f = col[np.isfinite(col)]
        if f.size < 10:
            out.append(None)
        else:
            lo, hi = np.percentile(f, [100 * alpha, 100 * (1 - alpha)])
            out.append((float(lo), float(hi)))
    return out


def _none(x: float) -> float | None:
    return None if not math.isfinite(x) else float(x)


def _role(ra: MeasuredRun, rb: MeasuredRun, role: str, n_resamples: int, seed: int) -> dict:
    a, b = _Arm(ra, role), _Arm(rb, role)
    pa, pb = a.stats(None), b.stats(None)
    rng = np.random.default_rng(seed)
    diffs = np.empty((n_resamples, len(NAMES)))
    rels = np.empty_like(diffs)
    can = a.clusters.n >= 2 and b.clusters.n >= 2
    for i in range(n_resamples if can else 0):
        sa = a.stats(a.clusters.resample(rng))
        sb = b.stats(b.clusters.resample(rng))
        diffs[i] = sb - sa
        with np.errstate(divide="ignore", invalid="ignore"):
            rels[i] = np.where(sa > 0, (sb - sa) / sa, math.nan)
    d_ci = _ci(diffs) if can else [None] * len(NAMES)
    r_ci = _ci(rels) if can else [None] * len(NAMES)
    metrics = {}
    for k, name in enumerate(NAMES):
        added = pb[k] - pa[k]
        metrics[name] = {
            "direct": _none(pa[k]),
            "gateway": _none(pb[k]),
            "added": _none(added),
            "added_ci": d_ci[k],
            "relative": _none(added / pa[k]) if pa[k] > 0 else None,
            "relative_ci": r_ci[k],
        }
    return {
        "calls": {"direct": a.n, "gateway": b.n},
        "episodes": {"direct": a.clusters.n, "gateway": b.clusters.n},
        "metrics": metrics,
    }


def _verdict(row: dict[str, Any], limit: Threshold) -> str:
    """within (the CI's upper bound is under the limit), exceeds (its lower bound is over),
    inconclusive (the CI straddles it, or there is none)."""
    ci = row["relative_ci"] if limit.relative else row["added_ci"]
    if ci is None:
        return "inconclusive"
    if ci[1] <= limit.value:
        return "within"
    if ci[0] > limit.value:
        return "exceeds"
    return "inconclusive"


def added_latency(
    direct: Path,
    gateway: Path,
    *,
    roles: list[str] | None = None,
    max_added: Threshold | None = None,
    gate: tuple[str, ...] = DEFAULT_GATE,
    n_resamples: int = RESAMPLES,
    seed: int = 0,
) -> dict[str, Any]:
    """Added latency per role (B − A, absolute and relative, with CIs) and, given a limit, the
    verdict: `exceeds` if any gated figure of any role exceeds it, `within` if all are within,
    else `inconclusive`."""
    ra, rb = load_measured(direct), load_measured(gateway)

    def present(r: MeasuredRun) -> set[str]:
        return set(r.calls.role[r.measured & r.calls.ok].tolist())

    common = sorted(present(ra) & present(rb))
    chosen = [r for r in (roles or common) if r in common]
    out: dict[str, Any] = {
        "direct": str(direct),
        "gateway": str(gateway),
        "confidence": CONFIDENCE,
        "resampling": "episodes of each run, independently (cluster bootstrap)",
        "roles": {r: _role(ra, rb, r, n_resamples, seed + i) for i, r in enumerate(chosen)},
        "missing_roles": sorted(set(roles or []) - set(common)),
    }
    if max_added is not None:
        checks = [
            {"role": r, "metric": m, "verdict": _verdict(out["roles"][r]["metrics"][m], max_added)}
            for r in chosen
            for m in gate
        ]
        overall = _overall({c["verdict"] for c in checks})
        out["gate"] = {
            "max_added": str(max_added),
            "relative": max_added.relative,
            "limit": max_added.value,
            "metrics": list(gate),
            "checks": checks,
            "verdict": overall,
        }
    return out


def exit_code(result: dict[str, Any]) -> int:
    verdict = (result.get("gate") or {}).get("verdict")
    return {"exceeds": EXIT_EXCEEDS, "inconclusive": EXIT_INCONCLUSIVE}.get(
        verdict or "", EXIT_WITHIN
    )


def _overall(verdicts: set[str]) -> str:
    if "exceeds" in verdicts:
        return "exceeds"
    return "within" if verdicts == {"within"} else "inconclusive"


def _points(root: Path) -> tuple[str, dict[float, str]]:

    doc = load_sweep(root)
    kind = str(doc["kind"])
    return kind, {float(r[kind]): str(r["dir"]) for r in doc["points"]}


def added_latency_sweep(
    direct: Path, gateway: Path, *, max_added: Threshold | None = None, **kw: Any
) -> dict[str, Any]:
    """Two sweeps over the same load points, one direct and one through the gateway: the
    added latency at every point both finished; the verdict is the worst point's."""

    kind_a, pa = _points(direct)
    kind_b, pb = _points(gateway)
    if kind_a != kind_b:
        raise ResultsError(f"the sweeps vary different things: {kind_a} and {kind_b}")
    common = sorted(pa.keys() & pb.keys())
    if not common:
        raise ResultsError(f"the sweeps share no {kind_a} point")
    points = [
        {
            kind_a: p,
            **added_latency(direct / pa[p], gateway / pb[p], max_added=max_added, **kw),
        }
        for p in common
    ]
    out: dict[str, Any] = {
        "direct": str(direct),
        "gateway": str(gateway),
        "kind": kind_a,
        "points": points,
        "unmatched": sorted(pa.keys() ^ pb.keys()),
    }
    if max_added is not None:
        out["gate"] = {
            **{k: v for k, v in points[0]["gate"].items() if k not in ("checks", "verdict")},
            "checks": [{kind_a: pt[kind_a], **c} for pt in points for c in pt["gate"]["checks"]],
            "verdict": _overall({pt["gate"]["verdict"] for pt in points}),
        }
    return out
