"""Time series and per-call points for the serving charts, read from a results folder's records.

All times are seconds since the measurement window's start. Bins are 1 s, widened so that a
long run has at most MAX_BINS of them. Output tokens per second spreads each call's tokens
evenly from its first token to its end (counted at the end, a bin would get all of a long
call's tokens at once and the line would spike).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from agentload.client import itlhist
from agentload.results.records import SessionRecord
from agentload.servermetrics.parse import GPU_ENGINE, GPU_FIELDS

MAX_BINS = 600
MAX_POINTS = 3000  # scatter points drawn per chart (an even sample of the calls)


@dataclass
class Series:
    t0: float = 0.0
    bin_s: float = 1.0
    t: list[float] = field(default_factory=list)
    output_tokens_per_s: list[float] = field(default_factory=list)
    calls_per_s: list[float] = field(default_factory=list)
    active_sessions: list[int] = field(default_factory=list)
    calls_in_flight: list[int] = field(default_factory=list)
    errors: dict[str, list[int]] = field(default_factory=dict)
    server: dict[str, dict[str, list[float | None]]] = field(default_factory=dict)
    # DCGM telemetry per scraped exporter: "t", "gpus" and each GPU_FIELDS key per GPU
    # (`gpu0_util`, ...), as in the samples.
    gpu: dict[str, dict[str, list[float | None]]] = field(default_factory=dict)
    prompt_vs_latency: dict[str, dict[str, list[float]]] = field(default_factory=dict)
    itl_hist: tuple[list[float], list[int]] = field(default_factory=lambda: ([], []))


def _end(c: Mapping[str, Any]) -> float:
    return float(c.get("started_at") or 0.0) + float(c.get("total_s") or c.get("e2e_s") or 0.0)


def _first_token(c: Mapping[str, Any], end: float) -> float:
    """When the call's first token came, or its end when it streamed at most one token or has
    no timing. Taken back from the end, as ttft_s and e2e_s are those of the last attempt
    (total_s also holds earlier attempts and retry waits)."""
    ttft, e2e = c.get("ttft_s"), c.get("e2e_s")
    if ttft is None or e2e is None or float(c.get("completion_tokens") or 0) <= 1:
        return end
    return end - max(0.0, float(e2e) - float(ttft))


def _ramp(starts: np.ndarray, rates: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """At each edge e: sum of rate * (e - start) over the spans started before e."""
    order = np.argsort(starts)
    s, r = starts[order], rates[order]
    cum_r = np.concatenate(([0.0], np.cumsum(r)))
    cum_rs = np.concatenate(([0.0], np.cumsum(r * s)))
    k = np.searchsorted(s, edges, side="left")
    return edges * cum_r[k] - cum_rs[k]


def _spread(
    a: np.ndarray, b: np.ndarray, tokens: np.ndarray, edges: np.ndarray, end_idx: np.ndarray
) -> np.ndarray:
    """Tokens per bin, each call's spread evenly over [a, b] (first token to end); a call with
    a = b lands whole in its end's bin `end_idx`. Tokens delivered at a constant rate over
    [a, b] make a ramp from a, cut off by a ramp of opposite sign from b; the tokens in a bin
    are the difference of that sum at its two edges: O((calls + bins) log calls), not per token.
    """
    n = len(edges) - 1
    point = b <= a
    out = np.bincount(end_idx[point], weights=tokens[point], minlength=n).astype(float)
    spread = ~point & (tokens > 0)
    if spread.any():
        a, b, tok = a[spread], b[spread], tokens[spread]
        rate = tok / (b - a)
        cum = _ramp(a, rate, edges) - _ramp(b, rate, edges)
        out += np.diff(cum)
    return np.maximum(out, 0.0)  # rounding of the differences, never a real negative


def _session_span(s: SessionRecord) -> tuple[float, float]:
    start = s.started_at or 0.0
    return start, start + (s.duration("total_s") or 0.0)


def _occupancy(spans: Sequence[tuple[float, float]], edges: np.ndarray) -> list[int]:
    """How many spans are open at each bin's middle."""
    if not spans:
        return [0] * (len(edges) - 1)
    mids = (edges[:-1] + edges[1:]) / 2
    starts = np.sort(np.array([s for s, _ in spans]))
    ends = np.sort(np.array([e for _, e in spans]))
    opened = np.searchsorted(starts, mids, side="right")
    closed = np.searchsorted(ends, mids, side="right")
    return (opened - closed).astype(int).tolist()


