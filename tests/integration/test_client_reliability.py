"""TTFT for every kind of token, Retry-After, URL credentials and keys echoed by a server."""

from __future__ import annotations

import base64
import datetime as dt
import email.utils

import orjson
import pytest

from agentload.client import CallRecord, ChatClient, EndpointConfig, RetryPolicy, Timeouts
from agentload.client import client as client_module
from agentload.client.safety import (
    parse_retry_after,
    redact,
    split_userinfo,
    without_userinfo,
)
from agentload.redact import endpoint_secrets
from scripted_server import DONE, Script, ScriptedServer, chunk, sse, usage_chunk

MSGS = [{"role": "user", "content": "hi"}]
KEY = "sk-canary-7f3a9c1e5b2d4680"


@pytest.fixture
async def server():
    async with ScriptedServer() as s:
        yield s


async def _call(server: ScriptedServer, base_url: str | None = None, **kw: object):
    kw.setdefault("retry", RetryPolicy(max_attempts=1))
    ep = EndpointConfig(base_url=base_url or server.base_url, model="m", **kw)  # type: ignore[arg-type]
    seen: list[CallRecord] = []
    async with ChatClient(ep, on_record=seen.append) as c:
        res = await c.chat(MSGS)
    assert len(seen) == 1
    return res


def _tool_delta(args: str, first: bool = False) -> dict:
    tc: dict = {"index": 0, "function": {"arguments": args}}
    if first:
        tc.update(id="call_1", type="function")
        tc["function"]["name"] = "lookup"
    return chunk({"tool_calls": [tc]})


# --- TTFT is set by any token: content, reasoning or a tool-call fragment -----------------


async def test_stall_after_tool_call_delta_is_idle_not_first_token(server: ScriptedServer) -> None:
    server.scripts["default"] = Script(
        parts=[
            (0.0, sse(chunk({"role": "assistant", "content": ""}))),
            (0.15, sse(_tool_delta("", first=True))),
            (0.0, sse(_tool_delta('{"q": '))),
        ],
        end="hang",
    )
    res = await _call(server, timeouts=Timeouts(first_token=0.5, idle=0.3))
    rec = res.record
    assert rec.error_kind == "timeout_idle", rec
    assert rec.ttft_s == pytest.approx(0.15, abs=0.08)
    assert rec.token_chunks == 2
    assert rec.e2e_s == pytest.approx(0.15 + 0.3, abs=0.1)


@pytest.mark.parametrize("kind", ["tool_call", "reasoning_content", "reasoning"])
async def test_ttft_stamped_without_content(server: ScriptedServer, kind: str) -> None:
    if kind == "tool_call":
        tokens = [_tool_delta("", first=True), _tool_delta('{"q": 1}')]
    else:
        tokens = [chunk({kind: "let me think"}), chunk({kind: " more"})]
    parts = [
        (0.0, sse(chunk({"role": "assistant", "content": ""}))),
        (0.2, sse(tokens[0])),
        (0.1, sse(tokens[1])),
        (0.0, sse(chunk({}, "tool_calls" if kind == "tool_call" else "stop"))),
        (0.0, sse(usage_chunk(10, 2))),
        (0.0, DONE),
    ]
    server.scripts["default"] = Script(parts=parts)
    res = await _call(server)
    rec = res.record
    assert rec.ok, rec
    assert rec.ttft_s == pytest.approx(0.2, abs=0.08)
    assert rec.itl.count == 1 and rec.itl.mean == pytest.approx(0.1, abs=0.08)
    if kind == "tool_call":
        assert res.tool_calls[0]["function"] == {"name": "lookup", "arguments": '{"q": 1}'}
        assert res.content == ""
    else:
        assert res.reasoning == "let me think more" and res.content == ""


# --- Retry-After ------------------------------------------------------------------------


def _busy(status: int, retry_after: str | None) -> Script:
    headers = {"Retry-After": retry_after} if retry_after is not None else {}
    return Script(
        parts=[(0, b'{"error": {"message": "busy"}}')],
        status=status,
        content_type="application/json",
        headers=headers,
    )


def _ok() -> Script:
    return Script(parts=[(0.0, sse(chunk({"content": "ok"}))), (0.0, DONE)])


def test_parse_retry_after() -> None:
    now = dt.datetime(2026, 11, 23, 12, 0, 0, tzinfo=dt.UTC)
    assert parse_retry_after("3", now) == 3.0
    assert parse_retry_after(" 0 ", now) == 0.0
    assert parse_retry_after("1.5", now) == 1.5
    assert parse_retry_after("Mon, 23 Nov 2026 12:00:30 GMT", now) == 30.0
    assert parse_retry_after("Mon, 23 Nov 2026 11:00:00 GMT", now) == 0.0  # in the past
    for bad in (None, "", "soon", "-5", "nan", "inf", "Mon, 99 Foo 2026"):
        assert parse_retry_after(bad, now) is None, bad


