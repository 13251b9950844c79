"""The request head the client encodes once per client and key: what goes on the wire per call."""

from __future__ import annotations

import pytest

from agentload.client import ChatClient, EndpointConfig, RetryPolicy
from scripted_server import ScriptedServer, text_stream

MSGS = [{"role": "user", "content": "hi"}]


@pytest.fixture
async def server():
    async with ScriptedServer() as s:
        s.scripts["default"] = text_stream(["ok"])
        yield s


def _ep(server: ScriptedServer, **kw: object) -> EndpointConfig:
    return EndpointConfig(
        base_url=server.base_url,
        model="m",
        retry=RetryPolicy(max_attempts=1),
        **kw,  # type: ignore[arg-type]
    )


async def test_key_and_session_per_call(server: ScriptedServer, monkeypatch) -> None:
    monkeypatch.setenv("AGENTLOAD_TEST_KEY", "sk-one")
    async with ChatClient(_ep(server, api_key_env="AGENTLOAD_TEST_KEY")) as c:
        assert (await c.chat(MSGS, session_id="s-1")).ok
        monkeypatch.setenv("AGENTLOAD_TEST_KEY", "sk-two")  # a rotated key is picked up
        assert (await c.chat(MSGS)).ok
        assert (await c.chat(MSGS, session_id="s-3", headers={"X-Extra": "e"})).ok
        monkeypatch.delenv("AGENTLOAD_TEST_KEY")
        res = await c.chat(MSGS, session_id="s-4")
    heads = [r["headers"] for r in server.requests]
    assert [h["Authorization"] for h in heads] == [
        "Bearer sk-one",
        "Bearer sk-two",
        "Bearer sk-two",
    ]
    assert [h.get("X-Session-ID") for h in heads] == ["s-1", None, "s-3"]
    assert heads[2]["X-Extra"] == "e" and "X-Extra" not in heads[1]
    assert res.record.error_kind == "config_error"
    assert "AGENTLOAD_TEST_KEY" in str(res.record.error_message)


async def test_endpoint_session_header_wins(server: ScriptedServer) -> None:
    async with ChatClient(_ep(server, headers={"X-Session-ID": "fixed"})) as c:
        assert (await c.chat(MSGS, session_id="s-1")).ok
    assert server.requests[-1]["headers"]["X-Session-ID"] == "fixed"


async def test_session_id_that_would_split_the_request(server: ScriptedServer) -> None:
    async with ChatClient(_ep(server)) as c:
        bad = await c.chat(MSGS, session_id="s\r\nX-Injected: 1")
        good = await c.chat(MSGS, session_id="s-2")
    assert bad.record.error_kind == "config_error" and "line break" in str(bad.record.error_message)
    assert good.ok
    assert len(server.requests) == 1 and "X-Injected" not in server.requests[0]["headers"]
