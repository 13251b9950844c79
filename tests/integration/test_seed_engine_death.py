"""A per-request seed against an engine it kills: preflight warns before the first episode,
and when the engine dies mid-run the error summary names what the calls in flight carried.

The engine is a real loopback server that answers like vLLM 0.32.0 (its /version) and, like
vLLM's CPU build, dies on the first seeded, sampled request with a long prompt: it drops that
connection and stops listening, so every later call is refused."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import orjson
import pytest
from aiohttp import web

from agentload.config import build_config
from agentload.engines.preflight import EndpointCheck, seed_warnings
from agentload.runner import execute_run

LONG_PROMPT_CHARS = 4000  # the agent's policy and tool schemas; the user's prompts are shorter


def _sse(obj: Any) -> bytes:
    return b"data: " + orjson.dumps(obj) + b"\n\n"


class SeedKilledEngine:
    def __init__(self) -> None:
        self.runner: web.AppRunner | None = None
        self.port = 0
        self.dead = False
        self.ok_calls = 0

    async def start(self) -> None:
        app = web.Application()

        async def version(_r: web.Request) -> web.Response:
            return web.json_response({"version": "0.32.0"})

        async def models(_r: web.Request) -> web.Response:
            model = {"id": "m", "object": "model", "owned_by": "vllm"}
            return web.json_response({"object": "list", "data": [model]})

        app.router.add_get("/version", version)
        app.router.add_get("/v1/models", models)
        app.router.add_post("/v1/chat/completions", self._chat)
        self.runner = web.AppRunner(app)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]

    async def stop(self) -> None:
        if self.runner is not None:
            await self.runner.cleanup()
            self.runner = None

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        long = len(orjson.dumps(body.get("messages"))) > LONG_PROMPT_CHARS
        if "seed" in body and body.get("temperature") != 0 and long and not self.dead:
            # "CPU Generator does not use offset": the engine process is gone.
            self.dead = True
            assert request.transport is not None
            request.transport.abort()
            asyncio.get_running_loop().create_task(self.stop())
            raise web.HTTPInternalServerError  # never reaches the client
        self.ok_calls += 1
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        chunk = {
            "id": "c",
            "object": "chat.completion.chunk",
            "created": 1,
            "model": "m",
            "choices": [
                {
                    "index": 0,
                    "delta": {"role": "assistant", "content": "Hello, I need help."},
                    "finish_reason": None,
                }
            ],
        }
        await resp.write(_sse(chunk))
        chunk["choices"] = [{"index": 0, "delta": {}, "finish_reason": "stop"}]
        await resp.write(_sse(chunk))
        usage = {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
        await resp.write(
            _sse({"id": "c", "object": "chat.completion.chunk", "choices": [], "usage": usage})
        )
        await resp.write(b"data: [DONE]\n\n")
        return resp


def _cfg(out: Path, port: int, **workload: Any) -> Any:
    return build_config(
        data={
            "out": str(out),
            "endpoints": {
                "agent": {
                    "base_url": f"http://127.0.0.1:{port}/v1",
                    "model": "m",
                    "timeouts": {"connect": 2},
                    "retry": {"max_attempts": 1},
                }
            },
            "workload": {"tasks": ["retail/000-001"], **workload},
            "load": {"concurrency": 2, "outage_timeout_s": "1s", "retry_infra": 0},
            "metrics": {"enabled": False},
            "report": False,
        }
    )


async def test_seed_that_kills_the_engine_is_warned_about_and_named(tmp_path: Path) -> None:
    engine = SeedKilledEngine()
    await engine.start()
    said: list[str] = []
    try:
        res = await asyncio.wait_for(
            execute_run(
                _cfg(tmp_path / "seeded", engine.port, request_seed=7, temperature=1.0),
                progress="off",
                say=said.append,
                install_signals=False,
            ),
            120,
        )
    finally:
        await engine.stop()
    assert engine.dead and engine.ok_calls >= 1
    # Before the first episode: the preflight line names the engine, the seed and the way out.
    warned = [m for m in said if "CPU Generator does not use offset" in m]
    assert warned and warned[0].startswith("preflight: WARNING: agent and user endpoint")
    assert "0.32.0" in warned[0] and "temperature 1" in warned[0]
    assert said.index(warned[0]) < next(i for i, m in enumerate(said) if "requests:" in m) + 1

    assert res.exit_code == 1
    stopped = res.summary.dump()["errors"]["engine_stopped"]
    assert 1 <= stopped["ok_calls"] == engine.ok_calls - 2  # less preflight's two probes
    print(stopped["message"])
    assert stopped["in_flight"] and stopped["in_flight"][0]["role"] == "agent"
    assert stopped["sent"]["agent"] == {"seed": 7, "temperature": 1.0}
    assert "carried seed 7 at temperature 1.0" in stopped["message"]
    assert any("carried seed 7" in m for m in said)  # on the console too
    on_disk = orjson.loads((tmp_path / "seeded" / "summary.json").read_bytes())
    assert on_disk["errors"]["engine_stopped"]["message"] == stopped["message"]


def _check(engine: str | None, version: str | None = None) -> EndpointCheck:
    c = EndpointCheck(["agent"], "agent", "http://h/v1", "m", None)
    c.engine, c.engine_version = engine, version
    return c


@pytest.mark.parametrize(
    ("engine", "seeded", "warned"),
    [
        ("vllm", {"agent": 1.0}, True),
        ("vllm", {"agent": None}, True),  # the server's default temperature samples
        ("vllm", {"agent": 0.0}, False),  # greedy: not affected
        ("vllm", {}, False),  # no seed sent
        ("sglang", {"agent": 1.0}, False),
        ("agentload-sim", {"agent": 1.0}, False),
    ],
)
def test_seed_warning_only_where_known(engine: str, seeded: dict[str, Any], warned: bool) -> None:
    assert bool(seed_warnings([_check(engine, "0.32.0")], seeded)) is warned
