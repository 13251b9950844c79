"""Passwords in URLs and keys given to the services: never printed, never written.

- `agentload proxy --upstream http://user:pass@...`: stdout, --json, stderr and every file of
  its results folder;
- `agentload metrics http://user:pass@.../metrics`: its error line;
- `agentload sim --api-key-env NAME` / `--api-key-file PATH`: the key off the command line;
- `sim calibrate` / `fidelity` against a URL with `user:pass@` and a key: the key is sent, the
  URL's credentials are not, and neither appears in a message.
"""

from __future__ import annotations

import asyncio
import base64
import os
import re
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web
from typer.testing import CliRunner

import agentload.sim.api
from agentload.calibration.stream import ProbeError, Target, stream_call
from agentload.cli import app
from agentload.sim import SimConfig, SimServer

AGENTLOAD = str(Path(sys.executable).parent / "agentload")
PASS = "upstreamPass7e21c9"
FORMS = [PASS, base64.b64encode(f"alice:{PASS}".encode()).decode()]


def _leaks(data: bytes) -> list[str]:
    return [f for f in FORMS if f.encode() in data]


async def _run(*args: str) -> tuple[int, bytes, bytes]:
    proc = await asyncio.create_subprocess_exec(
        AGENTLOAD,
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "NO_COLOR": "1", "COLUMNS": "200"},
    )
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode is not None
    return proc.returncode, out, err


@pytest.fixture
async def sim() -> AsyncIterator[SimServer]:
    async with SimServer(SimConfig(port=0, profile="instant", model="m")) as s:
        yield s


def _hostport(url: str) -> str:
    return url.split("://", 1)[1].split("/", 1)[0]


async def test_proxy_upstream_password_is_in_no_output(tmp_path: Path, sim: SimServer) -> None:
    upstream = f"http://alice:{PASS}@{_hostport(sim.base_url)}"
    out = tmp_path / "proxy"
    rc, stdout, stderr = await _run(
        "proxy", "--upstream", upstream, "--out", str(out), "--port", "0", "--duration", "0.5"
    )
    assert rc == 0, stderr.decode()
    assert "http://***@127.0.0.1" in stdout.decode()  # where it forwards, still shown
    rc, js, stderr2 = await _run(
        *("proxy", "--upstream", upstream, "--out", str(out), "--overwrite"),
        *("--port", "0", "--duration", "0.5", "--json"),
    )
    assert rc == 0, stderr2.decode()
    assert b'"upstream": "http://***@127.0.0.1' in js
    files = [p for p in out.rglob("*") if p.is_file()]
    assert {"summary.json", "run.json", "config.yaml"} <= {p.name for p in files}
    found = {str(p.relative_to(out)): h for p in files if (h := _leaks(p.read_bytes()))}
    assert found == {}
    assert _leaks(stdout + stderr + js + stderr2) == []
    # A refused upstream address is named without its password too.
    rc, stdout, stderr = await _run(
        "proxy", "--upstream", f"ftp://alice:{PASS}@h", "--out", str(tmp_path / "x")
    )
    assert rc == 2 and b"--upstream" in stderr
    assert _leaks(stdout + stderr) == []


