"""Readable figures from a Prometheus sample: means from histogram sums and counts, the
prefix-cache hit rate, and (between two samples) rates per second."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from agentload.fmt import count, num, pct, secs


def metrics_url(url: str) -> str:
    """A server's base URL (`http://h:8000`, `http://h:8000/v1`) or its /metrics URL ->
    the /metrics URL."""
    parts = urlsplit(url.strip())
    path = parts.path.rstrip("/")
    if not path.endswith("/metrics"):
        path = path.removesuffix("/v1") + "/metrics"
    return urlunsplit((parts.scheme, parts.netloc, path, parts.query, ""))


def _mean(s: Mapping[str, Any], key: str) -> float | None:
    n = s.get(f"{key}_count")
    return s[f"{key}_sum"] / n if n and s.get(f"{key}_sum") is not None else None


def snapshot_rows(s: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(figure, value) rows of one sample; cumulative figures are since the server started."""
    rows: list[tuple[str, str]] = []
    for key, label in (("running", "requests running"), ("waiting", "requests waiting")):
        if key in s:
            rows.append((label, count(s[key])))
    if "kv_usage" in s:
        rows.append(("KV-cache use", pct(s["kv_usage"])))
    if s.get("prefix_queries"):
        rows.append(("prefix-cache hit rate", pct(s.get("prefix_hits", 0) / s["prefix_queries"])))
    elif "cache_hit_rate" in s:
        rows.append(("prefix-cache hit rate", pct(s["cache_hit_rate"])))
    for key, label in (
        ("ttft", "mean TTFT"),
        ("itl", "mean ITL"),
        ("e2e", "mean e2e latency"),
        ("queue", "mean queue time"),
    ):
        m = _mean(s, key)
        if m is not None:
            rows.append((label, secs(m)))
    for key, label in (
        ("requests_finished", "requests finished"),
        ("prompt_tokens", "prompt tokens"),
        ("cached_tokens", "cached prompt tokens"),
        ("generation_tokens", "generated tokens"),
        ("preemptions", "preemptions"),
    ):
        if key in s:
            rows.append((label, count(s[key])))
    return rows


def rate_rows(a: Mapping[str, Any], b: Mapping[str, Any]) -> list[tuple[str, str]]:
    """Figures of the interval between two samples a (earlier) and b."""
    dt = float(b["t"]) - float(a["t"])
    if dt <= 0:
        return []
    rows: list[tuple[str, str]] = []

    def delta(k: str) -> float | None:
        if a.get(k) is None or b.get(k) is None:
            return None
        d = float(b[k]) - float(a[k])
        return d if d >= 0 else float(b[k])  # a counter reset

    for key, label in (
        ("requests_finished", "requests/s"),
        ("prompt_tokens", "prompt tok/s"),
        ("generation_tokens", "generated tok/s"),
    ):
        d = delta(key)
        if d is not None:
            rows.append((label, num(d / dt, 1)))
    q, h = delta("prefix_queries"), delta("prefix_hits")
    if q:
        rows.append(("hit rate (interval)", pct((h or 0) / q)))
    for key, label in (("ttft", "mean TTFT (interval)"), ("itl", "mean ITL (interval)")):
        n, sm = delta(f"{key}_count"), delta(f"{key}_sum")
        if n and sm is not None:
            rows.append((label, secs(sm / n)))
    d = delta("preemptions")
    if d:
        rows.append(("preemptions", count(d)))
    return rows
