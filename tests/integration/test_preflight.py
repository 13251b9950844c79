"""Preflight against real loopback servers: the embedded simulator, and a small server that
answers the way vLLM does when auto tool choice is off (HTTP 400 naming the flag)."""

from __future__ import annotations

import socket
import time
from collections.abc import AsyncIterator
from typing import Any

import orjson
import pytest
from aiohttp import web

from agentload.client import EndpointConfig
from agentload.config import ConfigError
from agentload.engines.preflight import PreflightFailed, derive_metrics_urls, run_preflight
from agentload.sim import SimConfig, SimServer

# vLLM 0.32's answer to tool_choice "auto" without --enable-auto-tool-choice.
VLLM_TOOL_ERROR = (
    '"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set'
)


@pytest.fixture
async def sim() -> AsyncIterator[SimServer]:
    async with SimServer(SimConfig(port=0, speedup=20)) as s:
        yield s


@pytest.fixture
async def keyed_sim() -> AsyncIterator[SimServer]:
    async with SimServer(SimConfig(port=0, speedup=20, api_key="s3cret-key")) as s:
        yield s


def root(sim: SimServer) -> str:
    return sim.base_url.removesuffix("/v1")


def ep(base_url: str, model: str = "agentload-sim", **kw: Any) -> EndpointConfig:
    return EndpointConfig(base_url=base_url, model=model, **kw)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def test_the_simulator_passes_and_is_described(sim: SimServer) -> None:
    e = ep(root(sim))  # no /v1: accepted
    assert e.base_url == sim.base_url
    t0 = time.perf_counter()
    report = await run_preflight({"agent": e, "user": e})
    assert time.perf_counter() - t0 < 5
    assert report.ok, report.message()
    assert len(report.checks) == 1  # one server for both roles: checked once
    d = report.to_dict()
    assert set(d) == {"agent", "user"}
    a = d["agent"]
    assert a["roles"] == ["agent", "user"]
    assert a["engine"] == "agentload-sim" and a["engine_version"]
    assert a["served_models"] == ["agentload-sim"]
    assert a["streams_usage"] is True and a["cached_tokens_in_usage"] is True
    assert a["tool_calling"] is True
    assert a["metrics_urls"] == [f"{root(sim)}/metrics"] and a["metrics_derived"] is True
    assert a["probe_ttft_s"] > 0
    # the derived metrics URL goes to the endpoints the run uses
    applied = report.apply({"agent": e, "user": e})
    assert applied["agent"].all_metrics_urls == [f"{root(sim)}/metrics"]


async def test_wrong_model_names_the_served_ones(sim: SimServer) -> None:
    report = await run_preflight({"agent": ep(sim.base_url, "Qwen/Qwen3-8B")})
    assert not report.ok
    msg = report.message()
    assert msg.startswith(f"preflight: agent endpoint {sim.base_url} (model 'Qwen/Qwen3-8B'):")
    assert "not served" in msg and "'agentload-sim'" in msg
    assert "\n" not in msg
    with pytest.raises(PreflightFailed) as exc:
        report.raise_for_failures()
    assert isinstance(exc.value, ConfigError)  # exit code 2 in the CLI
    assert str(exc.value) == msg


async def test_a_dead_server_fails_at_once() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    t0 = time.perf_counter()
    report = await run_preflight({"agent": ep(url), "user": ep(url, "other")})
    assert time.perf_counter() - t0 < 3
    assert len(report.failures) == 2  # two models on one address: two endpoints
    for c in report.failures:
        assert "cannot connect" in c.problem
        assert "is the server running" in c.message()


