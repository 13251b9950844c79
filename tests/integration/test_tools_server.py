"""`agentload tools`: a domain's tools over MCP (streamable HTTP and stdio, with the official
SDK's clients), over HTTP/JSON and through generated scripts; per-session environments and
the domain grader at the end."""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client

from agentload.domains import Environment, Task, get_domain, grade
from agentload.tools import GRADE_TOOL, ToolServer, write_scripts


def _write_task(domain: str) -> Task:
    """The domain's first task whose gold actions change the database."""
    return next(t for t in get_domain(domain).tasks() if t.category == "single_write")


def _replies(task: Task) -> list[str]:
    return [" ".join(task.required_outputs)]


def _fresh_hash(domain: str) -> str:
    return Environment(get_domain(domain)).db_hash()


@pytest.fixture
async def airline() -> AsyncIterator[ToolServer]:
    async with ToolServer("airline", port=0, grade_tool=True) as ts:
        yield ts


async def _mcp(url: str) -> Any:
    """An initialised MCP client session (an async context manager)."""
    from contextlib import asynccontextmanager

    @asynccontextmanager
    async def cm() -> AsyncIterator[ClientSession]:
        async with (
            streamable_http_client(url) as (read, write, _),
            ClientSession(read, write) as s,
        ):
            await s.initialize()
            yield s

    return cm()


async def test_mcp_session_solves_a_task_and_grades_like_the_domain(airline: ToolServer) -> None:
    task = _write_task("airline")
    sid = airline.create_session(task.id)
    async with await _mcp(airline.mcp_url(sid)) as client:
        listed = {t.name: t for t in (await client.list_tools()).tools}
        assert set(listed) == {t.name for t in get_domain("airline").tools} | {GRADE_TOOL}
        for tool in get_domain("airline").tools:
            assert listed[tool.name].inputSchema == tool.parameters
            assert listed[tool.name].description == tool.description
            assert listed[tool.name].annotations is not None
            assert listed[tool.name].annotations.readOnlyHint is (not tool.writes)
        for action in task.gold_actions:
            r = await client.call_tool(action.name, action.arguments)
            assert not r.isError, r.content
        graded = await client.call_tool(GRADE_TOOL, {"replies": _replies(task)})
    assert not graded.isError
    assert graded.structuredContent is not None
    assert graded.structuredContent["reward"] == 1.0
    session = airline.session(sid)
    assert [a.name for a in session.env.actions] == [a.name for a in task.gold_actions]
    expected = grade(get_domain("airline"), task, task.gold_actions, _replies(task))
    got = airline.grade(sid, _replies(task))
    assert got.reward == expected.reward == 1.0
    assert got.db_hash == expected.db_hash != _fresh_hash("airline")
    # Without the replies the database still matches, but required outputs are missing.
    if task.required_outputs:
        assert airline.grade(sid).outputs_ok is False


async def test_mcp_sessions_are_isolated(airline: ToolServer) -> None:
    task = _write_task("airline")
    a, b = airline.create_session(task.id), airline.create_session(task.id)
    async with await _mcp(airline.mcp_url(a)) as client:
        for action in task.gold_actions:
            await client.call_tool(action.name, action.arguments)
    assert airline.session(a).env.db_hash() != _fresh_hash("airline")
    assert airline.session(b).env.db_hash() == _fresh_hash("airline")
    assert airline.grade(b, _replies(task)).reward == 0.0
    # A second connection to the same session URL acts on the same environment.
    async with await _mcp(airline.mcp_url(a)) as client:
        r = await client.call_tool(task.gold_actions[-1].name, task.gold_actions[-1].arguments)
    assert len(airline.session(a).env.actions) == len(task.gold_actions) + 1
    assert r.content


