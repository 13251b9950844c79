"""`agentload proxy`: pass-through fidelity, measurement, session grouping and the results
folder, with the embedded simulator as upstream and the openai SDK as the agent."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import openai
import pytest
from typer.testing import CliRunner

from agentload.cli import app
from agentload.proxy import ProxyConfig, ProxyServer
from agentload.proxy.sessions import key_session, split_session_path
from agentload.sim import SimConfig, SimServer

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Weather of a city.",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}},
                "required": ["city"],
            },
        },
    }
]
MESSAGES: list[Any] = [
    {"role": "system", "content": "You are a test."},
    {"role": "user", "content": "What is the weather in Paris?"},
]


@pytest.fixture
async def sim() -> AsyncIterator[SimServer]:
    async with SimServer(SimConfig(port=0, profile="instant", seed=7, model="sim")) as s:
        yield s


def _read(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _stream_shape(chunks: list[Any]) -> list[Any]:
    """What a caller sees of a stream, without ids and timestamps."""
    out = []
    for c in chunks:
        d = c.model_dump(exclude={"id", "created", "system_fingerprint"})
        out.append(d)
    return out


async def _stream(client: openai.AsyncOpenAI, **kw: Any) -> list[Any]:
    s = await client.chat.completions.create(model="sim", messages=MESSAGES, stream=True, **kw)
    return [c async for c in s]


async def test_streams_pass_through_unchanged_and_are_measured(
    sim: SimServer, tmp_path: Path
) -> None:
    out = tmp_path / "run"
    async with ProxyServer(ProxyConfig(upstream=sim.url, out=out)) as proxy:
        direct = openai.AsyncOpenAI(base_url=sim.base_url, api_key="x")
        via = openai.AsyncOpenAI(base_url=proxy.base_url, api_key="x")
        for kw in ({}, {"tools": TOOLS, "tool_choice": "required"}, {"max_tokens": 5}):
            a = await _stream(direct, seed=1, **kw)
            b = await _stream(via, seed=1, **kw, extra_headers={"X-Session-ID": "s1"})
            assert _stream_shape(a) == _stream_shape(b)
            # The caller did not ask for usage: the proxy's own usage chunk is not passed on.
            assert all(c.usage is None and c.choices for c in b)
        # Asked for: passed through as is.
        c = await _stream(via, stream_options={"include_usage": True})
        assert c[-1].choices == [] and c[-1].usage is not None
        assert c[-1].usage.completion_tokens > 0
        await direct.close()
        await via.close()
    calls = _read(out / "calls.jsonl")
    assert len(calls) == 4
    for rec in calls:
        assert rec["status"] == "ok" and rec["http_status"] == 200
        assert rec["ttft_s"] is not None and 0 < rec["ttft_s"] <= rec["e2e_s"]
        # Tokens come from the usage the proxy asked for, not from an estimate.
        assert rec["prompt_tokens"] > 10 and rec["completion_tokens"] > 0
        assert rec["tokens_estimated"] is False
        assert rec["cached_tokens"] is not None
        assert rec["finish_reason"] in ("stop", "length", "tool_calls")
    assert calls[1]["num_tool_calls"] >= 1 and calls[1]["finish_reason"] == "tool_calls"
    assert calls[2]["completion_tokens"] <= 5
    assert calls[0]["itl"]["count"] == calls[0]["token_chunks"] - 1


async def test_non_streamed_calls_pass_through(sim: SimServer, tmp_path: Path) -> None:
    out = tmp_path / "run"
    async with ProxyServer(ProxyConfig(upstream=sim.base_url, out=out)) as proxy:
        direct = openai.AsyncOpenAI(base_url=sim.base_url, api_key="x")
        via = openai.AsyncOpenAI(base_url=proxy.base_url, api_key="x")
        kw: dict[str, Any] = {"tools": TOOLS, "tool_choice": "required", "seed": 3}
        a = await direct.chat.completions.create(model="sim", messages=MESSAGES, **kw)
        b = await via.chat.completions.create(model="sim", messages=MESSAGES, **kw)
        # Usage differs only in cached tokens (the second call hits the prefix cache).
        ex = {"id", "created", "system_fingerprint", "usage"}
        assert a.model_dump(exclude=ex) == b.model_dump(exclude=ex)
        assert a.usage is not None and b.usage is not None
        assert (a.usage.prompt_tokens, a.usage.completion_tokens) == (
            b.usage.prompt_tokens,
            b.usage.completion_tokens,
        )
        await direct.close()
        await via.close()
    (rec,) = _read(out / "calls.jsonl")
    assert rec["stream"] is False and rec["status"] == "ok"
    assert rec["num_tool_calls"] == len(b.choices[0].message.tool_calls or [])
    assert b.usage is not None and rec["prompt_tokens"] == b.usage.prompt_tokens


async def test_sessions_grouped_by_header_path_and_key(sim: SimServer, tmp_path: Path) -> None:
    out = tmp_path / "run"
    async with ProxyServer(ProxyConfig(upstream=sim.url, out=out)) as proxy:
        by_header = openai.AsyncOpenAI(
            base_url=proxy.base_url, api_key="k1", default_headers={"X-Session-ID": "hdr"}
        )
        by_path = openai.AsyncOpenAI(base_url=f"{proxy.url}/s/pathsess/v1", api_key="k1")
        secret = "sk-proxy-secret-0123456789"
        by_key = openai.AsyncOpenAI(base_url=proxy.base_url, api_key=secret)
        for client, n in ((by_header, 2), (by_path, 3), (by_key, 1)):
            for i in range(n):
                msgs = [*MESSAGES, {"role": "user", "content": f"turn {i}"}]
                await client.chat.completions.create(
                    model="sim", messages=msgs, tools=TOOLS, stream=bool(i % 2)
                )
            await client.close()
    calls = _read(out / "calls.jsonl")
    counts: dict[str, int] = {}
    for c in calls:
        counts[c["session_id"]] = counts.get(c["session_id"], 0) + 1
    assert counts == {"hdr": 2, "pathsess": 3, key_session(secret): 1}
    assert [c["turn"] for c in calls if c["session_id"] == "pathsess"] == [0, 1, 2]
    sessions = {s["session_id"]: s for s in _read(out / "sessions.jsonl")}
    assert sessions["pathsess"]["counts"]["agent_calls"] == 3
    assert sessions["pathsess"]["kind"] == "proxy"
    trajs = {t["session_id"]: t for t in _read(out / "trajectories.jsonl")}
    t = trajs["pathsess"]
    # The last call's messages as sent, then the final answer; the tools with them.
    assert t["messages"][:-1] == [*MESSAGES, {"role": "user", "content": "turn 2"}]
    assert t["messages"][-1]["role"] == "assistant"
    assert t["tools"] == TOOLS
    # The key is never written anywhere, only its hash.
    for f in out.iterdir():
        if f.is_file():
            assert secret not in f.read_text(errors="replace"), f.name
    summary = json.loads((out / "summary.json").read_text())
    assert summary["counts"]["calls"] == 6 and summary["counts"]["sessions"] == 3
    o = summary["proxy"]["overhead_s"]
    assert o["count"] == 6 and 0 < o["p50"] <= o["p99"] < 1.0
    assert (out / "report.md").exists()
    # `agentload report` reads the folder like any run's.
    res = CliRunner().invoke(app, ["report", str(out)])
    assert res.exit_code == 0, res.output
    # The trajectories are a replay dataset as they stand.
    res = CliRunner().invoke(app, ["dataset", "validate", str(out / "trajectories.jsonl")])
    assert res.exit_code == 0, res.output
    assert "valid trajectories dataset, 3 conversations" in res.output


async def test_other_paths_forwarded(sim: SimServer, tmp_path: Path) -> None:
    async with (
        ProxyServer(ProxyConfig(upstream=sim.url, out=tmp_path / "run")) as proxy,
        aiohttp.ClientSession() as http,
    ):
        for path in ("/v1/models", "/metrics", "/health", "/s/abc/v1/models", "/nope"):
            async with http.get(sim.url + split_session_path(path)[1]) as r:
                direct = (r.status, await r.read())
            async with http.get(proxy.url + path) as r:
                via = (r.status, await r.read())
            assert via[0] == direct[0], path
            if path != "/metrics":  # counters move between the two reads
                assert via[1] == direct[1], path
        # Upstream errors on chat completions come back unchanged and are recorded.
        async with http.post(proxy.base_url + "/chat/completions", json={"model": "sim"}) as r:
            assert r.status == 400
    (rec,) = _read(tmp_path / "run" / "calls.jsonl")
    assert rec["status"] == "error" and rec["error_kind"] == "http_400"


async def test_unreachable_upstream_is_a_502_and_recorded(tmp_path: Path) -> None:
    out = tmp_path / "run"
    async with ProxyServer(ProxyConfig(upstream="http://127.0.0.1:9", out=out)) as proxy:
        via = openai.AsyncOpenAI(base_url=proxy.base_url, api_key="x", max_retries=0)
        with pytest.raises(openai.APIStatusError) as ei:
            await via.chat.completions.create(model="sim", messages=MESSAGES)
        assert ei.value.status_code == 502
        await via.close()
    (rec,) = _read(out / "calls.jsonl")
    assert rec["error_kind"] == "connect_error"


def test_cli_help_and_bad_upstream(tmp_path: Path) -> None:
    r = CliRunner().invoke(app, ["proxy", "--help"])
    assert r.exit_code == 0 and "--upstream" in r.output
    r = CliRunner().invoke(app, ["proxy", "--upstream", "localhost:8000", "--out", str(tmp_path)])
    assert r.exit_code == 2
    assert "expected http(s)://" in r.output


def test_usage_filter_drops_only_the_usage_event_across_any_split() -> None:
    from agentload.proxy.service import UsageFilter

    content = b'data: {"choices":[{"index":0,"delta":{"content":"usage"}}]}'
    usage = b'data: {"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":1}}'
    for nl in (b"\n", b"\r\n"):
        stream = content + nl * 2 + usage + nl * 2 + b"data: [DONE]" + nl * 2
        want = content + nl * 2 + b"data: [DONE]" + nl * 2
        for step in (1, 7, 50, len(stream)):
            f = UsageFilter()
            got = b"".join(f.feed(stream[i : i + step]) for i in range(0, len(stream), step))
            assert got + f.flush() == want, (nl, step)


def test_cli_refuses_a_folder_with_results(tmp_path: Path) -> None:
    (tmp_path / "calls.jsonl").write_text('{"call_id": "x"}\n')
    r = CliRunner().invoke(
        app, ["proxy", "--upstream", "http://127.0.0.1:9", "--port", "0", "--out", str(tmp_path)]
    )
    assert r.exit_code == 2
    assert "already holds results" in r.output and "Traceback" not in r.output


async def test_upstream_failures_reach_the_caller_and_the_record(
    sim: SimServer, tmp_path: Path
) -> None:
    out = tmp_path / "run"
    body = {
        "model": "sim",
        "messages": MESSAGES,
        "stream": True,
        "max_tokens": 40,
        "ignore_eos": True,
    }
    async with (
        ProxyServer(ProxyConfig(upstream=sim.url, out=out)) as proxy,
        aiohttp.ClientSession() as http,
    ):
        # A connection reset mid-stream: the caller's connection breaks as well.
        with pytest.raises(aiohttp.ClientPayloadError):
            async with http.post(
                proxy.base_url + "/chat/completions",
                json=body,
                headers={"X-Agentload-Fault": "reset"},
            ) as r:
                await r.read()
        # An error event inside the stream is passed on as sent.
        async with http.post(
            proxy.base_url + "/chat/completions",
            json=body,
            headers={"X-Agentload-Fault": "error_event"},
        ) as r:
            assert b'"error"' in await r.read()
    recs = _read(out / "calls.jsonl")
    assert [r["error_kind"] for r in recs] == ["malformed_stream", "stream_error"]
    assert all(r["status"] == "error" for r in recs)
