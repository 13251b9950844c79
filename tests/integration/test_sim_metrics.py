"""/metrics: vLLM's names, labels and buckets, and counts that agree with the traffic."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import aiohttp
from openai import AsyncOpenAI
from prometheus_client.parser import text_string_to_metric_families

from agentload.sim import SimConfig, SimServer

REFERENCE = Path(__file__).parents[1] / "data" / "vllm-0.32-cpu" / "real-vllm-metrics.txt"
MODEL = "sim-model"

REQUIRED = {
    "vllm:num_requests_running": "gauge",
    "vllm:num_requests_waiting": "gauge",
    "vllm:kv_cache_usage_perc": "gauge",
    "vllm:prefix_cache_queries": "counter",
    "vllm:prefix_cache_hits": "counter",
    "vllm:prompt_tokens": "counter",
    "vllm:generation_tokens": "counter",
    "vllm:request_success": "counter",
    "vllm:num_preemptions": "counter",
    "vllm:time_to_first_token_seconds": "histogram",
    "vllm:inter_token_latency_seconds": "histogram",
    "vllm:e2e_request_latency_seconds": "histogram",
    "vllm:request_queue_time_seconds": "histogram",
    "vllm:request_prefill_time_seconds": "histogram",
    "vllm:request_decode_time_seconds": "histogram",
    "vllm:request_prompt_tokens": "histogram",
    "vllm:request_generation_tokens": "histogram",
    "agentload_sim:emission_lag_seconds": "histogram",
}


def families(text: str) -> dict[str, Any]:
    return {f.name: f for f in text_string_to_metric_families(text)}


def bucket_bounds(fam: Any) -> list[str]:
    return [s.labels["le"] for s in fam.samples if s.name.endswith("_bucket")]


def value(fams: dict[str, Any], name: str, sample: str | None = None, **labels: str) -> float:
    total = 0.0
    for s in fams[name].samples:
        if sample is not None and s.name != sample:
            continue
        if sample is None and s.name not in (name, f"{name}_total"):
            continue
        if all(s.labels.get(k) == v for k, v in labels.items()):
            total += s.value
    return total


async def scrape(server: SimServer) -> dict[str, Any]:
    async with aiohttp.ClientSession() as s, s.get(server.metrics_url) as resp:
        assert resp.status == 200
        assert resp.headers["Content-Type"].startswith("text/plain")
        return families(await resp.text())


async def test_names_labels_and_buckets_match_vllm() -> None:
    async with SimServer(SimConfig(port=0, model=MODEL, profile="instant")) as server:
        client = AsyncOpenAI(base_url=server.base_url, api_key="x", max_retries=0)
        await client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=3
        )
        fams = await scrape(server)
        await client.close()
    for name, typ in REQUIRED.items():
        assert name in fams, name
        assert fams[name].type == typ, name
        for s in fams[name].samples:
            if s.name.endswith("_created"):
                continue
            assert s.labels.get("model_name") == MODEL, s
            assert s.labels.get("engine") == "0", s
    reasons = {s.labels["finished_reason"] for s in fams["vllm:request_success"].samples}
    assert {"stop", "length", "abort"} <= reasons
    ref = families(REFERENCE.read_text())
    for name, typ in REQUIRED.items():
        if name.startswith("vllm:"):
            assert ref[name].type == typ, name
        if typ == "histogram" and name in ref:
            assert bucket_bounds(fams[name]) == bucket_bounds(ref[name]), name


async def test_counters_agree_with_requests() -> None:
    config = SimConfig(
        port=0, model=MODEL, profile="tiny-cpu", speedup=50, seed=3, mean_output_tokens=20
    )
    async with SimServer(config) as server:
        client = AsyncOpenAI(base_url=server.base_url, api_key="x", max_retries=0)
        policy = "Policy: be kind, check the booking, confirm before changes. " * 60
        prompts = [
            [
                {"role": "system", "content": policy},
                {"role": "user", "content": f"question number {i}"},
            ]
            for i in range(6)
        ]

        async def one(messages: list[Any], max_tokens: int) -> Any:
            res = await client.chat.completions.create(
                model=MODEL, messages=messages, max_tokens=max_tokens
            )
            return res

        first = await one(prompts[0], 5)
        rest = await asyncio.gather(*(one(p, 400) for p in prompts[1:]))
        results = [first, *rest]
        fams = await scrape(server)
        await client.close()
    usages = [r.usage for r in results]
    prompt = sum(u.prompt_tokens for u in usages)
    completion = sum(u.completion_tokens for u in usages)
    cached = sum(u.prompt_tokens_details.cached_tokens for u in usages)
    assert cached > 0  # the shared policy prefix hit the cache
    assert value(fams, "vllm:prompt_tokens") == prompt
    assert value(fams, "vllm:generation_tokens") == completion
    assert value(fams, "vllm:prefix_cache_queries") == prompt
    assert value(fams, "vllm:prefix_cache_hits") == cached
    by_reason = {"stop": 0, "length": 0}
    for r in results:
        fr = r.choices[0].finish_reason
        by_reason["length" if fr == "length" else "stop"] += 1
    assert by_reason["length"] >= 1
    for reason, n in by_reason.items():
        assert value(fams, "vllm:request_success", finished_reason=reason) == n
    n = len(results)
    for hist in (
        "vllm:time_to_first_token_seconds",
        "vllm:e2e_request_latency_seconds",
        "vllm:request_queue_time_seconds",
        "vllm:request_prompt_tokens",
        "vllm:request_generation_tokens",
    ):
        assert value(fams, hist, f"{hist}_count") == n, hist
    assert value(fams, "vllm:request_prompt_tokens", "vllm:request_prompt_tokens_sum") == prompt
    assert (
        value(fams, "vllm:request_generation_tokens", "vllm:request_generation_tokens_sum")
        == completion
    )
    assert (
        value(fams, "vllm:inter_token_latency_seconds", "vllm:inter_token_latency_seconds_count")
        == completion - n
    )
    lag_count = value(
        fams, "agentload_sim:emission_lag_seconds", "agentload_sim:emission_lag_seconds_count"
    )
    assert lag_count == completion
    assert value(fams, "vllm:num_requests_running") == 0


async def test_two_simulators_in_one_process_keep_separate_metrics() -> None:
    a_cfg = SimConfig(port=0, model="a", profile="instant")
    b_cfg = SimConfig(port=0, model="b", profile="instant")
    async with SimServer(a_cfg) as a, SimServer(b_cfg) as b:
        client = AsyncOpenAI(base_url=a.base_url, api_key="x", max_retries=0)
        await client.chat.completions.create(
            model="a",
            messages=[{"role": "user", "content": "hi"}],
            max_tokens=4,
            extra_body={"ignore_eos": True},
        )
        await client.close()
        fa, fb = await scrape(a), await scrape(b)
    assert value(fa, "vllm:generation_tokens") == 4
    assert value(fb, "vllm:generation_tokens") == 0
    assert {s.labels["model_name"] for s in fb["vllm:generation_tokens"].samples} == {"b"}
