"""`agentload tools serve|scripts` end to end: the command as a process, its exit codes and
one-line errors."""

from __future__ import annotations

import asyncio
import json
import re
import socket
import sys
from pathlib import Path

import aiohttp
import pytest
from typer.testing import CliRunner

from agentload.cli import app
from agentload.domains import get_domain
from agentload.tools import ToolServer

_NOISE = re.compile(r"│[^│]*\s<(bool|str|int|float|Path|list\[[a-z]+\])>\s")


@pytest.mark.parametrize("cmd", [["tools"], ["tools", "serve"], ["tools", "scripts"]])
def test_help(cmd: list[str]) -> None:
    res = CliRunner().invoke(app, [*cmd, "--help"], env={"COLUMNS": "120"})
    assert res.exit_code == 0, res.output
    # The --help row keeps what the installed typer prints (test_cli_help.py says why).
    rows = [line for line in res.output.splitlines() if not re.match(r"│\s*--help\s", line)]
    assert "--help" in res.output and not any(_NOISE.search(row) for row in rows)


async def test_serve_http_process(tmp_path: Path) -> None:
    record = tmp_path / "sessions.jsonl"
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "agentload", "tools", "serve", "--domain", "retail",
        "--port", "0", "--record", str(record),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    assert proc.stderr is not None
    line = (await asyncio.wait_for(proc.stderr.readline(), 60)).decode()
    m = re.search(r"(http://127\.0\.0\.1:\d+) domain retail: MCP (\S+), JSON (\S+)", line)
    assert m, line
    url = m.group(1)
    assert m.group(2) == f"{url}/mcp"
    async with aiohttp.ClientSession() as http:
        async with http.get(f"{url}/healthz") as r:
            assert (await r.json()) == {"ok": True, "domain": "retail", "sessions": 0}
        async with http.post(f"{url}/sessions", json={"task_id": "retail/001"}) as r:
            sid = (await r.json())["session"]
        async with http.post(f"{url}/sessions/{sid}/tools/list_products", json={}) as r:
            assert (await r.json())["ok"] is True
        # The SDK's DNS-rebinding check: on loopback, MCP answers loopback Host names only.
        async with http.post(f"{url}/mcp", json={}, headers={"Host": "evil.example"}) as r:
            assert r.status >= 400
    proc.terminate()  # SIGTERM is a normal stop: exit 0 and the record written
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 0, err
    assert out == b""
    (row,) = [json.loads(x) for x in record.read_text().splitlines()]
    assert row["session"] == sid and row["task_id"] == "retail/001"
    assert [a["name"] for a in row["actions"]] == ["list_products"]
    assert row["grade"]["db_match"] is False  # the task's cancellation never happened


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--domain", "nope"], "unknown domain 'nope'; known: "),
        (["--domain", "airline", "--task", "airline/999"], "--task: unknown task 'airline/999'"),
        (["--domain", "airline", "--transport", "tcp"], "--transport"),
    ],
)
def test_serve_bad_input_is_one_line(args: list[str], message: str) -> None:
    res = CliRunner().invoke(app, ["tools", "serve", *args])
    assert res.exit_code == 2
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], res.stderr


def test_serve_for_a_duration(tmp_path: Path) -> None:
    record = tmp_path / "r.jsonl"
    res = CliRunner().invoke(
        app, ["tools", "serve", "-d", "airline", "--port", "0", "--duration", "0.3", "--record",
              str(record)],
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    assert "agentload tools: http://127.0.0.1:" in res.stderr
    assert record.read_text() == ""  # no sessions


def test_serve_on_a_busy_port_exits_1() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        res = CliRunner().invoke(app, ["tools", "serve", "-d", "airline", "--port", str(port)])
    assert res.exit_code == 1
    assert f"cannot listen on 127.0.0.1:{port}" in res.stderr


def test_scripts_command(tmp_path: Path) -> None:
    out = tmp_path / "bin"
    res = CliRunner().invoke(
        app,
        ["tools", "scripts", "-d", "airline", "--out", str(out), "--url", "http://h:1", "--json"],
    )
    assert res.exit_code == 0, res.output
    paths = json.loads(res.stdout)
    assert sorted(Path(p).name for p in paths) == sorted(
        t.name for t in get_domain("airline").tools
    )
    assert all(Path(p).stat().st_mode & 0o111 for p in paths)
    assert json.loads((out / "tools.json").read_text()) == get_domain("airline").tool_schemas()
    res = CliRunner().invoke(
        app, ["tools", "scripts", "-d", "airline", "--out", str(out), "--url", "h:1"]
    )
    assert res.exit_code == 2 and "--url must start with http://" in res.stderr


async def test_in_process_server_refuses_a_busy_port() -> None:
    async with ToolServer("airline", port=0) as ts:
        with pytest.raises(OSError):
            await ToolServer("airline", port=ts.port).start()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--transport", "stdio", "--remote", "http://h:1/x"], "is not a session URL"),
        (["--remote", "http://h:1/sessions/a"], "--remote goes with --transport stdio alone"),
        (["--transport", "stdio", "-d", "airline", "--remote", "http://h:1/sessions/a"], "alone"),
        ([], "--domain is required"),
    ],
)
def test_serve_remote_bad_input(args: list[str], message: str) -> None:
    res = CliRunner().invoke(app, ["tools", "serve", *args])
    assert res.exit_code == 2 and message in res.stderr, res.stderr
