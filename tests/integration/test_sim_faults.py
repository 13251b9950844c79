"""Injected faults: each kind happens as configured and the agentload client classifies it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families

from agentload.sim import SimConfig, SimServer, predict_fault

client_mod = pytest.importorskip("agentload.client")
ChatClient = client_mod.ChatClient
EndpointConfig = client_mod.EndpointConfig
RetryPolicy = client_mod.RetryPolicy
Timeouts = client_mod.Timeouts

MODEL = "sim-model"
MESSAGES = [{"role": "user", "content": "Tell me something."}]

EXPECTED = {
    "http_500": {"http_500"},
    "http_429": {"http_429"},
    "http_503": {"http_503"},
    "reset": {"stream_error", "malformed_stream"},
    "truncate": {"malformed_stream"},
    "malformed": {"malformed_stream"},
    "stall": {"timeout_idle"},
    "stall_first_token": {"timeout_first_token"},
    "error_event": {"stream_error"},
}


@pytest.fixture
async def sim() -> AsyncIterator[SimServer]:
    config = SimConfig(
        port=0,
        model=MODEL,
        profile="instant",
        fault_stall_s=1.5,
        fault_after_tokens=2,
        mean_output_tokens=30,
        output_tokens_sigma=0,
    )
    async with SimServer(config) as server:
        yield server


def endpoint(sim: SimServer, **timeouts: float) -> Any:
    t = {"connect": 2.0, "first_token": 5.0, "idle": 5.0, "total": 10.0, **timeouts}
    return EndpointConfig(
        base_url=sim.base_url,
        model=MODEL,
        timeouts=Timeouts(**t),
        retry=RetryPolicy(max_attempts=1),
    )


@pytest.mark.parametrize("kind", sorted(EXPECTED))
async def test_each_fault_kind_is_classified(sim: SimServer, kind: str) -> None:
    ep = endpoint(sim, idle=0.4, first_token=0.4)
    async with ChatClient(ep) as c:
        res = await c.chat(MESSAGES, max_tokens=30, headers={"X-Agentload-Fault": kind})
        assert res.record.error_kind in EXPECTED[kind], (kind, res.record.error_kind)
        # the server keeps serving
        ok = await c.chat(MESSAGES, max_tokens=5)
        assert ok.record.error_kind is None, ok.record.error_kind
        assert ok.record.status == "ok"


async def test_context_overflow_is_classified() -> None:
    async with (
        SimServer(SimConfig(port=0, model=MODEL, profile="instant", max_model_len=256)) as server,
        ChatClient(endpoint(server)) as c,
    ):
        res = await c.chat([{"role": "user", "content": "word " * 400}])
        assert res.record.error_kind == "context_overflow"


async def test_stall_without_timeouts_delivers_everything(sim: SimServer) -> None:
    async with ChatClient(endpoint(sim)) as c:
        res = await c.chat(
            MESSAGES,
            max_tokens=8,
            headers={"X-Agentload-Fault": "stall"},
            extra_body={"ignore_eos": True},
        )
    assert res.record.status == "ok"
    assert res.record.completion_tokens == 8


async def test_raw_reset_truncate_and_malformed(sim: SimServer) -> None:
    body = {"model": MODEL, "messages": MESSAGES, "max_tokens": 20, "stream": True}
    async with aiohttp.ClientSession() as s:
        async with s.post(
            f"{sim.base_url}/chat/completions", json=body, headers={"X-Agentload-Fault": "truncate"}
        ) as resp:
            text = (await resp.read()).decode()
        assert resp.status == 200 and "data: " in text and "[DONE]" not in text
        async with s.post(
            f"{sim.base_url}/chat/completions",
            json=body,
            headers={"X-Agentload-Fault": "malformed"},
        ) as resp:
            text = (await resp.read()).decode()
        assert '"delta":{"content":"\n\n' in text and text.endswith("data: [DONE]\n\n")
        with pytest.raises(aiohttp.ClientError):
            async with s.post(
                f"{sim.base_url}/chat/completions",
                json=body,
                headers={"X-Agentload-Fault": "reset"},
            ) as resp:
                await resp.read()
        async with s.post(
            f"{sim.base_url}/chat/completions", json=body, headers={"X-Agentload-Fault": "bogus"}
        ) as resp:
            assert resp.status == 400


async def test_rate_based_faults_are_predictable() -> None:
    kinds = ["http_503", "truncate"]
    config = SimConfig(
        port=0, model=MODEL, profile="instant", seed=11, fault_rate=0.5, fault_kinds=kinds
    )
    async with SimServer(config) as server, ChatClient(endpoint(server)) as c:
        seen: list[str | None] = []
        for _ in range(16):
            res = await c.chat(MESSAGES, max_tokens=6)
            seen.append(res.record.error_kind)
        async with aiohttp.ClientSession() as s, s.get(server.metrics_url) as resp:
            metrics = await resp.text()
    expected_kind = {None: None, "http_503": "http_503", "truncate": "malformed_stream"}
    predicted = [expected_kind[predict_fault(11, i, 0.5, kinds)] for i in range(16)]
    assert seen == predicted
    assert any(p is None for p in predicted) and any(p is not None for p in predicted)
    n_503 = sum(1 for p in predicted if p == "http_503")
    injected = {
        s.labels["kind"]: s.value
        for fam in text_string_to_metric_families(metrics)
        if fam.name == "agentload_sim:faults_injected"
        for s in fam.samples
        if s.name.endswith("_total")
    }
    assert injected.get("http_503", 0) == n_503
