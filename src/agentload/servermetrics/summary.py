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

from agentload.servermetrics.parse import COUNTERS, GPU_ENGINE


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
        if s.get("engine") != GPU_ENGINE:  # GPU telemetry has its own block (summarize_gpu)
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


def _energy_j(
    span: Sequence[Mapping[str, Any]], counter: str, power: str
) -> tuple[float | None, str | None]:
    """Joules over the samples of `span`: the delta of the DCGM energy counter (mJ) when every
    sample has it, else the power gauge (W) integrated over the samples' times (trapezoids)."""
    if len(span) < 2:
        return None, None
    if all(s.get(counter) is not None for s in span):
        d = counter_delta([s[counter] for s in span])
        return (None if d is None else d / 1000.0), "energy counter delta"
    pts = [(float(s["t"]), float(s[power])) for s in span if s.get(power) is not None]
    if len(pts) < 2:
        return None, None
    t, w = np.array(pts).T
    return float(np.sum((w[1:] + w[:-1]) / 2 * np.diff(t))), "power integrated over the samples"


def _gpu_figures(
    span: Sequence[Mapping[str, Any]], inside: Sequence[Mapping[str, Any]], prefix: str
) -> dict[str, Any]:
    """One GPU's (prefix `gpu<i>_`) or all GPUs' (prefix `gpu_`) figures over the window."""
    util = _gauge(inside, prefix + "util")
    power = _gauge(inside, prefix + "power_w")
    energy, source = _energy_j(span, prefix + "energy_mj", prefix + "power_w")
    return {
        "util_mean": util["mean"],
        "util_max": util["max"],
        "fb_used_max_mib": _gauge(inside, prefix + "fb_used_mib")["max"],
        "power_mean_w": power["mean"],
        "power_max_w": power["max"],
        "sm_clock_mean_mhz": _gauge(inside, prefix + "sm_clock_mhz")["mean"],
        "energy_j": energy,
        "energy_source": source,
    }


def summarize_gpu(
    samples: Sequence[Mapping[str, Any]],
    window: tuple[float | None, float | None] = (None, None),
    output_tokens: float | None = None,
) -> dict[str, Any] | None:
    """summary.json `gpu`: the DCGM samples' figures per scraped exporter (all its GPUs, and
    each GPU under `per_gpu`) and over all of them, with energy per output token of the run
    (`output_tokens`: completion tokens over the same window). None without GPU samples.

    Utilisation and SM clock are means over GPUs; memory, power and energy are totals."""
    by_ep: dict[str, list[Mapping[str, Any]]] = defaultdict(list)
    for s in samples:
        if s.get("engine") == GPU_ENGINE and s.get("t") is not None:
            by_ep[str(s.get("endpoint") or "default")].append(s)
    if not by_ep:
        return None
    eps: dict[str, Any] = {}
    for name, ss in sorted(by_ep.items()):
        ok = sorted((s for s in ss if s.get("ok", True)), key=lambda s: float(s["t"]))
        span, inside = _slice(ok, *window)
        n = max((int(s.get("gpus") or 0) for s in ok), default=0)
        span_t = [float(s["t"]) for s in span]
        eps[name] = {
            "url": next((s.get("url") for s in ss if s.get("url")), None),
            "samples": len(ss),
            "failed_scrapes": sum(1 for s in ss if not s.get("ok", True)),
            "gpus": n,
            **_gpu_figures(span, inside, "gpu_"),
            "energy_span_s": span_t[-1] - span_t[0] if len(span_t) > 1 else None,
            "per_gpu": [{"gpu": i, **_gpu_figures(span, inside, f"gpu{i}_")} for i in range(n)],
        }
    vals = list(eps.values())

    def total(key: str) -> float | None:
        vs = [e[key] for e in vals if e[key] is not None]
        return float(sum(vs)) if vs else None

    weights = [(e["util_mean"], e["gpus"] or 1) for e in vals if e["util_mean"] is not None]
    util_max = [e["util_max"] for e in vals if e["util_max"] is not None]
    energy = total("energy_j")
    return {
        "gpus": sum(e["gpus"] for e in vals),
        "util_mean": (
            sum(u * w for u, w in weights) / sum(w for _, w in weights) if weights else None
        ),
        "util_max": max(util_max) if util_max else None,
        "fb_used_max_mib": total("fb_used_max_mib"),
        "power_mean_w": total("power_mean_w"),
        "energy_j": energy,
        "output_tokens": output_tokens,
        "j_per_output_token": _ratio(energy, output_tokens),
        "endpoints": eps,
    }
