"""Canary: secrets planted in every place a user can put one never reach the results or logs.

Planted: the key in the env var named by `api_key_env`, a secret header, an `api_key` in
`--extra-body` (so also on the saved command line), a password in a base URL and in a metrics
URL, a cookie header. The agent endpoint is a loopback server that answers every call with a
401 that echoes back what it received (key, headers, body), as some gateways do; the user
endpoint is the simulator.
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

CANARIES = {
    "env": "canary-env-7f3a9c1e",
    "header": "canary-header-51d0b2",
    "cookie": "canary-cookie-9e77aa",
    "extra_cli": "canary-extra-cli-c4d2",
    "url_pass": "canary-urlpass-0b1e",
    "metrics_pass": "canary-metricspass-66f1",
}


async def _echo(request: web.Request) -> web.Response:
    body = await request.text()
    msg = (
        f"invalid credentials: authorization={request.headers.get('Authorization')} "
        f"x-api-key={request.headers.get('X-Api-Key')} cookie={request.headers.get('Cookie')} "
        f"body={body[:2000]}"
    )
    return web.json_response({"error": {"message": msg, "type": "auth"}}, status=401)


@pytest.fixture
async def servers() -> AsyncIterator[tuple[str, str]]:
    app = web.Application()
    app.router.add_post("/v1/chat/completions", _echo)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    async with SimServer(SimConfig(port=0, profile="instant")) as sim:
        yield f"127.0.0.1:{port}", sim.base_url.split("://", 1)[1].split("/", 1)[0]
    await runner.cleanup()


def _hits(data: bytes) -> list[str]:
    found = []
    for name, value in CANARIES.items():
        forms = {value.encode(), base64.b64encode(f"u:{value}".encode())}
        if any(f in data for f in forms):
            found.append(name)
    return found


async def test_no_canary_in_results_or_logs(tmp_path: Path, servers: tuple[str, str]) -> None:
    echo, sim = servers
    out = tmp_path / "run"
    cfg = {
        "endpoints": {
            "agent": {
                "name": "gateway",
                "base_url": f"http://{echo}/v1",
                "model": "agentload-sim",
                "api_key_env": "AGENTLOAD_CANARY_KEY",
                "headers": {"X-Api-Key": CANARIES["header"]},
                "metrics_url": f"http://m:{CANARIES['metrics_pass']}@{sim}/metrics",
                "retry": {"max_attempts": 1},
            },
            "user": {
                "name": "sim",
                "base_url": f"http://u:{CANARIES['url_pass']}@{sim}/v1",
                "model": "agentload-sim",
                "headers": {"Cookie": CANARIES["cookie"]},
            },
        },
        "workload": {"tasks": ["airline/000-003"]},
        "metrics": {"interval_s": 0.2},
        # The gateway refuses every call: preflight would stop the run (its own canary test
        # is in test_addresses_and_errors.py); here the calls must reach it and be recorded.
        "preflight": False,
    }
    (tmp_path / "run.yaml").write_text(yaml.safe_dump(cfg))
    env = {"AGENTLOAD_CANARY_KEY": CANARIES["env"], "PATH": "/usr/bin:/bin"}
    proc = await asyncio.create_subprocess_exec(
        AGENTLOAD,
        "run",
        "--config",
        str(tmp_path / "run.yaml"),
        "--out",
        str(out),
        "--extra-body",
        orjson.dumps({"api_key": CANARIES["extra_cli"]}).decode(),
        "--progress",
        "plain",
        "--progress-interval",
        "0.2",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=env,
    )
    stdout, stderr = await asyncio.wait_for(proc.communicate(), timeout=120)
    assert proc.returncode is not None
    # The run did reach both servers: the echoed errors are recorded, without the secrets.
    calls = [orjson.loads(x) for x in (out / "calls.jsonl").read_bytes().splitlines()]
    echoed = [c for c in calls if c.get("http_status") == 401]
    assert echoed, stderr.decode()
    assert "<redacted>" in echoed[0]["error_message"]
    assert any(c["role"] == "user" and c["status"] == "ok" for c in calls)
    assert (out / "server_metrics.jsonl").stat().st_size > 0
    files = [p for p in out.rglob("*") if p.is_file()]
    assert {"run.json", "config.yaml", "summary.json", "sessions.jsonl"} <= {p.name for p in files}
    leaks = {str(p.relative_to(out)): h for p in files if (h := _hits(p.read_bytes()))}
    assert leaks == {}
    assert _hits(stdout) == [] and _hits(stderr) == []
    # The saved command line is still useful: the option is there, its secret is not.
    run = orjson.loads((out / "run.json").read_bytes())
    assert "--extra-body" in run["command"]
    assert run["endpoints"]["user"]["base_url"].startswith("http://***@127.0.0.1")
