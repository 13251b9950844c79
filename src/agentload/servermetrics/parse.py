"""Reduce a Prometheus exposition from vLLM or SGLang to the few numbers agentload keeps.

A sample is a flat dict (one line of server_metrics.jsonl): gauges as read, counters and
histogram sums/counts as cumulative totals (the summary takes deltas). When the server has
several label sets for one metric (several engines, models or reasons), counters, histogram
sums/counts and request gauges are summed, and utilisation gauges (KV-cache use, SGLang's hit
rate) are averaged. A field is absent when the server does not expose it.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

SAMPLE_SCHEMA = "agentload.server_metrics/1"

SUM = "sum"
MEAN = "mean"

# field -> (aggregation, sample names in order of preference; the first name present wins)
FIELDS: dict[str, tuple[str, tuple[str, ...]]] = {
    "running": (SUM, ("vllm:num_requests_running", "sglang:num_running_reqs")),
    "waiting": (SUM, ("vllm:num_requests_waiting", "sglang:num_queue_reqs")),
    # 0..1 share of KV-cache blocks (vLLM) or tokens (SGLang) in use.
    "kv_usage": (
        MEAN,
        ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc", "sglang:token_usage"),
    ),
    "prefix_queries": (
        SUM,
        ("vllm:prefix_cache_queries_total", "vllm:gpu_prefix_cache_queries_total"),
    ),
    "prefix_hits": (SUM, ("vllm:prefix_cache_hits_total", "vllm:gpu_prefix_cache_hits_total")),
    # SGLang reports its radix-cache hit rate only as a gauge.
    "cache_hit_rate": (MEAN, ("sglang:cache_hit_rate",)),
    "prompt_tokens": (SUM, ("vllm:prompt_tokens_total", "sglang:prompt_tokens_total")),
    "cached_tokens": (SUM, ("vllm:prompt_tokens_cached_total", "sglang:cached_tokens_total")),
    "generation_tokens": (SUM, ("vllm:generation_tokens_total", "sglang:generation_tokens_total")),
    "preemptions": (SUM, ("vllm:num_preemptions_total", "sglang:num_retracted_requests_total")),
    "requests_finished": (SUM, ("vllm:request_success_total", "sglang:num_requests_total")),
    "ttft_sum": (
        SUM,
        ("vllm:time_to_first_token_seconds_sum", "sglang:time_to_first_token_seconds_sum"),
    ),
    "ttft_count": (
        SUM,
        ("vllm:time_to_first_token_seconds_count", "sglang:time_to_first_token_seconds_count"),
    ),
    "e2e_sum": (
        SUM,
        ("vllm:e2e_request_latency_seconds_sum", "sglang:e2e_request_latency_seconds_sum"),
    ),
    "e2e_count": (
        SUM,
        ("vllm:e2e_request_latency_seconds_count", "sglang:e2e_request_latency_seconds_count"),
    ),
    "queue_sum": (SUM, ("vllm:request_queue_time_seconds_sum", "sglang:queue_time_seconds_sum")),
    "queue_count": (
        SUM,
        ("vllm:request_queue_time_seconds_count", "sglang:queue_time_seconds_count"),
    ),
    "itl_sum": (
        SUM,
        ("vllm:inter_token_latency_seconds_sum", "sglang:inter_token_latency_seconds_sum"),
    ),
    "itl_count": (
        SUM,
        ("vllm:inter_token_latency_seconds_count", "sglang:inter_token_latency_seconds_count"),
    ),
}

GAUGES = ("running", "waiting", "kv_usage", "cache_hit_rate")
COUNTERS = tuple(k for k in FIELDS if k not in GAUGES)

_WANTED = {name for _, names in FIELDS.values() for name in names}


def _collect(text: str) -> dict[str, list[float]]:
    values: dict[str, list[float]] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name in _WANTED:
                values.setdefault(s.name, []).append(float(s.value))
    return values


def detect_engine(names: Iterable[str]) -> str:
    names = list(names)
    if any(n.startswith("vllm:") for n in names):
        return "vllm"
    if any(n.startswith("sglang:") for n in names):
        return "sglang"
    return "unknown"


def parse_metrics(text: str) -> dict[str, Any]:
    """The kept subset of one exposition: `engine` plus the FIELDS the server exposes."""
    values = _collect(text)
    out: dict[str, Any] = {"engine": detect_engine(values)}
    for field, (agg, names) in FIELDS.items():
        for name in names:
            vs = values.get(name)
            if vs:
                out[field] = sum(vs) if agg == SUM else sum(vs) / len(vs)
                break
    return out


def combine_samples(parts: list[dict[str, Any]]) -> dict[str, Any]:
    """One sample for several replicas behind one endpoint: SUM fields added, MEAN fields
    averaged over the replicas that expose them; `engine` is the first one recognised."""
    if len(parts) == 1:
        return dict(parts[0])
    engines = [p.get("engine") for p in parts if p.get("engine") not in (None, "unknown")]
    out: dict[str, Any] = {"engine": engines[0] if engines else "unknown"}
    for field, (agg, _) in FIELDS.items():
        vs = [float(p[field]) for p in parts if p.get(field) is not None]
        if vs:
            out[field] = sum(vs) if agg == SUM else sum(vs) / len(vs)
    return out
