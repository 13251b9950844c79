"""Server-side figures of a run from its server_metrics.jsonl samples.

Counters are differenced between the last sample at or before the measurement window's start
(else the first sample) and the first sample at or after its end (else the last), summing only
increases so that a server restart (a counter reset) does not produce negative deltas. Gauges
are averaged and maximised over the samples inside the window (all samples when none is).
"""

from __future__ import annotations

import itertools
import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from agentload.servermetrics.parse import COUNTERS


def counter_delta(values: Sequence[float | None]) -> float | None:
    """Increase of a cumulative counter over a series, tolerant of resets and gaps."""
    vs = [float(v) for v in values if v is not None]
    if len(vs) < 1:
        return None
    total = 0.0
    for prev, cur in itertools.pairwise(vs):
        total += cur - prev if cur >= prev else cur  # a drop means the counter restarted at 0
    return total


def _ratio(a: float | None, b: float | None) -> float | None:
    if a is None or not b:
        return None
    return a / b


def _gauge(samples: Sequence[Mapping[str, Any]], key: str) -> dict[str, float | None]:
    vs = np.array([float(s[key]) for s in samples if s.get(key) is not None])
    if vs.size == 0:
        return {"mean": None, "max": None}
    return {"mean": float(vs.mean()), "max": float(vs.max())}


def _slice(
    samples: list[Mapping[str, Any]], start: float | None, end: float | None
) -> tuple[list[Mapping[str, Any]], list[Mapping[str, Any]]]:
    """(samples for counter deltas, samples for gauges) of one endpoint, sorted by time."""
    if start is None or end is None:
        return samples, samples
    ts = [float(s["t"]) for s in samples]
    lo = 0
    for i, t in enumerate(ts):
        if t <= start:
            lo = i
    hi = len(ts) - 1
    for i, t in enumerate(ts):
        if t >= end:
            hi = i
            break
    inside = [s for s, t in zip(samples, ts, strict=True) if start <= t <= end]
    return samples[lo : hi + 1], inside or samples


def summarize_endpoint(
    samples: Sequence[Mapping[str, Any]], window: tuple[float | None, float | None] = (None, None)
) -> dict[str, Any]:
    ok = sorted((s for s in samples if s.get("ok", True)), key=lambda s: float(s["t"]))
    span, inside = _slice(ok, *window)
    deltas = {k: counter_delta([s.get(k) for s in span]) for k in COUNTERS}
    deltas = {k: v for k, v in deltas.items() if v is not None}
    engine = next((s.get("engine") for s in ok if s.get("engine")), "unknown")

    if deltas.get("prefix_queries"):
        hit_rate, source = (
            _ratio(deltas.get("prefix_hits"), deltas["prefix_queries"]),
            "prefix_cache_hits / prefix_cache_queries",
        )
    elif deltas.get("prompt_tokens") and "cached_tokens" in deltas:
        hit_rate, source = (
            _ratio(deltas["cached_tokens"], deltas["prompt_tokens"]),
            "cached_tokens / prompt_tokens",
        )
    elif any(s.get("cache_hit_rate") is not None for s in inside):
        hit_rate, source = _gauge(inside, "cache_hit_rate")["mean"], "cache_hit_rate gauge mean"
    else:
        hit_rate, source = None, None

    ts = [float(s["t"]) for s in ok]
    return {
        "engine": engine,
        "url": next((s.get("url") for s in samples if s.get("url")), None),
        "samples": len(samples),
        "failed_scrapes": sum(1 for s in samples if not s.get("ok", True)),
        "first_t": ts[0] if ts else None,
        "last_t": ts[-1] if ts else None,
        "running": _gauge(inside, "running"),
        "waiting": _gauge(inside, "waiting"),
        "kv_usage": _gauge(inside, "kv_usage"),
        "prefix_cache_hit_rate": hit_rate,
        "prefix_cache_hit_rate_source": source,
        "preemptions": deltas.get("preemptions"),
        "deltas": deltas,
        "ttft_mean_s": _ratio(deltas.get("ttft_sum"), deltas.get("ttft_count")),
        "e2e_mean_s": _ratio(deltas.get("e2e_sum"), deltas.get("e2e_count")),
        "queue_mean_s": _ratio(deltas.get("queue_sum"), deltas.get("queue_count")),
        "itl_mean_s": _ratio(deltas.get("itl_sum"), deltas.get("itl_count")),
    }


# Requests a run makes that it does not record (preflight, priming the simulator's data) and
# the scrape intervals at the window's edges: a server may count this many more than the run
# sent before the difference says other clients were there.
SHARED_SLACK = (5, 0.02)


def summarize_server(
    samples: Sequence[Mapping[str, Any]],
    window: tuple[float | None, float | None] = (None, None),
    run_calls: int | None = None,
) -> dict[str, Any]:
    """{"endpoints": {name: figures}} over all scraped endpoints; with `run_calls` (the calls
    this run sent), `shared` when the servers finished more requests than that: other
    clients' traffic is in every server-side figure."""
    by_ep: dict[str, list[Mapping[str, Any]]] = defaultdict(list)
    for s in samples:
        if s.get("t") is None or (isinstance(s["t"], float) and math.isnan(s["t"])):
            continue
        by_ep[str(s.get("endpoint") or "default")].append(s)
    eps = {ep: summarize_endpoint(v, window) for ep, v in sorted(by_ep.items())}
    out: dict[str, Any] = {"endpoints": eps}
    if run_calls is not None:
        out["shared"] = shared_traffic(eps, run_calls)
    return out


def shared_traffic(eps: Mapping[str, Mapping[str, Any]], run_calls: int) -> dict[str, Any] | None:
    """{server_requests, run_calls} when the servers counted more requests than the run sent
    (beyond SHARED_SLACK), else None. Servers scraped under two names count once (by URL)."""
    seen: dict[str, float] = {}
    for name, e in eps.items():
        n = (e.get("deltas") or {}).get("requests_finished")
        if n is not None:
            seen[str(e.get("url") or name)] = float(n)
    if not seen:
        return None
    server = int(sum(seen.values()))
    fixed, share = SHARED_SLACK
    if server <= run_calls + max(fixed, share * run_calls):
        return None
    return {"server_requests": server, "run_calls": run_calls}