async def test_metrics_error_does_not_show_the_url_password() -> None:
    async def nothing(request: web.Request) -> web.Response:
        return web.Response(status=404, text="no metrics here")

    srv = web.Application()
    srv.router.add_get("/metrics", nothing)
    runner = web.AppRunner(srv, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        # A 404 (aiohttp quotes the URL in its error) and a refused connection.
        for url in (
            f"http://alice:{PASS}@127.0.0.1:{port}/metrics",
            f"http://alice:{PASS}@127.0.0.1:1",
        ):
            rc, stdout, stderr = await _run("metrics", url, "--timeout", "5")
            assert rc == 1, stderr.decode()
            assert "cannot scrape http://***@127.0.0.1:" in stderr.decode()
            assert _leaks(stdout + stderr) == []
    finally:
        await runner.cleanup()


def _sim_key(monkeypatch: pytest.MonkeyPatch, *args: str) -> tuple[int, str, str | None]:
    seen: list[SimConfig] = []
    monkeypatch.setattr(agentload.sim.api, "run_blocking", seen.append)
    r = CliRunner().invoke(app, ["sim", *args])
    return r.exit_code, r.output, seen[0].api_key if seen else None


def test_sim_key_from_env_or_file(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("SIM_TEST_KEY", "k-from-env-0123")
    assert _sim_key(monkeypatch, "--api-key-env", "SIM_TEST_KEY")[::2] == (0, "k-from-env-0123")
    key_file = tmp_path / "key"
    key_file.write_text("k-from-file-4567\n")
    assert _sim_key(monkeypatch, "--api-key-file", str(key_file))[::2] == (0, "k-from-file-4567")
    empty = tmp_path / "empty"
    empty.write_text("\n")
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    monkeypatch.delenv("SIM_UNSET_KEY", raising=False)
    for args, said in [
        (["--api-key", "x", "--api-key-env", "SIM_TEST_KEY"], "one way only"),
        (["--api-key-env", "SIM_TEST_KEY", "--api-key-file", str(key_file)], "one way only"),
        (["--api-key-env", "SIM_UNSET_KEY"], "SIM_UNSET_KEY is not set"),
        (["--api-key-file", str(tmp_path / "missing")], "cannot read"),
        (["--api-key-file", str(empty)], "is empty"),
        (["--api-key-file", str(fifo)], "not a regular file"),
        (["--api-key-file", "/dev/zero"], "not a regular file"),
    ]:
        rc, output, _ = _sim_key(monkeypatch, *args)
        assert rc == 2 and said in output, (args, output)
        assert len(output.strip().splitlines()) == 1 and "Traceback" not in output


async def test_a_real_sim_takes_its_key_from_a_file(tmp_path: Path) -> None:
    key_file = tmp_path / "key"
    key_file.write_text("k-file-serves-89ab\n")
    proc = await asyncio.create_subprocess_exec(
        *(sys.executable, "-m", "agentload.sim", "--port", "0", "--model", "m-x"),
        *("--api-key-file", str(key_file), "--log-interval", "0"),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
    )
    try:
        assert proc.stdout is not None
        line = (await asyncio.wait_for(proc.stdout.readline(), 30)).decode()
        match = re.search(r"listening on (http://127\.0\.0\.1:\d+)", line)
        assert match, line
        async with aiohttp.ClientSession() as http:
            async with http.get(f"{match.group(1)}/v1/models") as resp:
                assert resp.status == 401
            auth = {"Authorization": "Bearer k-file-serves-89ab"}
            async with http.get(f"{match.group(1)}/v1/models", headers=auth) as resp:
                assert resp.status == 200
    finally:
        proc.send_signal(signal.SIGTERM)
        await asyncio.wait_for(proc.wait(), 30)


async def test_calibration_target_with_url_credentials_and_a_key() -> None:
    key = "calKey-5d9e0f1a"
    async with SimServer(SimConfig(port=0, profile="instant", model="m", api_key=key)) as s:
        url = f"http://alice:{PASS}@{_hostport(s.base_url)}/v1"
        async with aiohttp.ClientSession() as http:
            # Both given: the key is sent (aiohttp refused the pair before).
            target = Target(url, "m", api_key=key)
            assert PASS not in target.base_url and target.base_url.startswith("http://127.0.0.1")
            call = await stream_call(http, target, "hello there", 4)
            assert call.tokens == 4
            # The URL's credentials alone go out as Basic, which this server refuses: the
            # message names the server without them.
            with pytest.raises(ProbeError) as e:
                await stream_call(http, Target(url, "m"), "hello", 2)
            assert "HTTP 401" in str(e.value) and _leaks(str(e.value).encode()) == []


async def test_calibrate_cli_never_shows_url_credentials(sim: SimServer) -> None:
    url = f"http://alice:{PASS}@{_hostport(sim.base_url)}/v1"
    rc, stdout, stderr = await _run(
        "sim", "calibrate", "--base-url", url, "--model", "not-served", "--api-key", "k-abcdef"
    )
    assert rc != 0 and b"not served" in stdout + stderr, (stdout + stderr).decode()
    assert b"Cannot combine" not in stdout + stderr  # aiohttp's refusal of URL creds + key
    assert _leaks(stdout + stderr) == [] and b"k-abcdef" not in stdout + stderr