async def test_mcp_root_endpoint_opens_one_environment_per_client(airline: ToolServer) -> None:
    task = _write_task("airline")
    url = f"{airline.mcp_url()}?task={task.id}"
    async with await _mcp(url) as one, await _mcp(url) as two:
        for action in task.gold_actions:
            assert not (await one.call_tool(action.name, action.arguments)).isError
        await two.call_tool("list_airports", {})
        g1 = await one.call_tool(GRADE_TOOL, {"replies": _replies(task)})
        g2 = await two.call_tool(GRADE_TOOL, {"replies": _replies(task)})
    assert g1.structuredContent and g1.structuredContent["reward"] == 1.0
    assert g2.structuredContent and g2.structuredContent["reward"] == 0.0
    sids = [s.sid for s in airline.store]
    assert len(sids) == 2 and all(s.startswith("mcp-") for s in sids)
    assert {s.task_id for s in airline.store} == {task.id}


async def test_mcp_errors_are_error_results(airline: ToolServer) -> None:
    sid = airline.create_session()
    async with await _mcp(airline.mcp_url(sid)) as client:
        r = await client.call_tool("no_such_tool", {})
        assert r.isError and "unknown tool 'no_such_tool'" in r.content[0].text  # type: ignore[union-attr]
        r = await client.call_tool("get_booking", {})
        assert r.isError
        assert "reservation_id" in r.content[0].text  # type: ignore[union-attr]
        r = await client.call_tool("get_booking", {"reservation_id": 7})
        assert r.isError and "reservation_id" in r.content[0].text  # type: ignore[union-attr]
        # A tool's own refusal reaches the environment (it is graded) and is an error result.
        r = await client.call_tool("get_booking", {"reservation_id": "NOPE00"})
        assert r.isError and r.content[0].text.startswith("Error:")  # type: ignore[union-attr]
        r = await client.call_tool(GRADE_TOOL, {})
        assert r.isError and "without a task" in r.content[0].text  # type: ignore[union-attr]
    assert [a.arguments for a in airline.session(sid).env.actions] == [{"reservation_id": "NOPE00"}]
    # An MCP URL of a session that does not exist: 404 naming the session, before any MCP.
    async with (
        aiohttp.ClientSession() as http,
        http.post(airline.mcp_url("nosuch"), json={"jsonrpc": "2.0", "id": 1}) as r,
    ):
        assert r.status == 404
        assert await r.json() == {"error": "unknown session 'nosuch'", "field": "session"}


async def _post(http: aiohttp.ClientSession, url: str, body: Any = None) -> tuple[int, Any]:
    data = body if isinstance(body, bytes) else json.dumps(body or {}).encode()
    async with http.post(url, data=data, headers={"Content-Type": "application/json"}) as r:
        return r.status, await r.json()


async def test_http_json_endpoint_solves_and_grades_a_retail_task() -> None:
    task = _write_task("retail")
    async with ToolServer("retail", port=0) as ts, aiohttp.ClientSession() as http:
        status, created = await _post(http, f"{ts.url}/sessions", {"task_id": task.id})
        assert status == 201 and created["task_id"] == task.id
        sid = created["session"]
        assert created["mcp_url"] == ts.mcp_url(sid)
        async with http.get(f"{ts.url}/sessions/{sid}/tools") as r:
            assert await r.json() == get_domain("retail").tool_schemas()
        for action in task.gold_actions:
            status, reply = await _post(
                http, f"{ts.url}/sessions/{sid}/tools/{action.name}", action.arguments
            )
            assert status == 200 and reply["ok"], reply
        status, graded = await _post(
            http, f"{ts.url}/sessions/{sid}/grade", {"replies": _replies(task)}
        )
        assert status == 200
        assert graded["reward"] == 1.0 and graded["db_match"]
        assert graded["db_hash"] == grade(get_domain("retail"), task, task.gold_actions, []).db_hash
        assert [a["name"] for a in graded["actions"]] == [a.name for a in task.gold_actions]
        async with http.get(f"{ts.url}/healthz") as r:
            assert (await r.json())["sessions"] == 1
        async with http.delete(f"{ts.url}/sessions/{sid}") as r:
            assert r.status == 200
        async with http.get(f"{ts.url}/sessions/{sid}") as r:
            assert r.status == 404


