"""Secrets echoed by a server into successful replies never reach any file of the run.

The agent endpoint is a loopback server that puts what it received (the Authorization header,
a custom header, and for a URL with `user:pass@` the Basic credentials) into its reply's
content and into a tool call's arguments, as a misbehaving gateway or a model quoting its
context could. The key comes from OPENAI_API_KEY, read implicitly (no --api-key-env); the
custom headers given with -H are not named like secrets, but their values look like ones (an
`sk-` key, a `Bearer` token), so config.yaml hides them.
Every file of the results folder, and the run's stdout and stderr, are searched for each
secret in every form it went out in.
"""

from __future__ import annotations

import asyncio
import base64
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import orjson
import pytest
import yaml
from aiohttp import web

from agentload.sim import SimConfig, SimServer

AGENTLOAD = str(Path(sys.executable).parent / "agentload")

IMPLICIT_KEY = "sk-implicitCanary4d1f9a0b7c"
CUSTOM = "sk-customHeaderCanary82e6"
GATEWAY = "gw7Qx2Lm9Vb4Nc8Zr1Tk"  # a Bearer token in a header not named like a secret
URL_PASS = "urlPassCanary5a0c"

SECRETS = {
    "implicit_key": [IMPLICIT_KEY],
    "custom_header": [CUSTOM],
    "gateway_header": [GATEWAY],
    "url_pass": [URL_PASS, base64.b64encode(f"u:{URL_PASS}".encode()).decode()],
}


def _sse(obj: object) -> bytes:
    return b"data: " + orjson.dumps(obj) + b"\n\n"


def _chunk(delta: dict[str, object], finish: str | None = None) -> dict[str, object]:
    return {
        "id": "c",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "echo",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }


class Echo:
    """Answers every chat completion with the request's credentials in its content, and every
    other one with a tool call carrying them in its arguments."""

    def __init__(self) -> None:
        self.calls = 0

    async def chat(self, request: web.Request) -> web.StreamResponse:
        await request.read()
        self.calls += 1
        echoed = (
            f"auth={request.headers.get('Authorization')} "
            f"custom={request.headers.get('X-Custom')} gw={request.headers.get('X-Gateway')}"
        )
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        await resp.write(_sse(_chunk({"role": "assistant", "content": f"I got {echoed}. "})))
        if self.calls % 2:
            args = orjson.dumps({"note": echoed}).decode()
            call = {
                "index": 0,
                "id": f"call_{self.calls}",
                "type": "function",
                "function": {"name": "get_user_details", "arguments": args},
            }
            await resp.write(_sse(_chunk({"tool_calls": [call]})))
            await resp.write(_sse(_chunk({}, "tool_calls")))
        else:
            await resp.write(_sse(_chunk({}, "stop")))
        usage = {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
        await resp.write(
            _sse({"id": "c", "object": "chat.completion.chunk", "choices": [], "usage": usage})
        )
        await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
        return resp

    async def models(self, request: web.Request) -> web.Response:
        return web.json_response(
            {"object": "list", "data": [{"id": "echo", "object": "model", "owned_by": "x"}]}
        )


@pytest.fixture
async def servers() -> AsyncIterator[tuple[str, str]]:
    echo = Echo()
    app = web.Application()
    app.router.add_post("/v1/chat/completions", echo.chat)
    app.router.add_get("/v1/models", echo.models)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    async with SimServer(SimConfig(port=0, profile="instant")) as sim:
        yield f"127.0.0.1:{port}", sim.base_url.split("://", 1)[1].split("/", 1)[0]
    await runner.cleanup()


def _hits(data: bytes) -> list[str]:
    return [name for name, forms in SECRETS.items() if any(f.encode() in data for f in forms)]


async def test_echoed_secrets_are_in_no_file(tmp_path: Path, servers: tuple[str, str]) -> None:
    echo, sim = servers
    out = tmp_path / "run"
    cfg = {
        "endpoints": {
            "agent": {
                "name": "echo",
                "base_url": f"http://{echo}/v1",
                "model": "echo",
                "retry": {"max_attempts": 1},
            },
            "user": {
                "name": "sim",
                "base_url": f"http://u:{URL_PASS}@{sim}/v1",
                "model": "agentload-sim",
            },
        },
        "workload": {"tasks": ["airline/000-003"], "max_steps": 6},
        "preflight": False,
    }
    (tmp_path / "run.yaml").write_text(yaml.safe_dump(cfg))
    env = {"OPENAI_API_KEY": IMPLICIT_KEY, "PATH": "/usr/bin:/bin"}
    proc = await asyncio.create_subprocess_exec(
        AGENTLOAD,
        "run",
        "--config",
        str(tmp_path / "run.yaml"),
        "--out",
        str(out),
        "-H",
        f"X-Custom: {CUSTOM}",
        "-H",
        f"X-Gateway: Bearer {GATEWAY}",
        "--progress",
        "plain",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=env,
    )
    stdout, stderr = await asyncio.wait_for(proc.communicate(), timeout=120)
    assert proc.returncode == 0, stderr.decode()[-2000:]
    # The server did echo them into replies that were recorded (content and tool calls).
    trajectories = (out / "trajectories.jsonl").read_bytes()
    assert trajectories.count(b"auth=Bearer <redacted>") >= 2, trajectories[:3000]
    assert b"custom=<redacted>" in trajectories
    assert b"gw=Bearer <redacted>" in trajectories
    files = [p for p in out.rglob("*") if p.is_file()]
    assert {"run.json", "config.yaml", "summary.json", "calls.jsonl", "report.md"} <= {
        p.name for p in files
    }
    leaks = {str(p.relative_to(out)): h for p in files if (h := _hits(p.read_bytes()))}
    assert leaks == {}
    assert _hits(stdout) == [] and _hits(stderr) == []