@pytest.mark.parametrize("status", [429, 503])
async def test_retry_after_seconds_is_honoured(server: ScriptedServer, status: int) -> None:
    server.scripts["default"] = [_busy(status, "1"), _ok()]
    # A backoff this large would dominate if Retry-After were ignored.
    res = await _call(server, retry=RetryPolicy(max_attempts=2, backoff_base=30, backoff_max=30))
    rec = res.record
    assert rec.ok and rec.attempts == 2, rec
    assert rec.retry_after_s == 1.0 and rec.retry_wait_s == 1.0
    gap = (server.requests[1]["recv_ns"] - server.requests[0]["recv_ns"]) / 1e9
    assert gap == pytest.approx(1.0, abs=0.25)
    assert rec.total_s >= 1.0


async def test_retry_after_http_date(server: ScriptedServer) -> None:
    past = email.utils.format_datetime(dt.datetime.now(dt.UTC) - dt.timedelta(hours=1), True)
    server.scripts["default"] = [_busy(503, past), _ok()]
    res = await _call(server, retry=RetryPolicy(max_attempts=2, backoff_base=30, backoff_max=30))
    assert res.record.ok and res.record.retry_after_s == 0.0 and res.record.retry_wait_s == 0.0


async def test_retry_after_is_capped(server: ScriptedServer, monkeypatch) -> None:
    monkeypatch.setattr(client_module, "RETRY_AFTER_MAX_S", 0.2)
    server.scripts["default"] = [_busy(429, "86400"), _ok()]
    res = await _call(server, retry=RetryPolicy(max_attempts=2))
    assert res.record.ok and res.record.retry_after_s == 0.2 and res.record.retry_wait_s == 0.2
    assert res.record.total_s < 2


async def test_retry_after_ignored_on_other_statuses(server: ScriptedServer) -> None:
    server.scripts["default"] = [_busy(502, "30"), _ok()]
    res = await _call(server, retry=RetryPolicy(max_attempts=2, backoff_base=0.05))
    rec = res.record
    assert rec.ok and rec.retry_after_s is None
    assert 0 <= rec.retry_wait_s <= 0.05


async def test_unreadable_retry_after_falls_back_to_backoff(server: ScriptedServer) -> None:
    server.scripts["default"] = [_busy(503, "whenever"), _ok()]
    res = await _call(server, retry=RetryPolicy(max_attempts=2, backoff_base=0.05))
    assert res.record.ok and res.record.retry_after_s is None
    assert res.record.retry_wait_s <= 0.05


# --- URL credentials --------------------------------------------------------------------


def test_split_userinfo() -> None:
    url, auth = split_userinfo("http://alice:s3cr%40t-pw@127.0.0.1:8000/v1/x")
    assert url == "http://127.0.0.1:8000/v1/x"
    assert auth == "Basic " + base64.b64encode(b"alice:s3cr@t-pw").decode()
    assert split_userinfo("http://127.0.0.1:8000/v1") == ("http://127.0.0.1:8000/v1", None)
    # What a server could echo of them is redacted: the password as written and as sent,
    # and the Basic token.
    ep = EndpointConfig(base_url="http://alice:s3cr%40t-pw@127.0.0.1:8000/v1", model="m")
    assert {
        "s3cr@t-pw",
        "s3cr%40t-pw",
        base64.b64encode(b"alice:s3cr@t-pw").decode(),
    } <= endpoint_secrets(ep)


async def test_userinfo_with_api_key_uses_the_key(server: ScriptedServer, monkeypatch) -> None:
    monkeypatch.setenv("AGENTLOAD_TEST_KEY", KEY)
    server.scripts["default"] = _ok()
    url = server.base_url.replace("http://", "http://bob:hunter22pw@")
    res = await _call(server, url, api_key_env="AGENTLOAD_TEST_KEY")
    assert res.record.ok, res.record
    assert server.requests[0]["headers"]["Authorization"] == f"Bearer {KEY}"
    assert b"hunter22pw" not in res.record.to_json()


async def test_userinfo_without_key_is_basic_auth(server: ScriptedServer) -> None:
    server.scripts["default"] = _ok()
    url = server.base_url.replace("http://", "http://bob:hunter22pw@")
    res = await _call(server, url)
    assert res.record.ok, res.record
    expected = "Basic " + base64.b64encode(b"bob:hunter22pw").decode()
    assert server.requests[0]["headers"]["Authorization"] == expected


