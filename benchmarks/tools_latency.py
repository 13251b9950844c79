"""Tool-call latency of `agentload tools serve`: what an outside agent waits per tool call.

The tool server runs in its own process (the real `agentload tools serve` command); this
process opens C concurrent sessions and has each make N tool calls in a closed loop (each
session waits for its answer before the next call, as an agent does), first over the
HTTP/JSON endpoint (aiohttp), then over MCP (the official SDK's streamable HTTP client, one MCP
session per agent session). The calls cycle through a fixed mix of airline read tools, so the
database work is the same in both arms. Reported: calls/s and the client-observed latency
percentiles, the server's own time in the tool (from the sessions' call log), and the CPU
per call of the server process (from /proc) and of this client process.

    python benchmarks/tools_latency.py [--concurrency 1,16] [--calls 200]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import statistics
import sys
import time
from typing import Any

import aiohttp
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

CALLS: list[tuple[str, dict[str, Any]]] = [
    ("get_customer_profile", {"user_id": "yusuf_patel_3862"}),
    ("get_booking", {"reservation_id": "86W3TJ"}),
    ("check_flight_status", {"flight_number": "SK856", "date": "2025-06-23"}),
    ("calculate", {"expression": "(120 + 150) * 1"}),
]


def pct(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, round(q / 100 * (len(s) - 1)))]


async def start_server() -> tuple[asyncio.subprocess.Process, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "agentload", "tools", "serve", "--domain", "airline",
        "--port", "0", stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    assert proc.stderr is not None
    line = (await asyncio.wait_for(proc.stderr.readline(), 120)).decode()
    m = re.search(r"(http://\S+) domain", line)
    if not m:
        raise SystemExit(f"tools serve did not start: {line!r}")
    return proc, m.group(1)


async def new_session(http: aiohttp.ClientSession, url: str) -> str:
    async with http.post(f"{url}/sessions", json={"task_id": "airline/012"}) as r:
        return str((await r.json())["session"])


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process so far (Linux)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Start:
    """Every agent connected before any timed call: `ready()` then wait for `go`."""

    def __init__(self, agents: int) -> None:
        self.left, self.all_ready, self.go = agents, asyncio.Event(), asyncio.Event()

    async def ready(self) -> None:
        self.left -= 1
        if self.left == 0:
            self.all_ready.set()
        await self.go.wait()


async def json_agent(
    http: aiohttp.ClientSession, url: str, n: int, lat: list[float], start: Start
) -> None:
    sid = await new_session(http, url)
    await start.ready()
    for i in range(n):
        name, args = CALLS[i % len(CALLS)]
        t0 = time.perf_counter()
        async with http.post(f"{url}/sessions/{sid}/tools/{name}", json=args) as r:
            body = await r.json()
        lat.append(time.perf_counter() - t0)
        assert body["ok"], body


async def mcp_agent(
    http: aiohttp.ClientSession, url: str, n: int, lat: list[float], start: Start
) -> None:
    sid = await new_session(http, url)
    async with (
        streamable_http_client(f"{url}/sessions/{sid}/mcp") as (read, write, _),
        ClientSession(read, write) as client,
    ):
        await client.initialize()
        await start.ready()
        for i in range(n):
            name, args = CALLS[i % len(CALLS)]
            t0 = time.perf_counter()
            r = await client.call_tool(name, args)
            lat.append(time.perf_counter() - t0)
            assert not r.isError, r.content


async def sessions(http: aiohttp.ClientSession, url: str) -> list[str]:
    async with http.get(f"{url}/sessions") as r:
        return [s["session"] for s in await r.json()]


async def server_times(http: aiohttp.ClientSession, url: str) -> list[float]:
    out = []
    for sid in await sessions(http, url):
        async with http.delete(f"{url}/sessions/{sid}") as r:
            out += [c["elapsed_s"] for c in (await r.json())["tool_calls"]]
    return out


async def arm(kind: str, url: str, pid: int, conc: int, n: int) -> dict[str, Any]:
    agent = json_agent if kind == "json" else mcp_agent
    lat: list[float] = []
    start = Start(conc)
    async with aiohttp.ClientSession() as http:
        agents = [asyncio.create_task(agent(http, url, n, lat, start)) for _ in range(conc)]
        await start.all_ready.wait()
        cpu0, t0, own0 = cpu_s(pid), time.perf_counter(), time.process_time()
        start.go.set()
        await asyncio.gather(*agents)
        wall, cpu = time.perf_counter() - t0, cpu_s(pid) - cpu0
        own = time.process_time() - own0
        inside = await server_times(http, url)
    return {
        "transport": kind,
        "concurrency": conc,
        "calls": len(lat),
        "calls_per_s": len(lat) / wall,
        "p50_ms": pct(lat, 50) * 1e3,
        "p99_ms": pct(lat, 99) * 1e3,
        "tool_p50_ms": statistics.median(inside) * 1e3,
        "server_cpu_ms_per_call": cpu / len(lat) * 1e3,
        "client_cpu_ms_per_call": own / len(lat) * 1e3,
    }


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--concurrency", default="1,16", help="comma-separated session counts")
    ap.add_argument("--calls", type=int, default=200, help="tool calls per session")
    a = ap.parse_args()
    proc, url = await start_server()
    try:
        print(f"# load average {os.getloadavg()[0]:.1f}, {os.cpu_count()} CPUs")
        print(
            "transport  conc  calls  calls/s  p50 ms  p99 ms  in-tool p50 ms  "
            "server CPU ms/call  client CPU ms/call"
        )
        for conc in (int(c) for c in a.concurrency.split(",")):
            for kind in ("json", "mcp"):
                r = await arm(kind, url, proc.pid, conc, a.calls)
                print(
                    f"{r['transport']:9}  {conc:4}  {r['calls']:5}  {r['calls_per_s']:7.0f}  "
                    f"{r['p50_ms']:6.2f}  {r['p99_ms']:6.2f}  {r['tool_p50_ms']:14.3f}  "
                    f"{r['server_cpu_ms_per_call']:18.2f}  {r['client_cpu_ms_per_call']:18.2f}"
                )
    finally:
        proc.terminate()
        await proc.wait()


if __name__ == "__main__":
    asyncio.run(main())