def build_series(
    calls: Sequence[Mapping[str, Any]],
    sessions: Sequence[SessionRecord],
    server_samples: Sequence[Mapping[str, Any]],
    window: Mapping[str, Any],
) -> Series | None:
    """The serving time series over the measurement window, or None without calls."""
    calls = [c for c in calls if c.get("started_at")]
    if not calls:
        return None
    t0 = window.get("start") or min(float(c["started_at"]) for c in calls)
    t1 = window.get("end") or max(_end(c) for c in calls)
    span = max(float(t1) - float(t0), 1e-3)
    bin_s = max(1.0, math.ceil(span / MAX_BINS))
    n = max(1, math.ceil(span / bin_s))
    edges = float(t0) + np.arange(n + 1) * bin_s
    ser = Series(t0=float(t0), bin_s=bin_s, t=((edges[:-1] - t0) + bin_s / 2).tolist())

    ends = np.array([_end(c) for c in calls])
    ok = np.array([c.get("status", "ok") == "ok" for c in calls])
    out_tok = np.array([float(c.get("completion_tokens") or 0) for c in calls])
    idx = np.clip(((ends - t0) // bin_s).astype(int), 0, n - 1)
    first = np.array([_first_token(c, e) for c, e in zip(calls, ends, strict=True)])
    # Times relative to the window's start: epoch seconds would lose precision in the ramps.
    per_bin = _spread(first - t0, ends - t0, out_tok * ok, edges - t0, idx)
    ser.output_tokens_per_s = (per_bin / bin_s).tolist()
    ser.calls_per_s = (np.bincount(idx, weights=ok.astype(float), minlength=n) / bin_s).tolist()
    spans = [(float(c["started_at"]), e) for c, e in zip(calls, ends, strict=True)]
    ser.calls_in_flight = _occupancy(spans, edges)
    measured = [s for s in sessions if not s.warmup]
    ser.active_sessions = _occupancy([_session_span(s) for s in measured], edges)

    errs: dict[str, np.ndarray] = defaultdict(lambda: np.zeros(n, dtype=int))
    for c, i, good in zip(calls, idx.tolist(), ok.tolist(), strict=True):
        if not good:
            errs[str(c.get("error_kind") or "unknown")][i] += 1
    ser.errors = {k: v.tolist() for k, v in sorted(errs.items())}

    ser.server = _server_series(server_samples, float(t0))
    ser.gpu = _gpu_series(server_samples, float(t0))
    ser.prompt_vs_latency = _prompt_points(calls)
    ks, ns = itlhist.merge(c.get("itl_hist") for c in calls if c.get("status", "ok") == "ok")
    ser.itl_hist = (itlhist.bucket_value(ks).tolist(), ns.tolist())
    return ser


def _server_series(
    samples: Sequence[Mapping[str, Any]], t0: float
) -> dict[str, dict[str, list[float | None]]]:
    by_ep: dict[str, list[Mapping[str, Any]]] = defaultdict(list)
    for s in samples:
        if s.get("ok", True) and s.get("t") is not None and s.get("engine") != GPU_ENGINE:
            by_ep[str(s.get("endpoint") or "default")].append(s)
    out: dict[str, dict[str, list[float | None]]] = {}
    for ep, ss in sorted(by_ep.items()):
        ss.sort(key=lambda s: float(s["t"]))
        out[ep] = {
            "t": [float(s["t"]) - t0 for s in ss],
            **{
                k: [None if s.get(k) is None else float(s[k]) for s in ss]
                for k in ("running", "waiting", "kv_usage")
            },
        }
    return out


def _gpu_series(
    samples: Sequence[Mapping[str, Any]], t0: float
) -> dict[str, dict[str, list[float | None]]]:
    by_ep: dict[str, list[Mapping[str, Any]]] = defaultdict(list)
    for s in samples:
        if s.get("ok", True) and s.get("t") is not None and s.get("engine") == GPU_ENGINE:
            by_ep[str(s.get("endpoint") or "default")].append(s)
    out: dict[str, dict[str, list[float | None]]] = {}
    for ep, ss in sorted(by_ep.items()):
        ss.sort(key=lambda s: float(s["t"]))
        n = max(int(s.get("gpus") or 0) for s in ss)
        keys = [f"gpu{i}_{f.removeprefix('gpu_')}" for i in range(n) for f in GPU_FIELDS]
        out[ep] = {
            "t": [float(s["t"]) - t0 for s in ss],
            "gpus": [float(n)],
            **{k: [None if s.get(k) is None else float(s[k]) for s in ss] for k in keys},
        }
    return out


def _prompt_points(calls: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, list[float]]]:
    by_role: dict[str, list[Mapping[str, Any]]] = defaultdict(list)
    for c in calls:
        if c.get("status", "ok") == "ok" and c.get("prompt_tokens") and c.get("ttft_s") is not None:
            by_role[str(c.get("role") or "none")].append(c)
    out = {}
    for role, cs in sorted(by_role.items()):
        step = max(1, math.ceil(len(cs) / MAX_POINTS))
        cs = cs[::step]
        out[role] = {
            "prompt_tokens": [float(c["prompt_tokens"]) for c in cs],
            "ttft_s": [float(c["ttft_s"]) for c in cs],
            "e2e_s": [float(c.get("e2e_s") or 0.0) for c in cs],
        }
    return out
