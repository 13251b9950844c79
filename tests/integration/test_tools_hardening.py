"""`agentload tools serve` as a long-lived service: one Host/Origin policy on every route,
oversized bodies refused before they are read, hostile connections closed by deadlines and a
cap, bad ports refused with one line. Real sockets on 127.0.0.1."""

from __future__ import annotations

import asyncio
import re
import resource
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from agentload.cli import app
from agentload.http_limits import ServiceLimits, raise_fd_limit
from agentload.tools import ToolServer


@pytest.fixture
async def ts() -> AsyncIterator[ToolServer]:
    async with ToolServer("retail", limits=ServiceLimits(max_body_bytes=1 << 20)) as s:
        yield s


async def _request(port: int, raw: bytes, limit: float = 10.0) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(raw)
        await writer.drain()
        async with asyncio.timeout(limit):
            return await reader.read(1 << 20)
    finally:
        writer.close()


def _post(path: str, body: bytes, host: str = "127.0.0.1:8200", extra: bytes = b"") -> bytes:
    return (
        b"POST %b HTTP/1.1\r\nHost: %b\r\nContent-Type: application/json\r\n%b"
        b"Content-Length: %d\r\nConnection: close\r\n\r\n%b"
        % (path.encode(), host.encode(), extra, len(body), body)
    )


async def test_json_routes_refuse_foreign_host_and_origin(ts: ToolServer) -> None:
    body = b'{"task_id": "retail/001"}'
    ok = await _request(ts.port, _post("/sessions", body))
    assert ok.startswith(b"HTTP/1.1 201"), ok
    sid = re.search(rb'"session":"([^"]+)"', ok)
    assert sid
    evil_host = await _request(ts.port, _post("/sessions", body, host="evil.example.com"))
    assert evil_host.startswith(b"HTTP/1.1 421"), evil_host
    evil_origin = _post("/sessions", body, extra=b"Origin: http://evil.example.com\r\n")
    assert (await _request(ts.port, evil_origin)).startswith(b"HTTP/1.1 403")
    for path in (b"/sessions/%b/tools/list_products", b"/sessions/%b/grade"):
        raw = _post((path % sid.group(1)).decode(), b"{}", host="evil.example.com:80")
        assert (await _request(ts.port, raw)).startswith(b"HTTP/1.1 421")
    get = b"GET /sessions HTTP/1.1\r\nHost: evil.example.com\r\nConnection: close\r\n\r\n"
    assert (await _request(ts.port, get)).startswith(b"HTTP/1.1 421")
    assert len(ts.store) == 1  # nothing the refused requests asked for happened


async def test_oversized_body_is_refused_before_it_is_read(ts: ToolServer) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", ts.port)
    writer.write(
        b"POST /sessions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        b"Content-Length: %d\r\n\r\n" % (256 << 20) + b" " * (1 << 16)
    )
    await writer.drain()
    t0 = time.monotonic()
    async with asyncio.timeout(5):
        head = await reader.read(4096)
    assert head.startswith(b"HTTP/1.1 413"), head
    assert time.monotonic() - t0 < 1.0
    writer.close()
    # Chunked, with no declared length: refused once over the limit.
    chunk = b" " * (1 << 19)
    raw = (
        b"POST /sessions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        b"Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
        + (b"%x\r\n%b\r\n" % (len(chunk), chunk)) * 3
        + b"0\r\n\r\n"
    )
    assert (await _request(ts.port, raw)).startswith(b"HTTP/1.1 413")
    assert len(ts.store) == 0


def _fd_limit_1024() -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (1024, 1024))


async def test_hostile_connections_at_1024_descriptors(tmp_path: Path) -> None:
    if raise_fd_limit() < 1200:
        pytest.skip("this test needs about 1,100 descriptors of its own")
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "agentload", "tools", "serve", "--domain", "retail",
        "--port", "0", "--header-timeout", "2",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        preexec_fn=_fd_limit_1024,
    )  # fmt: skip
    assert proc.stderr is not None
    line = (await asyncio.wait_for(proc.stderr.readline(), 60)).decode()
    m = re.search(r"http://127\.0\.0\.1:(\d+)", line)
    assert m, line
    port = int(m.group(1))
    try:
        t_open = time.monotonic()
        readers = []
        for i in range(1000):  # 300 slowloris, 700 silent
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            if i < 300:
                writer.write(b"POST /sessions HTTP/1.1\r\nHost: 127.0.0.1\r\nX-A: ")
            readers.append(reader)
        health = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
        for _ in range(3):
            t0 = time.monotonic()
            reply = await _request(port, health, limit=5)
            assert reply.startswith(b"HTTP/1.1 200"), reply[:200]
            assert time.monotonic() - t0 < 1.0
        left = max(2.0 + 1.5 - (time.monotonic() - t_open), 0.5)

        async def closed(r: asyncio.StreamReader) -> bool:
            try:
                async with asyncio.timeout(left):
                    while await r.read(4096):
                        pass
            except ConnectionResetError:
                pass
            except TimeoutError:
                return False
            return True

        done = await asyncio.gather(*(closed(r) for r in readers))
        assert all(done), f"{done.count(False)} hostile connections still open"
    finally:
        proc.terminate()
        await proc.communicate()


@pytest.mark.parametrize("port", ["99999", "-1"])
def test_port_out_of_range_is_one_line(port: str) -> None:
    res = CliRunner().invoke(app, ["tools", "serve", "-d", "airline", "--port", port])
    assert res.exit_code == 2, res.output
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and f"--port {port}" in lines[0], res.stderr
