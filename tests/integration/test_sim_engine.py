"""The simulator's timing behaves like an engine: prefill cost, prefix cache, batching, memory."""

from __future__ import annotations

import asyncio
import itertools
import random
import statistics
import time
from typing import Any

import aiohttp
from openai import AsyncOpenAI
from prometheus_client.parser import text_string_to_metric_families

from agentload.sim import Profile, SimConfig, SimServer
from agentload.sim.engine import BlockPool
from agentload.sim.tokenizer import (
    ApproxTokenizer,
    HFTokenizer,
    render_chat_parts,
    split_pieces,
)

MODEL = "sim-model"


def unique_text(n_words: int, seed: int) -> str:
    rng = random.Random(seed)
    return " ".join(f"w{rng.randrange(10**6)}" for _ in range(n_words))


async def timed_stream(
    client: AsyncOpenAI, content: str, max_tokens: int, **extra: Any
) -> dict[str, Any]:
    t0 = time.monotonic()
    stream = await client.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": content}],
        max_tokens=max_tokens,
        stream=True,
        stream_options={"include_usage": True},
        extra_body={"ignore_eos": True, **extra},
    )
    times: list[float] = []
    usage = None
    async for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.content:
            times.append(time.monotonic())
        if chunk.usage:
            usage = chunk.usage
    assert usage is not None
    gaps = [b - a for a, b in itertools.pairwise(times)]
    return {
        "ttft": times[0] - t0,
        "itl": statistics.median(gaps) if gaps else 0.0,
        "tokens": len(times),
        "usage": usage,
        "e2e": time.monotonic() - t0,
    }


async def scrape(server: SimServer) -> dict[str, float]:
    async with aiohttp.ClientSession() as s, s.get(server.metrics_url) as resp:
        text = await resp.text()
    out: dict[str, float] = {}
    for fam in text_string_to_metric_families(text):
        for sample in fam.samples:
            if "le" not in sample.labels:
                out[sample.name] = out.get(sample.name, 0.0) + sample.value
    return out


def test_tokenizer_approximation_is_about_four_characters_per_token() -> None:
    text = (
        "The simulator counts tokens with a fast approximation so that a request carrying a "
        "long policy document and several tool schemas gets a realistic prompt length. "
    ) * 20
    pieces = split_pieces(text)
    assert "".join(pieces) == text
    assert 3.5 <= len(text) / len(pieces) <= 5.5
    tok = ApproxTokenizer()
    parts = render_chat_parts([{"role": "user", "content": text}], None)
    n, hashes = tok.encode_parts(parts, 16)
    assert n > len(pieces) and len(hashes) == n // 16
    # same prefix, same block hashes
    parts2 = render_chat_parts(
        [{"role": "user", "content": text}, {"role": "assistant", "content": "ok"}], None
    )
    _, hashes2 = tok.encode_parts(parts2, 16)
    assert hashes2[: len(hashes) - 1] == hashes[: len(hashes) - 1]


def test_block_pool_prefix_sharing_and_lru_eviction() -> None:
    pool = BlockPool(4, caching=True)
    a = pool.allocate(2)
    assert a is not None
    pool.register(a[0], 111)
    pool.register(a[1], 222)
    pool.release(a)
    assert pool.num_free == 4 and pool.usage() == 0.0
    hits = pool.lookup([111, 222, 333], 3)
    assert hits == a
    pool.acquire(hits)
    assert pool.num_free == 2
    pool.release(hits)
    # uncached free blocks go first, then the prefix's tail, then its head
    b = pool.allocate(3)
    assert b is not None
    assert pool.lookup([111, 222], 2) == [a[0]]
    assert pool.allocate(1) == [a[0]]
    assert pool.lookup([111], 1) == []
    assert pool.allocate(1) is None
    off = BlockPool(2, caching=False)
    c = off.allocate(1)
    assert c is not None
    off.register(c[0], 5)
    assert off.lookup([5], 1) == []


