"""The simulator closes incomplete connections, and fails to start with one clear line."""

from __future__ import annotations

import asyncio
import resource
import socket
import subprocess
import sys
import time

import pytest

from agentload.client import ChatClient, EndpointConfig, RetryPolicy, Timeouts
from agentload.http_limits import raise_fd_limit
from agentload.sim import SimConfig
from agentload.sim.api import STDIN_CONFIG_FLAG, SimBindError, SimProcess, SimServer
from agentload.sim.settings import describe_errors
from agentload.util import free_port

MSGS = [{"role": "user", "content": "hi"}]
REQUEST_HEAD = (
    b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
)
BODY = b'{"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}'


async def _closed_after(
    reader: asyncio.StreamReader, t0: float, limit: float
) -> tuple[float, bytes]:
    """Seconds from t0 until the server closed the connection, and what it sent before."""
    data = b""
    try:
        async with asyncio.timeout(limit):
            while chunk := await reader.read(65536):
                data += chunk
    except (ConnectionResetError, BrokenPipeError):
        pass
    except TimeoutError:
        return float("inf"), data
    return time.monotonic() - t0, data


async def _slow_clients(host: str, port: int, n: int) -> list[tuple[str, float, bytes]]:
    """n connections: a third send nothing, a third half the headers, a third half a body."""
    conns = []
    for i in range(n):
        t0 = time.monotonic()
        reader, writer = await asyncio.open_connection(host, port)
        kind = ("silent", "half-headers", "half-body")[i % 3]
        if kind == "half-headers":
            writer.write(REQUEST_HEAD[:40])
        elif kind == "half-body":
            writer.write(REQUEST_HEAD + b"Content-Length: %d\r\n\r\n" % len(BODY) + BODY[:10])
        await writer.drain()
        conns.append((kind, t0, reader, writer))
    results = await asyncio.gather(*(_closed_after(r, t0, 10.0) for _, t0, r, _ in conns))
    for *_, w in conns:
        w.close()
    return [(c[0], t, data) for c, (t, data) in zip(conns, results, strict=True)]


async def _one_chat(base_url: str, total: float = 20) -> bool:
    ep = EndpointConfig(
        base_url=base_url,
        model="agentload-sim",
        retry=RetryPolicy(max_attempts=1),
        timeouts=Timeouts(total=total),
    )
    async with ChatClient(ep) as c:
        res = await c.chat(MSGS, max_tokens=4)
    return res.ok


async def test_slowloris_connections_are_closed_and_the_server_still_serves() -> None:
    # The subprocess form runs on uvloop, as `agentload sim` does.
    cfg = SimConfig(port=0, speedup=50, header_timeout_s=0.5, body_timeout_s=0.5)
    with SimProcess(cfg) as sim:
        assert await _one_chat(sim.base_url)
        results = await _slow_clients(sim.config.host, sim.port, 201)
        assert await _one_chat(sim.base_url)
    by_kind: dict[str, list[float]] = {}
    for kind, t, data in results:
        by_kind.setdefault(kind, []).append(t)
        if kind == "half-body":
            assert data.startswith(b"HTTP/1.1 408"), data[:80]
        else:
            assert data == b"", data[:80]
    assert sorted(by_kind) == ["half-body", "half-headers", "silent"]
    for kind, times in by_kind.items():
        # Closed at the 0.5 s deadline (a 408 then up to 1 s of draining), not before and
        # not much after.
        assert min(times) >= 0.45, (kind, min(times))
        assert max(times) < 3.0, (kind, max(times))


async def test_idle_keepalive_connection_is_not_cut_by_the_header_deadline() -> None:
    async with SimServer(SimConfig(port=0, speedup=50, header_timeout_s=0.3)) as sim:
        reader, writer = await asyncio.open_connection(sim.config.host, sim.port)
        request = REQUEST_HEAD + b"Content-Length: %d\r\n\r\n" % len(BODY) + BODY
        for _ in range(2):
            writer.write(request)
            await writer.drain()
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
            assert head.startswith(b"HTTP/1.1 200"), head
            length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
            await reader.readexactly(length)
            await asyncio.sleep(0.6)  # idle for twice the header deadline
        writer.close()


async def test_in_process_bind_error() -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        with pytest.raises(SimBindError, match=f"cannot listen on 127.0.0.1:{port}"):
            await SimServer(SimConfig(port=port)).start()


def _sim(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "agentload.sim", *args],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_busy_port_and_unknown_host_give_one_line_and_exit_2() -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        r = _sim("--port", str(port))
    assert r.returncode == 2
    assert r.stderr.count("\n") == 1 and "Traceback" not in r.stderr
    assert f"cannot listen on 127.0.0.1:{port}" in r.stderr and "in use" in r.stderr
    r = _sim("--host", "no-such-host.invalid", "--port", "0")
    assert r.returncode == 2
    assert r.stderr.count("\n") == 1 and "no-such-host.invalid" in r.stderr


def test_bad_settings_give_one_line_per_field(tmp_path) -> None:
    r = _sim("--speedup", "-1", "--port", "99999", "--tool-call-probability", "2")
    assert r.returncode == 2 and "Traceback" not in r.stderr
    lines = sorted(r.stderr.strip().splitlines())  # in the settings' field order
    assert lines == [
        "agentload sim: --port: Input should be less than or equal to 65535 (got 99999)",
        "agentload sim: --speedup: Input should be greater than 0 (got -1.0)",
        "agentload sim: --tool-call-probability: Input should be less than or equal to 1 (got 2.0)",
    ]
    bad = tmp_path / "p.yaml"
    bad.write_text("base: tiny-cpu\nblock_size: -5\n")
    r = _sim("--profile", str(bad))
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1
    assert "block_size: Input should be greater than or equal to 1" in r.stderr
    bad.write_text("a: [\n")
    r = _sim("--profile", str(bad))
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1
    assert "cannot read the profile" in r.stderr
    r = _sim("--profile", "no-such-profile")
    assert r.returncode == 2 and "unknown profile 'no-such-profile'" in r.stderr