async def test_http_errors_name_the_field(airline: ToolServer) -> None:
    sid = airline.create_session()
    base = f"{airline.url}/sessions/{sid}/tools"
    async with aiohttp.ClientSession() as http:
        status, body = await _post(http, f"{base}/no_such_tool", {})
        assert status == 404 and body["field"] == "name" and "no_such_tool" in body["error"]
        status, body = await _post(http, f"{base}/get_booking", {})
        assert status == 400 and body["field"] == "arguments/reservation_id", body
        status, body = await _post(http, f"{base}/get_booking", {"reservation_id": 1})
        assert status == 400 and body["field"] == "arguments/reservation_id", body
        status, body = await _post(http, f"{base}/get_booking", b"{not json")
        assert status == 400 and body["field"] == "body" and "not valid JSON" in body["error"]
        status, body = await _post(http, f"{base}/get_booking", [1])
        assert status == 400 and body["field"] == "arguments"
        status, body = await _post(http, f"{airline.url}/sessions/zzz/tools/x", {})
        assert status == 404 and body["field"] == "session"
        status, body = await _post(http, f"{airline.url}/sessions", {"task_id": "airline/999"})
        assert status == 404 and body["field"] == "task_id" and "airline/999" in body["error"]
        status, body = await _post(http, f"{airline.url}/sessions", {"task": "airline/001"})
        assert status == 400 and body["field"] == "task"
        status, body = await _post(http, f"{airline.url}/sessions/{sid}/grade", {})
        assert status == 409 and "without a task" in body["error"]
    # None of these reached the environment.
    assert airline.session(sid).env.actions == []


async def _run(*cmd: str, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        *cmd, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=env
    )
    out, err = await proc.communicate()
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


async def test_generated_scripts_call_the_endpoint(airline: ToolServer, tmp_path: Path) -> None:
    task = _write_task("airline")
    sid = airline.create_session(task.id)
    paths = write_scripts(get_domain("airline"), tmp_path / "bin", airline.url, session=sid)
    assert sorted(p.name for p in paths) == sorted(t.name for t in get_domain("airline").tools)
    bin_ = tmp_path / "bin"
    for action in task.gold_actions:  # as a JSON object
        rc, out, err = await _run(str(bin_ / action.name), json.dumps(action.arguments))
        assert rc == 0, err
        assert out.strip()
    assert airline.grade(sid, _replies(task)).reward == 1.0
    # --flag value form, a tool refusal (exit 1), bad arguments (exit 2), --help.
    rc, out, _ = await _run(str(bin_ / "get_booking"), "--reservation_id", "NOPE00")
    assert rc == 1 and out.startswith("Error:")
    rc, _, err = await _run(str(bin_ / "get_booking"), "--reservation", "x")
    assert rc == 2 and "unknown argument --reservation" in err
    rc, _, err = await _run(str(bin_ / "get_booking"))
    assert rc == 2 and "reservation_id" in err and "HTTP 400" in err
    rc, out, _ = await _run(str(bin_ / "get_booking"), "--help")
    assert rc == 0 and "--reservation_id STRING" in out
    # The session and URL come from the environment when set; an unreachable URL is exit 3.
    other = airline.create_session()
    env = {"AGENTLOAD_TOOLS_SESSION": other, "PATH": "/usr/bin:/bin"}
    rc, out, _ = await _run(str(bin_ / "calculate"), "--expression", "2*21", env=env)
    assert rc == 0 and out.strip() in ("42", "42.0")
    assert [a.name for a in airline.session(other).env.actions] == ["calculate"]
    env["AGENTLOAD_TOOLS_URL"] = "http://127.0.0.1:9"
    rc, _, err = await _run(str(bin_ / "calculate"), "--expression", "1", env=env)
    assert rc == 3 and "cannot reach" in err