async def test_ttft_grows_with_prompt_and_prefix_cache_hits() -> None:
    config = SimConfig(port=0, model=MODEL, profile="tiny-cpu", speedup=4, seed=1)
    async with SimServer(config) as server:
        client = AsyncOpenAI(base_url=server.base_url, api_key="x", max_retries=0)
        await timed_stream(client, "warm up", 2)
        short = await timed_stream(client, unique_text(300, 1), 4)
        long_text = unique_text(2500, 2)
        long = await timed_stream(client, long_text, 4)
        assert long["usage"].prompt_tokens > 4000
        assert long["usage"].prompt_tokens_details.cached_tokens == 0
        assert long["ttft"] > 3 * short["ttft"], (short["ttft"], long["ttft"])
        again = await timed_stream(client, long_text, 4)
        cached = again["usage"].prompt_tokens_details.cached_tokens
        assert cached > 0 and cached % 128 == 0  # whole blocks of the tiny-cpu profile
        assert again["usage"].prompt_tokens - cached < 128 + 1
        assert again["ttft"] < long["ttft"] / 3, (long["ttft"], again["ttft"])
        m = await scrape(server)
        assert m["vllm:prefix_cache_hits_total"] == cached
        await client.close()


async def test_itl_grows_with_concurrent_sequences() -> None:
    profile = Profile(
        name="batch",
        step_overhead_s=0.002,
        decode_seq_s=0.001,
        max_num_seqs=64,
        block_size=16,
        kv_blocks=4096,
    )
    async with SimServer(SimConfig(port=0, model=MODEL, profile=profile)) as server:
        client = AsyncOpenAI(base_url=server.base_url, api_key="x", max_retries=0)
        alone = await timed_stream(client, "hello", 20)
        crowd = await asyncio.gather(*(timed_stream(client, f"hello {i}", 20) for i in range(16)))
        crowd_itl = statistics.median(r["itl"] for r in crowd)
        assert crowd_itl > 2.5 * alone["itl"], (alone["itl"], crowd_itl)
        assert crowd_itl > 0.012
        await client.close()


async def test_full_kv_cache_queues_requests() -> None:
    profile = Profile(
        name="small-kv",
        step_overhead_s=0.005,
        max_num_seqs=16,
        block_size=16,
        kv_blocks=45,
        max_model_len=700,
    )
    async with SimServer(SimConfig(port=0, model=MODEL, profile=profile)) as server:
        client = AsyncOpenAI(base_url=server.base_url, api_key="x", max_retries=0)
        texts = [unique_text(150, 10 + i) for i in range(3)]
        tasks = [asyncio.create_task(timed_stream(client, t, 20)) for t in texts]
        most_waiting, most_kv = 0.0, 0.0
        while not all(t.done() for t in tasks):
            mid = await scrape(server)
            most_waiting = max(most_waiting, mid["vllm:num_requests_waiting"])
            most_kv = max(most_kv, mid["vllm:kv_cache_usage_perc"])
            await asyncio.sleep(0.005)
        results = [t.result() for t in tasks]
        assert all(r["usage"].prompt_tokens > 256 for r in results)
        assert most_waiting >= 1
        assert most_kv > 0.5
        # the queued request waited for one of the others to finish
        ttfts = sorted(r["ttft"] for r in results)
        assert ttfts[-1] > min(r["e2e"] for r in results) * 0.8
        end = await scrape(server)
        assert end["vllm:request_queue_time_seconds_sum"] > 0.05
        assert end["vllm:num_requests_waiting"] == 0
        await client.close()


async def test_preemptions_happen_and_are_counted() -> None:
    profile = Profile(
        name="tiny-kv",
        step_overhead_s=0.001,
        max_num_seqs=16,
        block_size=16,
        kv_blocks=12,
        max_model_len=180,
    )
    async with SimServer(SimConfig(port=0, model=MODEL, profile=profile)) as server:
        client = AsyncOpenAI(base_url=server.base_url, api_key="x", max_retries=0)
        results = await asyncio.gather(*(timed_stream(client, f"go {i}", 60) for i in range(4)))
        for r in results:
            assert r["tokens"] == 60
            assert r["usage"].completion_tokens == 60
        m = await scrape(server)
        assert m["vllm:num_preemptions_total"] >= 1
        assert m["vllm:request_success_total"] == 4
        assert m["vllm:generation_tokens_total"] == 240
        await client.close()


async def test_speedup_scales_time() -> None:
    profile = Profile(name="slow", step_overhead_s=0.02, block_size=16, kv_blocks=1024)
    async with SimServer(SimConfig(port=0, model=MODEL, profile=profile, speedup=10)) as server:
        client = AsyncOpenAI(base_url=server.base_url, api_key="x", max_retries=0)
        r = await timed_stream(client, "hello", 30)
        # 31 steps of 20 ms model time at 10x: about 62 ms
        assert r["e2e"] < 0.5
        assert r["e2e"] > 0.045  # but not faster than the model
        await client.close()


