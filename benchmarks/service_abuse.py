"""Hostile connections against the long-lived services at a 1,024-descriptor limit.

Each service (`agentload proxy` in front of `agentload sim`, `agentload tools serve`, and
`agentload sim` itself) runs as a subprocess whose RLIMIT_NOFILE is 1,024 soft and hard, so it
cannot raise it. The benchmark opens SLOW slowloris connections (a request line and part of
the headers, never the end) and IDLE silent ones, then sends a normal request every 0.2 s on a
fresh connection while they are open, and reports:

- the normal requests' latency (max, and how many failed);
- how many hostile connections the service closed, and when the last one went.

    python benchmarks/service_abuse.py                 # 2,000 idle + 300 slowloris, all three
    python benchmarks/service_abuse.py --only proxy --idle 2000 --slow 300 --header-timeout 5
"""

from __future__ import annotations

import argparse
import asyncio
import re
import resource
import sys
import time
from typing import Any

from agentload.http_limits import raise_fd_limit


def _limit_1024() -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (1024, 1024))


async def _spawn(args: list[str], pattern: str, stream: str) -> tuple[Any, int]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "agentload", *args,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        preexec_fn=_limit_1024,
    )  # fmt: skip
    pipe = proc.stdout if stream == "stdout" else proc.stderr
    assert pipe is not None
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        line = (await asyncio.wait_for(pipe.readline(), 60)).decode()
        m = re.search(pattern, line)
        if m:
            return proc, int(m.group(1))
    raise RuntimeError(f"{args[0]} did not start")


async def _normal(port: int, raw: bytes) -> float | None:
    t0 = time.monotonic()
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(raw)
        async with asyncio.timeout(5):
            data = await reader.read(65536)
        writer.close()
    except (OSError, TimeoutError):
        return None
    return time.monotonic() - t0 if data.startswith(b"HTTP/1.1 200") else None


async def _watch(reader: asyncio.StreamReader, t0: float, limit: float) -> float | None:
    try:
        async with asyncio.timeout(limit):
            while await reader.read(4096):
                pass
    except (ConnectionResetError, BrokenPipeError):
        pass
    except TimeoutError:
        return None
    return time.monotonic() - t0


async def _attack(port: int, raw: bytes, idle: int, slow: int, header_timeout: float) -> dict:
    t0 = time.monotonic()
    readers = []
    writers = []
    for i in range(slow + idle):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        if i < slow:
            writer.write(b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nX-A: ")
        readers.append(reader)
        writers.append(writer)
    opened_s = time.monotonic() - t0
    watch = [asyncio.ensure_future(_watch(r, t0, header_timeout + 10)) for r in readers]
    lat: list[float | None] = []
    while time.monotonic() - t0 < header_timeout + 2 and not all(w.done() for w in watch):
        lat.append(await _normal(port, raw))
        await asyncio.sleep(0.2)
    closed = await asyncio.gather(*watch)
    for w in writers:
        w.close()
    ok = [x for x in lat if x is not None]
    done = [c for c in closed if c is not None]
    return {
        "opened_s": round(opened_s, 2),
        "normal_requests": len(lat),
        "normal_failed": len(lat) - len(ok),
        "normal_max_ms": round(max(ok) * 1e3, 1) if ok else None,
        "hostile_closed": f"{len(done)}/{len(closed)}",
        "last_closed_s": round(max(done), 2) if done else None,
    }


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--idle", type=int, default=2000)
    ap.add_argument("--slow", type=int, default=300)
    ap.add_argument("--header-timeout", type=float, default=5.0)
    ap.add_argument("--only", choices=["proxy", "tools", "sim"])
    a = ap.parse_args()
    if raise_fd_limit() < a.idle + a.slow + 200:
        sys.exit("this benchmark needs more file descriptors than the hard limit allows")
    ht = str(a.header_timeout)
    get = b"GET /v1/models HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
    health = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
    sim_args = ["sim", "--port", "0", "--header-timeout", ht]
    sim_pat = r"http://127\.0\.0\.1:(\d+)"
    for name in ("sim", "proxy", "tools"):
        if a.only and a.only != name:
            continue
        procs = []
        try:
            if name == "tools":
                proc, port = await _spawn(
                    ["tools", "serve", "-d", "retail", "--port", "0", "--header-timeout", ht],
                    r"http://127\.0\.0\.1:(\d+)",
                    "stderr",
                )
                procs.append(proc)
                raw = health
            else:
                sim, sim_port = await _spawn(sim_args, sim_pat, "stdout")
                procs.append(sim)
                port, raw = sim_port, get
                if name == "proxy":
                    import tempfile

                    out = tempfile.mkdtemp(prefix="abuse-proxy-")
                    proxy, port = await _spawn(
                        ["proxy", "--upstream", f"http://127.0.0.1:{sim_port}", "--out", out,
                         "--overwrite", "--port", "0", "--header-timeout", ht],
                        r"http://127\.0\.0\.1:(\d+)/v1",
                        "stdout",
                    )  # fmt: skip
                    procs.append(proxy)
            res = await _attack(port, raw, a.idle, a.slow, a.header_timeout)
            print(name, res, flush=True)
        finally:
            for p in procs:
                p.terminate()
                await p.communicate()


if __name__ == "__main__":
    asyncio.run(main())
