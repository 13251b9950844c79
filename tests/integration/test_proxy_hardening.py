"""`agentload proxy` as a long-lived service: stop signals write everything, hostile
connections are closed by deadlines and a cap, oversized bodies are refused unread, and bad
ports are refused with one line. Real sockets on 127.0.0.1, the embedded simulator upstream."""

from __future__ import annotations

import asyncio
import json
import re
import resource
import signal
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from agentload.cli import app
from agentload.http_limits import raise_fd_limit
from agentload.sim import SimConfig, SimServer

BODY = b'{"model":"sim","messages":[{"role":"user","content":"hi"}],"max_tokens":4}'


@pytest.fixture
async def sim() -> AsyncIterator[SimServer]:
    async with SimServer(SimConfig(port=0, profile="instant", seed=7, model="sim")) as s:
        yield s


def _fd_limit_1024() -> None:
    """The child's descriptors as on a default Linux shell: 1,024, no raising it."""
    resource.setrlimit(resource.RLIMIT_NOFILE, (1024, 1024))


async def _start_proxy(
    upstream: str, out: Path, *args: str, fd_1024: bool = False
) -> tuple[asyncio.subprocess.Process, int]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "agentload", "proxy", "--upstream", upstream, "--out", str(out),
        "--port", "0", *args,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        preexec_fn=_fd_limit_1024 if fd_1024 else None,
    )  # fmt: skip
    assert proc.stdout is not None
    line = (await asyncio.wait_for(proc.stdout.readline(), 60)).decode()
    m = re.search(r"http://127\.0\.0\.1:(\d+)/v1", line)
    assert m, line
    return proc, int(m.group(1))


