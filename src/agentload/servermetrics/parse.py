"""Reduce a Prometheus exposition from vLLM or SGLang to the few numbers agentload keeps.

A sample is a flat dict (one line of server_metrics.jsonl): gauges as read, counters and
histogram sums/counts as cumulative totals (the summary takes deltas). When the server has
several label sets for one metric (several engines, models or reasons), counters, histogram
sums/counts and request gauges are summed, and utilisation gauges (KV-cache use, SGLang's hit
rate) are averaged. A field is absent when the server does not expose it.

NVIDIA's DCGM exporter (GPU telemetry, `--gpu-metrics`) goes through the same parser: its
sample has `engine: "dcgm"`, the GPU_FIELDS summed or averaged over the GPUs, and each GPU's
values as `gpu<i>_<field>` (GPUs in the order the exposition lists them, hosts in URL order).
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

# DCGM exporter fields (NVIDIA dcgm-exporter etc/default-counters.csv; one sample per GPU,
# labels gpu, UUID, device, modelName, Hostname): field -> (aggregation over GPUs, name).
GPU_FIELDS: dict[str, tuple[str, str]] = {
    "gpu_util": (MEAN, "DCGM_FI_DEV_GPU_UTIL"),  # gauge, %
    "gpu_fb_used_mib": (SUM, "DCGM_FI_DEV_FB_USED"),  # gauge, MiB of framebuffer in use
    "gpu_fb_free_mib": (SUM, "DCGM_FI_DEV_FB_FREE"),  # gauge, MiB
    "gpu_power_w": (SUM, "DCGM_FI_DEV_POWER_USAGE"),  # gauge, W
    "gpu_sm_clock_mhz": (MEAN, "DCGM_FI_DEV_SM_CLOCK"),  # gauge, MHz
    "gpu_energy_mj": (SUM, "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"),  # counter since boot, mJ
}
GPU_ENGINE = "dcgm"

_WANTED = {name for _, names in FIELDS.values() for name in names}
_GPU_NAMES = {name: field for field, (_, name) in GPU_FIELDS.items()}
# prometheus_client's parser names a counter's samples with `_total` added when it lacks one.
_GPU_NAMES |= {n + "_total": f for n, f in _GPU_NAMES.items()}


def _collect(text: str) -> dict[str, list[float]]:
    values: dict[str, list[float]] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name in _WANTED:
                values.setdefault(s.name, []).append(float(s.value))
    return values


def _collect_gpus(text: str) -> dict[tuple[str, str], dict[str, float]]:
    """DCGM values per GPU, keyed by (Hostname, gpu index or UUID), in exposition order."""
    gpus: dict[tuple[str, str], dict[str, float]] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            field = _GPU_NAMES.get(s.name)
            if field is not None:
                key = (
                    s.labels.get("Hostname", ""),
                    s.labels.get("gpu") or s.labels.get("UUID", ""),
                )
                gpus.setdefault(key, {})[field] = float(s.value)
    return gpus


def _gpu_sample(per_gpu: list[dict[str, float]]) -> dict[str, Any]:
    """The DCGM sample of some GPUs: totals / means over them and `gpu<i>_<field>` each."""
    out: dict[str, Any] = {"engine": GPU_ENGINE, "gpus": len(per_gpu)}
    for field, (agg, _) in GPU_FIELDS.items():
        vs = [g[field] for g in per_gpu if field in g]
        if vs:
            out[field] = sum(vs) if agg == SUM else sum(vs) / len(vs)
    for i, g in enumerate(per_gpu):
        for field, v in g.items():
            out[f"gpu{i}_{field.removeprefix('gpu_')}"] = v
    return out


def _per_gpu(sample: dict[str, Any]) -> list[dict[str, float]]:
    """The per-GPU values of a DCGM sample, back as one dict per GPU."""
    out: list[dict[str, float]] = []
    for i in range(int(sample.get("gpus") or 0)):
        g = {}
        for field in GPU_FIELDS:
            v = sample.get(f"gpu{i}_{field.removeprefix('gpu_')}")
            if v is not None:
                g[field] = float(v)
        out.append(g)
    return out


def detect_engine(names: Iterable[str]) -> str:
    names = list(names)
    if any(n.startswith("vllm:") for n in names):
        return "vllm"
    if any(n.startswith("sglang:") for n in names):
        return "sglang"
    return "unknown"


def parse_metrics(text: str) -> dict[str, Any]:
    """The kept subset of one exposition: `engine` plus the FIELDS the server exposes (or,
    for a DCGM exporter, the GPU_FIELDS per GPU and over all)."""
    gpus = _collect_gpus(text)
    if gpus:
        return _gpu_sample(list(gpus.values()))
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
    if all(p.get("engine") == GPU_ENGINE for p in parts):  # several GPU hosts: all their GPUs
        return _gpu_sample([g for p in parts for g in _per_gpu(p)])
    engines = [p.get("engine") for p in parts if p.get("engine") not in (None, "unknown")]
    out: dict[str, Any] = {"engine": engines[0] if engines else "unknown"}
    for field, (agg, _) in FIELDS.items():
        vs = [float(p[field]) for p in parts if p.get(field) is not None]
        if vs:
            out[field] = sum(vs) if agg == SUM else sum(vs) / len(vs)
    return out