async def test_missing_key_is_named_and_openai_api_key_is_read(
    keyed_sim: SimServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    e = ep(keyed_sim.base_url)
    report = await run_preflight({"agent": e})
    msg = report.message()
    assert "HTTP 401" in msg and "Unauthorized" in msg and "OPENAI_API_KEY" in msg

    monkeypatch.setenv("OPENAI_API_KEY", "s3cret-key")
    report = await run_preflight({"agent": e})
    assert report.ok, report.message()
    d = report.to_dict()["agent"]
    assert d["key_from_env"] == "OPENAI_API_KEY"
    assert b"s3cret" not in orjson.dumps(d)

    monkeypatch.setenv("OPENAI_API_KEY", "wrong-key")
    report = await run_preflight({"agent": e})
    assert "refused the key in $OPENAI_API_KEY" in report.message()
    assert "wrong-key" not in report.message()


async def test_named_key_variable_must_be_set(
    sim: SimServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("AGENTLOAD_TEST_KEY", raising=False)
    report = await run_preflight({"agent": ep(sim.base_url, api_key_env="AGENTLOAD_TEST_KEY")})
    assert "AGENTLOAD_TEST_KEY" in report.message() and "not set" in report.message()


# ---- a server that answers like vLLM without --enable-auto-tool-choice ------------------

METRICS = b"""# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="tiny"} 0.0
"""


def _sse(obj: Any) -> bytes:
    return b"data: " + orjson.dumps(obj) + b"\n\n"


async def _chat(request: web.Request) -> web.StreamResponse:
    body = await request.json()
    if body.get("tools") and body.get("tool_choice") == "auto":
        err = {"error": {"message": VLLM_TOOL_ERROR, "type": "BadRequestError", "code": 400}}
        return web.json_response(err, status=400)
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await resp.prepare(request)
    base = {"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": "tiny"}
    delta = {"role": "assistant", "content": "OK"}
    await resp.write(
        _sse({**base, "choices": [{"index": 0, "delta": delta, "finish_reason": "stop"}]})
    )
    if (body.get("stream_options") or {}).get("include_usage"):
        usage = {
            "prompt_tokens": 9,
            "completion_tokens": 1,
            "total_tokens": 10,
            "prompt_tokens_details": None,  # vLLM without --enable-prompt-tokens-details
        }
        await resp.write(_sse({**base, "choices": [], "usage": usage}))
    await resp.write(b"data: [DONE]\n\n")
    return resp


@pytest.fixture
async def vllm_like() -> AsyncIterator[str]:
    models = {"object": "list", "data": [{"id": "tiny", "object": "model", "owned_by": "vllm"}]}

    async def get_models(request: web.Request) -> web.Response:
        return web.json_response(models)

    async def get_version(request: web.Request) -> web.Response:
        return web.json_response({"version": "0.32.0"})

    async def get_metrics(request: web.Request) -> web.Response:
        return web.Response(body=METRICS)

    app = web.Application()
    app.router.add_get("/v1/models", get_models)
    app.router.add_get("/version", get_version)
    app.router.add_get("/metrics", get_metrics)
    app.router.add_post("/v1/chat/completions", _chat)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()


async def test_tools_not_enabled_on_vllm_fails_with_its_words_and_the_flags(
    vllm_like: str,
) -> None:
    report = await run_preflight({"agent": ep(vllm_like, "tiny")})
    c = report.checks[0]
    assert c.engine == "vllm" and c.engine_version == "0.32.0"
    assert c.engine_evidence.startswith("vllm: metric names")
    assert c.tool_calling is False
    msg = report.message()
    assert VLLM_TOOL_ERROR in msg
    assert "--enable-auto-tool-choice --tool-call-parser" in msg
    # usage came, cached tokens did not: a note with vLLM's flag, not a failure
    assert c.streams_usage is True and c.cached_tokens is False
    assert any("--enable-prompt-tokens-details" in n for n in c.notes)


async def test_roles_without_tools_do_not_need_tool_calling(vllm_like: str) -> None:
    e = ep(f"{vllm_like}/v1/", "tiny")
    report = await run_preflight({"user": e}, tool_roles=("agent",))
    assert report.ok, report.message()
    assert report.checks[0].tool_calling is None


async def test_metrics_url_derived_only_when_it_answers(vllm_like: str) -> None:
    eps = {"agent": ep(vllm_like, "tiny"), "user": ep(f"http://127.0.0.1:{free_port()}", "x")}
    out, notes = await derive_metrics_urls(eps)
    assert out["agent"].metrics_url == f"{vllm_like}/metrics"
    assert out["user"].metrics_url is None
    assert len(notes) == 1 and notes[0].startswith("user endpoint: no Prometheus metrics at")