async def _request(port: int, raw: bytes, limit: float = 10.0) -> bytes:
    """Send one request on a fresh connection; the whole answer (Connection: close)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(raw)
        await writer.drain()
        async with asyncio.timeout(limit):
            return await reader.read(1 << 20)
    finally:
        writer.close()


def _chat(session: str) -> bytes:
    return (
        b"POST /s/%b/v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        b"Content-Type: application/json\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%b"
        % (session.encode(), len(BODY), BODY)
    )


MODELS = b"GET /v1/models HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
async def test_stop_signal_writes_sessions_summary_and_report(
    sim: SimServer, tmp_path: Path, sig: signal.Signals
) -> None:
    out = tmp_path / "proxy"
    proc, port = await _start_proxy(sim.url, out)
    for i in range(3):
        reply = await _request(port, _chat(f"sess{i}"))
        assert reply.startswith(b"HTTP/1.1 200"), reply[:200]
    proc.send_signal(sig)
    stdout, stderr = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 0, stderr
    assert b"3 calls in 3 sessions" in stdout, stdout
    assert len((out / "calls.jsonl").read_text().splitlines()) == 3
    sessions = [json.loads(x) for x in (out / "sessions.jsonl").read_text().splitlines()]
    assert sorted(s["session_id"] for s in sessions) == ["sess0", "sess1", "sess2"]
    assert len((out / "trajectories.jsonl").read_text().splitlines()) == 3
    assert (out / "summary.json").is_file()
    assert any(out.glob("report*"))
    assert json.loads((out / "run.json").read_text()).get("status") != "running"


async def test_oversized_body_is_refused_unread_and_blocks_nothing(
    sim: SimServer, tmp_path: Path
) -> None:
    proc, port = await _start_proxy(sim.url, tmp_path / "p")
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        size = 256 << 20
        writer.write(
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n"
            % size
            + b"x" * (1 << 20)
        )
        await writer.drain()
        t0 = time.monotonic()
        async with asyncio.timeout(5):
            head = await reader.read(4096)
        assert head.startswith(b"HTTP/1.1 413"), head
        assert time.monotonic() - t0 < 1.0
        # The refused connection still open (lingering) does not hold up anyone else.
        t0 = time.monotonic()
        reply = await _request(port, MODELS)
        assert reply.startswith(b"HTTP/1.1 200") and time.monotonic() - t0 < 1.0
        writer.close()
    finally:
        proc.terminate()
        await proc.communicate()


async def _hostile(port: int, slow: int, idle: int) -> list[asyncio.StreamReader]:
    readers = []
    for i in range(slow + idle):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        if i < slow:  # slowloris: a request line and part of the headers, never the end
            writer.write(b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nX-A: ")
        readers.append(reader)
    return readers


async def _closed_within(reader: asyncio.StreamReader, limit: float) -> bool:
    try:
        async with asyncio.timeout(limit):
            while await reader.read(4096):
                pass
    except (ConnectionResetError, BrokenPipeError):
        pass
    except TimeoutError:
        return False
    return True


async def test_hostile_connections_at_1024_descriptors(sim: SimServer, tmp_path: Path) -> None:
    # 300 slowloris and 700 silent connections against a proxy limited to 1,024 descriptors
    # (each proxied call may hold two): a normal request still answers in under 1 s, and every
    # hostile connection is closed by the header deadline or by the cap.
    if raise_fd_limit() < 1200:
        pytest.skip("this test needs about 1,100 descriptors of its own")
    proc, port = await _start_proxy(sim.url, tmp_path / "p", "--header-timeout", "2", fd_1024=True)
    try:
        t_open = time.monotonic()
        readers = await _hostile(port, 300, 700)
        for _ in range(3):
            t0 = time.monotonic()
            reply = await _request(port, MODELS, limit=5)
            assert reply.startswith(b"HTTP/1.1 200"), reply[:200]
            assert time.monotonic() - t0 < 1.0
            reply = await _request(port, _chat("normal"), limit=5)
            assert reply.startswith(b"HTTP/1.1 200"), reply[:200]
        left = 2.0 + 1.5 - (time.monotonic() - t_open)
        closed = await asyncio.gather(*(_closed_within(r, max(left, 0.5)) for r in readers))
        assert all(closed), f"{closed.count(False)} hostile connections still open"
    finally:
        proc.terminate()
        await proc.communicate()


@pytest.mark.parametrize("port", ["70000", "-1"])
def test_port_out_of_range_is_one_line(tmp_path: Path, port: str) -> None:
    res = CliRunner().invoke(
        app,
        ["proxy", "--upstream", "http://127.0.0.1:9", "--out", str(tmp_path / "o"), "--port", port],
    )
    assert res.exit_code == 2, res.output
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and f"--port {port}" in lines[0], res.stderr
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize(
    ("flag", "value"),
    [("--header-timeout", "0"), ("--max-body", "-1"), ("--max-connections", "0")],
)
def test_bad_limit_is_one_line(tmp_path: Path, flag: str, value: str) -> None:
    res = CliRunner().invoke(
        app,
        ["proxy", "--upstream", "http://127.0.0.1:9", "--out", str(tmp_path / "o"), flag, value],
    )
    assert res.exit_code == 2, res.output
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and flag in lines[0], res.stderr


async def test_slow_body_gets_408_and_idle_connection_is_closed(
    sim: SimServer, tmp_path: Path
) -> None:
    proc, port = await _start_proxy(
        sim.url, tmp_path / "p", "--body-timeout", "1", "--keepalive-timeout", "1"
    )
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            b"Content-Length: %d\r\n\r\n%b" % (len(BODY), BODY[:10])
        )
        t0 = time.monotonic()
        async with asyncio.timeout(5):
            head = await reader.read(4096)
        assert head.startswith(b"HTTP/1.1 408") and 0.9 < time.monotonic() - t0 < 3, head
        writer.close()
        # A keep-alive connection left idle after a reply is closed after --keepalive-timeout.
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET /v1/models HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        t0 = time.monotonic()
        assert await _closed_within(reader, 5)
        assert 0.9 < time.monotonic() - t0 < 3
        writer.close()
    finally:
        proc.terminate()
        await proc.communicate()
