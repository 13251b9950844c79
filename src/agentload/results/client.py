"""summary.json "client" across resumed attempts: figures of all attempts, not the last one.

The event-loop lag samples of an attempt are kept as a log-bucketed histogram (2 % wide
buckets from 1 µs: percentiles within 1 %, count / mean / min / max exact), so a resumed run
merges them with the earlier attempts' histogram from the previous summary.json. Scheduling
delay is recomputed from every recorded episode (`sched_delay_s` of each session line), which
is exact across attempts.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from agentload.results.jsonl import read_jsonl
from agentload.stats import describe, pct_key

HIST_BASE_S = 1e-6
HIST_GROWTH = 1.02
_LOG_G = math.log(HIST_GROWTH)
LAG_PERCENTILES = (50, 90, 99, 99.9)
DELAY_PERCENTILES = (50, 90, 99)


def lag_histogram(samples: Iterable[float]) -> dict[str, Any]:
    v = np.asarray(list(samples) if not isinstance(samples, np.ndarray) else samples, float)
    v = v[np.isfinite(v) & (v >= 0)]
    h: dict[str, Any] = {
        "base_s": HIST_BASE_S,
        "growth": HIST_GROWTH,
        "count": int(v.size),
        "sum": float(v.sum()),
        "sumsq": float((v * v).sum()),
        "min": float(v.min()) if v.size else None,
        "max": float(v.max()) if v.size else None,
        "zero": int((v < HIST_BASE_S).sum()),
        "bins": {},
    }
    pos = v[v >= HIST_BASE_S]
    if pos.size:
        idx = np.floor(np.log(pos / HIST_BASE_S) / _LOG_G).astype(np.int64)
        keys, counts = np.unique(idx, return_counts=True)
        h["bins"] = {str(int(k)): int(c) for k, c in zip(keys, counts, strict=True)}
    return h


def _valid_hist(h: Any) -> bool:
    return (
        isinstance(h, Mapping)
        and h.get("base_s") == HIST_BASE_S
        and h.get("growth") == HIST_GROWTH
        and isinstance(h.get("bins"), Mapping)
        and isinstance(h.get("count"), int)
    )


def merge_histograms(a: Mapping[str, Any], b: Mapping[str, Any]) -> dict[str, Any]:
    bins: dict[str, int] = dict(a["bins"])
    for k, c in b["bins"].items():
        bins[k] = bins.get(k, 0) + int(c)
    mins = [x for x in (a.get("min"), b.get("min")) if x is not None]
    maxs = [x for x in (a.get("max"), b.get("max")) if x is not None]
    return {
        "base_s": HIST_BASE_S,
        "growth": HIST_GROWTH,
        "count": int(a["count"]) + int(b["count"]),
        "sum": float(a.get("sum") or 0) + float(b.get("sum") or 0),
        "sumsq": float(a.get("sumsq") or 0) + float(b.get("sumsq") or 0),
        "min": min(mins) if mins else None,
        "max": max(maxs) if maxs else None,
        "zero": int(a.get("zero") or 0) + int(b.get("zero") or 0),
        "bins": bins,
    }


def describe_histogram(
    h: Mapping[str, Any], percentiles: Iterable[float] = LAG_PERCENTILES
) -> dict[str, Any]:

    ps = list(percentiles)
    n = int(h["count"])
    out: dict[str, Any] = {"count": n}
    if n == 0:
        out.update({"mean": None, "std": None, "min": None, "max": None})
        out.update({pct_key(p): None for p in ps})
        return out
    mean = h["sum"] / n
    var = max(0.0, h["sumsq"] / n - mean * mean) * (n / (n - 1) if n > 1 else 0.0)
    out.update({"mean": mean, "std": math.sqrt(var), "min": h["min"], "max": h["max"]})
    keys = sorted(int(k) for k in h["bins"])
    cum = np.cumsum([int(h.get("zero") or 0)] + [int(h["bins"][str(k)]) for k in keys])
    for p in ps:
        rank = p / 100 * (n - 1)
        i = int(np.searchsorted(cum, rank + 1, side="left"))
        if i == 0:
            val = 0.0
        else:
            k = keys[i - 1]
            val = HIST_BASE_S * HIST_GROWTH ** (k + 0.5)  # the bucket's geometric middle
        out[pct_key(p)] = float(min(max(val, h["min"]), h["max"]))
    return out


def _sched_delays(out_dir: Path) -> dict[str, Any]:

    vals = []
    for s in read_jsonl(out_dir / "sessions.jsonl", warn=False).records:
        v = s.get("sched_delay_s")
        if isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v):
            vals.append(float(v))
    return describe(vals, DELAY_PERCENTILES)


def _previous_client(out_dir: Path) -> dict[str, Any] | None:
    try:
        prev = orjson.loads((out_dir / "summary.json").read_bytes())
    except (OSError, orjson.JSONDecodeError):
        return None
    client = prev.get("client") if isinstance(prev, dict) else None
    if not isinstance(client, dict) or not _valid_hist(client.get("event_loop_lag_hist")):
        return None
    return client


def _attempt_brief(block: Mapping[str, Any]) -> dict[str, Any]:
    lag = block.get("event_loop_lag_s") or {}
    return {
        "resume_attempt": block.get("resume_attempt"),
        "stop_reason": block.get("stop_reason"),
        "elapsed_s": block.get("elapsed_s"),
        "episodes_started": block.get("episodes_started"),
        "episodes_finished": block.get("episodes_finished"),
        "event_loop_lag_p99_s": lag.get("p99") if isinstance(lag, Mapping) else None,
    }


def _num(x: Any) -> float:
    return float(x) if isinstance(x, int | float) and not isinstance(x, bool) else 0.0


def combine_client(out_dir: Path, block: dict[str, Any], *, resume: bool) -> dict[str, Any]:
    """The client block of this attempt, combined with the earlier attempts' on a resume.

    `attempts` lists each attempt's own figures; the top-level figures cover all attempts
    whose summary was written (an attempt killed before its summary left no client figures:
    `attempts_without_figures` counts them).
    """
    out = dict(block)
    this = _attempt_brief(block)
    prev = _previous_client(out_dir) if resume else None
    if prev is None:
        out["attempts"] = [this]
        attempt = block.get("resume_attempt")
        out["attempts_without_figures"] = attempt if resume and isinstance(attempt, int) else 0
        if resume:
            out["sched_delay_s"] = _sched_delays(out_dir)
        return out
    hist = merge_histograms(prev["event_loop_lag_hist"], block["event_loop_lag_hist"])
    lag = describe_histogram(hist)
    lag["interval_s"] = (block.get("event_loop_lag_s") or {}).get("interval_s")
    out["event_loop_lag_hist"] = hist
    out["event_loop_lag_s"] = lag
    out["sched_delay_s"] = _sched_delays(out_dir)
    for key in ("episodes_started", "episodes_finished", "episodes_cancelled"):
        out[key] = int(_num(prev.get(key)) + _num(block.get(key)))
    # Times add up over the attempts, so the CPU share (cpu_s / elapsed_s) covers them all.
    for key in ("elapsed_s", "cpu_s"):
        out[key] = _num(prev.get(key)) + _num(block.get(key))
    out["max_active"] = int(max(_num(prev.get("max_active")), _num(block.get("max_active"))))
    elapsed = out["elapsed_s"]
    out["episodes_per_s"] = out["episodes_finished"] / elapsed if elapsed else None
    prev_attempts = prev.get("attempts")
    if not isinstance(prev_attempts, list):
        prev_attempts = []
    out["attempts"] = [*prev_attempts, this]
    attempt = block.get("resume_attempt")
    done = len(out["attempts"])
    total = attempt + 1 if isinstance(attempt, int) else done
    out["attempts_without_figures"] = max(0, total - done)
    return out