def _write_tokenizer(path: str) -> None:
    from tokenizers import Tokenizer, models, pre_tokenizers

    vocab = {"[UNK]": 0}
    for word in (
        "hello",
        "world",
        "<",
        "|",
        ">",
        "im",
        "_",
        "start",
        "end",
        "user",
        "assistant",
        "\n",
    ):
        vocab.setdefault(word, len(vocab))
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.save(path)


async def test_real_tokenizer_counts_prompt_tokens(tmp_path: Any) -> None:
    path = str(tmp_path / "tokenizer.json")
    _write_tokenizer(path)
    config = SimConfig(port=0, model=MODEL, profile="instant", tokenizer=path)
    async with SimServer(config) as server:
        client = AsyncOpenAI(base_url=server.base_url, api_key="x", max_retries=0)
        short = await client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "hello"}], max_tokens=2
        )
        long = await client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "hello world " * 50}], max_tokens=2
        )
        await client.close()
    assert short.usage is not None and long.usage is not None
    # whitespace word-level: each "hello world" adds exactly two tokens
    assert long.usage.prompt_tokens - short.usage.prompt_tokens == 99


async def test_a_long_prompt_is_tokenised_off_the_event_loop(tmp_path: Any) -> None:
    """Tokenising 80,000 tokens inline would stop the loop (every stream's output) for
    about as long as the encoding takes; on the worker thread the loop keeps its pace."""
    path = str(tmp_path / "tokenizer.json")
    _write_tokenizer(path)
    text = "hello world " * 40_000
    start = time.perf_counter()
    inline_tokens, _ = HFTokenizer(path).encode_parts([text], 16)
    inline_s = time.perf_counter() - start
    assert inline_tokens == 80_000
    profile = Profile(name="roomy", block_size=16, kv_blocks=8192, max_model_len=100_000)
    config = SimConfig(port=0, model=MODEL, profile=profile, tokenizer=path)
    gaps: list[float] = []
    async with SimServer(config) as server:
        body = {"model": MODEL, "prompt": text, "max_tokens": 2}
        async with aiohttp.ClientSession() as s:
            await (await s.post(f"{server.base_url}/completions", json=body)).read()  # warm
            done = asyncio.Event()

            async def tick() -> None:
                last = time.perf_counter()
                while not done.is_set():
                    await asyncio.sleep(0.001)
                    now = time.perf_counter()
                    gaps.append(now - last)
                    last = now

            ticker = asyncio.create_task(tick())
            resp = await s.post(f"{server.base_url}/completions", json=body)
            data = await resp.json()
            done.set()
            await ticker
    assert resp.status == 200, data
    assert data["usage"]["prompt_tokens"] == inline_tokens
    assert max(gaps) < 0.25 * inline_s, (max(gaps), inline_s)


async def test_client_disconnect_aborts_the_request() -> None:
    profile = Profile(name="slow", step_overhead_s=0.01, block_size=16, kv_blocks=1024)
    async with SimServer(SimConfig(port=0, model=MODEL, profile=profile)) as server:
        body = {
            "model": MODEL,
            "messages": [{"role": "user", "content": "hi"}],
            "max_tokens": 500,
            "ignore_eos": True,
            "stream": True,
        }
        async with aiohttp.ClientSession() as s:
            resp = await s.post(f"{server.base_url}/chat/completions", json=body)
            await resp.content.readuntil(b"\n\n")
            resp.close()
        for _ in range(100):
            await asyncio.sleep(0.02)
            m = await scrape(server)
            if m["vllm:num_requests_running"] == 0:
                break
        assert m["vllm:num_requests_running"] == 0
        assert m["vllm:generation_tokens_total"] < 500
        async with aiohttp.ClientSession() as s, s.get(server.metrics_url) as r:
            text = await r.text()
        assert 'finished_reason="abort"' in text
        aborted = [
            line
            for line in text.splitlines()
            if line.startswith("vllm:request_success_total") and 'finished_reason="abort"' in line
        ]
        assert aborted and aborted[0].endswith(" 1.0")