async def test_stdio_transport_with_the_sdk_client(tmp_path: Path) -> None:
    task = _write_task("airline")
    record = tmp_path / "record.jsonl"
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "agentload", "tools", "serve", "--domain", "airline", "--transport",
              "stdio", "--task", task.id, "--record", str(record), "--grade-tool"],
    )  # fmt: skip
    async with stdio_client(params) as (read, write), ClientSession(read, write) as client:
        init = await client.initialize()
        assert init.instructions == get_domain("airline").system_prompt()
        assert init.serverInfo.name == "agentload-tools"
        names = {t.name for t in (await client.list_tools()).tools}
        assert names == {t.name for t in get_domain("airline").tools} | {GRADE_TOOL}
        for action in task.gold_actions:
            assert not (await client.call_tool(action.name, action.arguments)).isError
        bad = await client.call_tool("get_booking", {})
        assert bad.isError
        graded = await client.call_tool(GRADE_TOOL, {"replies": _replies(task)})
        assert graded.structuredContent and graded.structuredContent["reward"] == 1.0
    for _ in range(100):  # the process writes its record as it exits
        if record.exists() and record.read_text().strip():
            break
        await asyncio.sleep(0.05)
    (row,) = [json.loads(line) for line in record.read_text().splitlines()]
    assert row["task_id"] == task.id
    assert row["grade"]["db_match"] is True
    assert [a["name"] for a in row["actions"]] == [a.name for a in task.gold_actions]


async def test_stop_does_not_wait_for_connected_agents() -> None:
    ts = await ToolServer("airline", port=0).start()
    sid = ts.create_session()
    stopped_in = None
    with contextlib.suppress(Exception):  # the client sees its server go away
        async with await _mcp(ts.mcp_url(sid)) as client:
            await client.call_tool("list_airports", {})
            t0 = time.perf_counter()
            await ts.stop()
            stopped_in = time.perf_counter() - t0
    assert stopped_in is not None and stopped_in < 4.5
    with pytest.raises(RuntimeError, match="starts once"):
        await ts.start()


async def test_stdio_bridge_to_a_session_of_a_running_server(airline: ToolServer) -> None:
    task = _write_task("airline")
    sid = airline.create_session(task.id)
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "agentload", "tools", "serve", "--transport", "stdio", "--remote",
              f"{airline.url}/sessions/{sid}"],
    )  # fmt: skip
    async with stdio_client(params) as (read, write), ClientSession(read, write) as client:
        init = await client.initialize()
        assert init.instructions == get_domain("airline").system_prompt()
        names = {t.name for t in (await client.list_tools()).tools}
        assert names == {t.name for t in get_domain("airline").tools}
        for action in task.gold_actions:
            assert not (await client.call_tool(action.name, action.arguments)).isError
        bad = await client.call_tool("get_booking", {"reservation_id": 5})
        assert bad.isError and "reservation_id" in bad.content[0].text  # type: ignore[union-attr]
    # The calls acted on the server's session: the harness grades it there.
    assert airline.grade(sid, _replies(task)).reward == 1.0
    assert [c.reached for c in airline.session(sid).log][-1] is False
    rc, _, err = await _run(
        sys.executable, "-m", "agentload", "tools", "serve", "--transport", "stdio",
        "--remote", f"{airline.url}/sessions/nosuch",
    )  # fmt: skip
    assert rc == 1 and "unknown session 'nosuch'" in err and len(err.strip().splitlines()) == 1


async def test_openai_tool_calls_endpoint(airline: ToolServer) -> None:
    task = _write_task("airline")
    sid = airline.create_session(task.id)
    calls = [
        {"id": f"call_{i}", "type": "function",
         "function": {"name": a.name, "arguments": json.dumps(a.arguments)}}
        for i, a in enumerate(task.gold_actions)
    ]  # fmt: skip
    calls.append({"id": "bad", "function": {"name": "nope", "arguments": "{}"}})
    async with aiohttp.ClientSession() as http:
        status, messages = await _post(
            http, f"{airline.url}/sessions/{sid}/tool_calls", {"tool_calls": calls}
        )
        assert status == 200
        assert [m["tool_call_id"] for m in messages] == [c["id"] for c in calls]
        assert all(m["role"] == "tool" for m in messages)
        assert messages[-1]["content"].startswith("Error: unknown tool 'nope'")
        assert airline.grade(sid, _replies(task)).reward == 1.0
        n = len(airline.session(sid).log)
        status, body = await _post(
            http, f"{airline.url}/sessions/{sid}/tool_calls", [calls[0], {"id": "x"}]
        )
        assert status == 400 and body["field"] == "tool_calls/1"
        assert len(airline.session(sid).log) == n  # nothing ran
