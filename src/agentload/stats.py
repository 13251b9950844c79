"""Statistics shared by every report: percentiles, SLO attainment, throughput, bootstrap CIs.

All percentiles use linear interpolation between closest ranks (numpy's default method), the
definition in the design's measurement section.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np

PERCENTILES: tuple[float, ...] = (10, 25, 50, 75, 90, 95, 99, 99.9)


def pct_key(p: float) -> str:
    """`p99.9` style key for a percentile."""
    return f"p{p:g}"


def min_samples(p: float) -> int:
    """The fewest values a p-th percentile needs to say more than the largest values do: with
    fewer than 1 / (1 - p), it falls between the two largest (p99 needs 100, p90 10)."""
    return math.ceil(100 / (100 - p) - 1e-9)


def thin_percentiles(n: int, percentiles: Sequence[float] = PERCENTILES) -> list[str]:
    """The keys of the percentiles that `n` values are too few to carry (see min_samples)."""
    return [pct_key(p) for p in percentiles if 0 < n < min_samples(p)]


def _clean(values: Iterable[float | None]) -> np.ndarray:
    arr = np.fromiter((v for v in values if v is not None), dtype=float)
    return arr[np.isfinite(arr)]


def describe(
    values: Iterable[float | None], percentiles: Sequence[float] = PERCENTILES
) -> dict[str, float | int | None]:
    """count, mean, std, min, max and the given percentiles; `None`s are skipped.

    With no values every statistic is `None` (count 0), so reports can show a dash rather
    than a misleading zero.
    """
    arr = _clean(values)
    out: dict[str, float | int | None] = {"count": int(arr.size)}
    if arr.size == 0:
        out.update({"mean": None, "std": None, "min": None, "max": None})
        out.update({pct_key(p): None for p in percentiles})
        return out
    out["mean"] = float(arr.mean())
    out["std"] = float(arr.std(ddof=1)) if arr.size > 1 else 0.0
    out["min"] = float(arr.min())
    out["max"] = float(arr.max())
    qs = np.percentile(arr, list(percentiles))
    out.update({pct_key(p): float(q) for p, q in zip(percentiles, qs, strict=True)})
    if thin := thin_percentiles(int(arr.size), percentiles):
        out["thin"] = thin  # type: ignore[assignment]
    return out


def percentile_sorted(sorted_vals: Sequence[float], q: float) -> float | None:
    """The q-quantile (0..1) of already sorted values by linear interpolation between closest
    ranks (numpy's default), in pure Python: numpy's call overhead dominates for the tens to
    thousands of values of one call or a progress window."""
    n = len(sorted_vals)
    if n == 0:
        return None
    if n == 1:
        return sorted_vals[0]
    pos = (n - 1) * q
    lo = int(pos)
    hi = min(lo + 1, n - 1)
    return sorted_vals[lo] + (sorted_vals[hi] - sorted_vals[lo]) * (pos - lo)


def percentile(values: Iterable[float | None], p: float) -> float | None:
    arr = _clean(values)
    return float(np.percentile(arr, p)) if arr.size else None


def slo_attainment(values: Iterable[float | None], threshold: float) -> float | None:
    """Share of values at or below `threshold`; a missing value (a failed call) counts as a miss."""
    vals = list(values)
    if not vals:
        return None
    arr = np.array([math.inf if v is None else v for v in vals], dtype=float)
    return float(np.mean(arr <= threshold))


def slo_attainment_all(
    rows: Sequence[Mapping[str, float | None]], thresholds: Mapping[str, float]
) -> float | None:
    """Share of rows that meet every threshold (row[key] <= threshold for each key)."""
    if not rows:
        return None
    ok = 0
    for row in rows:
        if all((v := row.get(k)) is not None and v <= t for k, t in thresholds.items()):
            ok += 1
    return ok / len(rows)


def throughput(
    event_times_s: Iterable[float],
    amounts: Iterable[float] | None = None,
    *,
    window: tuple[float, float] | None = None,
) -> float | None:
    """Events (or summed amounts) per second over `window` (default: first to last event)."""
    t = np.fromiter(event_times_s, dtype=float)
    a = np.ones_like(t) if amounts is None else np.fromiter(amounts, dtype=float)
    if t.size == 0:
        return None
    lo, hi = window if window is not None else (float(t.min()), float(t.max()))
    span = hi - lo
    if span <= 0:
        return None
    mask = (t >= lo) & (t <= hi)
    return float(a[mask].sum() / span)


def bootstrap_ci(
    values: Sequence[float],
    stat: Callable[..., Any] = np.mean,
    *,
    confidence: float = 0.95,
    n_resamples: int = 2000,
    seed: int = 0,
) -> tuple[float, float] | None:
    """Percentile-bootstrap confidence interval of `stat` (vectorised over resamples)."""
    arr = _clean(values)
    if arr.size < 2:
        return None
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, arr.size, size=(n_resamples, arr.size))
    samples = arr[idx]
    try:
        stats = np.asarray(stat(samples, axis=1), dtype=float)
    except TypeError:
        stats = np.array([stat(s) for s in samples], dtype=float)
    alpha = (1 - confidence) / 2
    lo, hi = np.percentile(stats, [100 * alpha, 100 * (1 - alpha)])
    return float(lo), float(hi)


def pass_hat_k(successes: Mapping[str, Sequence[bool]]) -> dict[int, float]:
    """pass^k = mean over tasks of C(c, k) / C(n, k), for k = 1 .. the smallest n.

    `successes` maps task id -> one bool per trial; tasks with no trials are ignored.
    """
    counts = [(len(s), sum(1 for x in s if x)) for s in successes.values() if len(s) > 0]
    if not counts:
        return {}
    kmax = min(n for n, _ in counts)
    return {
        k: sum(math.comb(c, k) / math.comb(n, k) for n, c in counts) / len(counts)
        for k in range(1, kmax + 1)
    }


def pace(rounds: Sequence[Mapping[Any, float]]) -> list[float | None]:
    """How fast each round of a repeated measurement ran against the rounds together: per
    round, the median over the quantities it measured of (its value / that quantity's median
    over the rounds). 1.10 is a round whose latencies ran 10 % above their usual; `None` for
    a round that shares no quantity measured in another round. Each quantity is judged
    against itself, so quantities of very different sizes (a 20 ms TTFT, a 3 ms step) weigh
    alike, and the median keeps a single odd quantity from moving a round."""
    values: dict[Any, list[float]] = {}
    for r in rounds:
        for key, v in r.items():
            if v > 0 and math.isfinite(v):
                values.setdefault(key, []).append(v)
    usual = {k: float(np.median(vs)) for k, vs in values.items() if len(vs) >= 2}
    out: list[float | None] = []
    for r in rounds:
        ratios = [v / usual[k] for k, v in r.items() if k in usual and v > 0 and math.isfinite(v)]
        out.append(float(np.median(ratios)) if ratios else None)
    return out


def moved(paces: Sequence[float | None]) -> float | None:
    """How far the rounds' paces lie apart (highest less lowest); None with fewer than two."""
    known = [p for p in paces if p is not None]
    return max(known) - min(known) if len(known) >= 2 else None