def test_describe_errors_names_fields() -> None:
    with pytest.raises(ValueError) as info:
        SimConfig(log_interval_s=-1, body_timeout_s=0)  # type: ignore[call-arg]
    lines = describe_errors(info.value)  # type: ignore[arg-type]
    assert lines == [
        "--log-interval: Input should be greater than or equal to 0 (got -1)",
        "--body-timeout: Input should be greater than 0 (got 0)",
    ]
    assert describe_errors(info.value, flags=False)[0].startswith("log_interval_s:")  # type: ignore[arg-type]


TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "lookup",
            "parameters": {"type": "object", "properties": {"q": {"type": "string"}}},
        },
    }
]


@pytest.mark.parametrize("after", [1, 2, 50])
async def test_stall_fault_on_a_tool_call_answer_is_an_idle_timeout(after: int) -> None:
    cfg = SimConfig(
        port=0,
        speedup=50,
        fault_rate=1.0,
        fault_kinds=["stall"],
        fault_stall_s=2.0,
        fault_after_tokens=after,
    )
    async with SimServer(cfg) as sim:
        ep = EndpointConfig(
            base_url=sim.base_url,
            model="agentload-sim",
            retry=RetryPolicy(max_attempts=1),
            timeouts=Timeouts(first_token=1.0, idle=0.4),
        )
        async with ChatClient(ep) as c:
            res = await c.chat(MSGS, tools=TOOLS, tool_choice="required")
    rec = res.record
    assert rec.error_kind == "timeout_idle", rec
    assert rec.ttft_s is not None and rec.token_chunks >= 1
    assert res.tool_calls and res.tool_calls[0]["function"]["name"] == "lookup"


async def test_a_request_longer_than_the_header_deadline_completes() -> None:
    # The deadline covers the headers only: a stream that runs for several times the header
    # deadline is not cut (on uvloop, in the subprocess, as `agentload sim` runs).
    cfg = SimConfig(port=0, speedup=1, header_timeout_s=0.2, mean_output_tokens=40)
    with SimProcess(cfg) as sim:
        ep = EndpointConfig(
            base_url=sim.base_url, model="agentload-sim", retry=RetryPolicy(max_attempts=1)
        )
        async with ChatClient(ep) as c:
            res = await c.chat(MSGS, max_tokens=300, extra_body={"ignore_eos": True})
    assert res.ok, res.record
    assert res.record.e2e_s is not None and res.record.e2e_s > 0.5


def _fd_limit_256() -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (256, 256))


async def test_connections_beyond_the_fd_limit_do_not_lock_out_a_client() -> None:
    # At a 256-descriptor limit (soft and hard, so the simulator cannot raise it) and a header
    # deadline far off, 400 silent and slowloris connections would exhaust the descriptors:
    # every accept would fail until the deadline. The cap closes the longest-waiting one.
    port = free_port("127.0.0.1")
    cfg = SimConfig(port=port, speedup=50, header_timeout_s=60, keepalive_timeout_s=60)
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "agentload.sim",
        STDIN_CONFIG_FLAG,
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        preexec_fn=_fd_limit_256,
    )
    assert proc.stdin is not None
    proc.stdin.write(cfg.model_dump_json().encode())
    proc.stdin.close()
    writers = []
    try:
        base_url = f"http://127.0.0.1:{port}/v1"
        deadline = time.monotonic() + 30
        while True:  # up once it accepts
            try:
                _, probe = await asyncio.open_connection("127.0.0.1", port)
                probe.close()
                break
            except OSError:
                assert time.monotonic() < deadline and proc.returncode is None
                await asyncio.sleep(0.1)
        raise_fd_limit()  # this side holds the 400 connections
        readers = []
        for i in range(400):
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            if i % 2:
                writer.write(REQUEST_HEAD[:40])
            readers.append(reader)
            writers.append(writer)
        t0 = time.monotonic()
        assert await _one_chat(base_url, total=5.0)
        assert time.monotonic() - t0 < 1.0
        # The first connections opened were the ones closed (oldest first).
        closed, _ = await _closed_after(readers[0], t0, 2.0)
        assert closed < 2.0
    finally:
        for w in writers:
            w.close()
        proc.terminate()
        await asyncio.wait_for(proc.wait(), 10)


@pytest.mark.parametrize("value", ["7", "-0.1", "abc", "true", ".nan"])
def test_behaviour_option_out_of_range_is_refused_in_one_line(value: str) -> None:
    r = _sim("--behaviour-option", f"agent_skill={value}", "--port", "0")
    assert r.returncode == 2 and "Traceback" not in r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith("agentload sim: --behaviour-option"), lines
    assert "agent_skill" in lines[0] and "from 0 to 1" in lines[0], lines


async def test_behaviour_option_in_range_is_taken() -> None:
    async with SimServer(SimConfig(port=0, behaviour_options={"agent_skill": 0.3})) as sim:
        assert sim.sim is not None
    with pytest.raises(ValueError, match=r"agent_skill.*from 0 to 1"):
        await SimServer(SimConfig(port=0, behaviour_options={"agent_skill": 1.5})).start()
    # Settings changed after validation (model_copy) are checked when the server starts.
    cfg = SimConfig(port=0).model_copy(update={"behaviour_options": {"agent_skill": 7}})
    with pytest.raises(ValueError, match=r"agent_skill=7: expected a number from 0 to 1"):
        await SimServer(cfg).start()
