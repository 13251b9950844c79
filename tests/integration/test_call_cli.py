"""`agentload call` end to end: a real process against a loopback server."""

from __future__ import annotations

import asyncio
import sys

import orjson

from scripted_server import Script, ScriptedServer, text_stream


async def _run(*args: str, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "agentload",
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=env,
    )
    out, err = await proc.communicate()
    return proc.returncode or 0, out.decode(), err.decode()


async def test_call_json_and_table(monkeypatch) -> None:
    async with ScriptedServer() as s:
        s.scripts["default"] = text_stream(["Hello", " there"], first_delay=0.05, gap=0.01)
        code, out, _ = await _run(
            "call",
            "--base-url",
            s.base_url,
            "--model",
            "m",
            "--prompt",
            "hi",
            "--system",
            "be nice",
            "--max-tokens",
            "5",
            "-H",
            "X-Session-ID: abc",
            "--json",
        )
        assert code == 0
        data = orjson.loads(out)
        assert data["content"] == "Hello there"
        assert data["record"]["schema"] == "agentload.call/1"
        assert 0.04 < data["record"]["ttft_s"] < 0.5
        req = s.requests[-1]
        assert req["body"]["messages"][0] == {"role": "system", "content": "be nice"}
        assert req["body"]["max_tokens"] == 5
        assert req["headers"]["X-Session-ID"] == "abc"

        code, out, _ = await _run(
            "call", "--base-url", s.base_url, "--model", "m", "--prompt", "hi"
        )
        assert code == 0
        assert "Hello there" in out and "TTFT" in out


async def test_call_failure_exit_code_and_kind() -> None:
    async with ScriptedServer() as s:
        s.scripts["default"] = Script(
            parts=[(0, b'{"error": {"message": "nope"}}')],
            status=503,
            content_type="application/json",
        )
        code, _, err = await _run(
            "call", "--base-url", s.base_url, "--model", "m", "--prompt", "hi", "--retries", "1"
        )
        assert code == 1
        assert "http_503" in err
        assert len(s.requests) == 2


async def test_call_tools_from_a_saved_request(tmp_path) -> None:
    req = tmp_path / "req.json"
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
    req.write_bytes(orjson.dumps({"model": "x", "tools": tools}))
    async with ScriptedServer() as s:
        s.scripts["default"] = text_stream(["ok"])
        code, _, _ = await _run(
            "call",
            "--base-url",
            s.base_url,
            "--model",
            "m",
            "--prompt",
            "hi",
            "--tools",
            str(req),
            "--tool-choice",
            "f",
            "--json",
        )
        assert code == 0
        body = s.requests[-1]["body"]
        assert body["tools"] == tools
        assert body["tool_choice"] == {"type": "function", "function": {"name": "f"}}
    bad = tmp_path / "bad.json"
    bad.write_text('{"x": 1}')
    code, _, err = await _run(
        "call",
        "--base-url",
        "http://127.0.0.1:1/v1",
        "--model",
        "m",
        "--prompt",
        "x",
        "--tools",
        str(bad),
    )
    assert code == 2 and "tools" in err


async def test_call_bad_arguments() -> None:
    code, _, err = await _run("call", "--base-url", "http://127.0.0.1:1/v1", "--model", "m")
    assert code == 2 and "--prompt" in err
    code, _, err = await _run(
        "call",
        "--base-url",
        "http://127.0.0.1:1/v1",
        "--model",
        "m",
        "--prompt",
        "x",
        "--extra-body",
        "{oops",
    )
    assert code == 2 and "extra-body" in err