async def test_explicit_authorization_header_wins_over_userinfo(server: ScriptedServer) -> None:
    server.scripts["default"] = _ok()
    url = server.base_url.replace("http://", "http://bob:hunter22pw@")
    res = await _call(server, url, headers={"authorization": "Token abc"})
    assert res.record.ok, res.record
    assert server.requests[0]["headers"]["Authorization"] == "Token abc"


async def test_userinfo_password_echoed_is_redacted(server: ScriptedServer) -> None:
    body = orjson.dumps({"error": {"message": "bad credentials bob:hunter22pw"}})
    server.scripts["default"] = Script(
        parts=[(0, body)], status=401, content_type="application/json"
    )
    url = server.base_url.replace("http://", "http://bob:hunter22pw@")
    res = await _call(server, url)
    assert res.record.error_kind == "http_401"
    # The whole userinfo is a secret value too (a token may be all of it: https://TOKEN@host),
    # as the results folder's scrubber has always had it.
    assert res.record.error_message == "bad credentials <redacted>"
    url = server.base_url.replace("http://", "http://tok-4f1e9a7c@")
    body = orjson.dumps({"error": {"message": "bad token tok-4f1e9a7c"}})
    server.scripts["default"] = Script(
        parts=[(0, body)], status=401, content_type="application/json"
    )
    res = await _call(server, url)
    assert res.record.error_message == "bad token <redacted>"


# --- keys echoed back by a server -------------------------------------------------------


def test_redact() -> None:
    assert redact(f"key {KEY} and {KEY}", [KEY]) == "key <redacted> and <redacted>"
    assert redact("exceeded", ["x"]) == "exceeded"  # placeholder keys are not hunted


@pytest.mark.parametrize(
    ("status", "body", "content_type"),
    [
        (401, orjson.dumps({"error": {"message": f"Incorrect API key provided: {KEY}"}}), "json"),
        (401, f"invalid token Bearer {KEY}".encode(), "text"),
        # The key straddles the 300-character excerpt limit: not even its start may leak.
        (400, orjson.dumps({"error": {"message": "x" * 290 + KEY}}), "json"),
        (200, sse({"error": {"message": f"key {KEY} revoked"}}), "sse"),
        (200, b"data: {not json " + KEY.encode() + b"\n\n", "sse"),
    ],
    ids=["json-401", "text-401", "key-at-excerpt-limit", "stream-error-event", "bad-chunk"],
)
async def test_echoed_key_is_redacted(
    server: ScriptedServer, monkeypatch, status: int, body: bytes, content_type: str
) -> None:
    monkeypatch.setenv("AGENTLOAD_TEST_KEY", KEY)
    ctype = {"json": "application/json", "text": "text/plain", "sse": "text/event-stream"}
    server.scripts["default"] = Script(
        parts=[(0, body)], status=status, content_type=ctype[content_type]
    )
    res = await _call(server, api_key_env="AGENTLOAD_TEST_KEY")
    rec = res.record
    assert rec.status == "error"
    assert rec.error_message and "<redacted>" in rec.error_message
    dumped = rec.to_json() + orjson.dumps(res.to_dict())
    assert KEY[:8].encode() not in dumped


def test_without_userinfo() -> None:
    basic = "Basic " + base64.b64encode(b"bob:hunter22pw").decode()
    url = "http://bob:hunter22pw@127.0.0.1:8000/metrics"
    assert without_userinfo(url, None) == (
        "http://127.0.0.1:8000/metrics",
        {"Authorization": basic},
    )
    assert without_userinfo(url, {"authorization": "Bearer k"}) == (
        "http://127.0.0.1:8000/metrics",
        {"authorization": "Bearer k"},
    )
    assert without_userinfo("http://h/m", {"a": "b"}) == ("http://h/m", {"a": "b"})


async def test_preflight_with_url_credentials_and_a_key(monkeypatch) -> None:
    # aiohttp refuses URL credentials next to an Authorization header: every request the run
    # makes, the preflight's included, must go out without them.
    from agentload.engines.preflight import run_preflight
    from agentload.sim import SimConfig
    from agentload.sim.api import SimServer

    monkeypatch.setenv("AGENTLOAD_TEST_KEY", KEY)
    async with SimServer(SimConfig(port=0, api_key=KEY)) as sim:
        url = sim.base_url.replace("http://", "http://bob:hunter22pw@")
        ep = EndpointConfig(base_url=url, model="agentload-sim", api_key_env="AGENTLOAD_TEST_KEY")
        report = await run_preflight({"agent": ep}, probe_metrics=False, timeout_s=10)
    assert report.ok, report
