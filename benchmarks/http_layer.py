"""CPU per request of the simulator's HTTP/1.1 front end alone (`sim/fasthttp.py` on
`agentload.http1server`): parsing, the deadlines, the queue, the reply's head and framing.

No sockets and no engine: each of N connections gets an in-memory transport, a request of
about 200 bytes is fed to every connection per round, and a stub generation answers a small
JSON body. What is left is the layer's own Python work, so two versions can be compared
within a few per cent, which the end-to-end `replay_throughput.py --sim-src` cannot resolve
on a shared machine (the engine's batching there moves with the load).

    python benchmarks/http_layer.py [--connections 100] [--rounds 300]
    python benchmarks/http_layer.py --ab OLD/src --runs 6    # alternating runs, OLD vs this tree

`--sockets` measures the whole simulator instead (`instant` profile, its own process, real
loopback sockets): a raw-socket client keeps `--connections` connections busy with streamed
8-token answers, one request at a time each, and the simulator's CPU per request is taken over
`--rounds` requests per connection after a warm-up. No replay machinery runs beside it.

    python benchmarks/http_layer.py --sockets --connections 1000 --rounds 30 --ab OLD/src --runs 3
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import orjson

REQUEST = (
    b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
    b"Content-Length: 120\r\n\r\n" + b"x" * 120
)


class _Transport:
    def __init__(self) -> None:
        self.writes = 0
        self.closing = False

    def write(self, data: bytes) -> None:
        self.writes += 1

    def is_closing(self) -> bool:
        return self.closing

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return default

    def close(self) -> None:
        self.closing = True

    abort = close


class _Config:
    header_timeout_s = 10.0
    body_timeout_s = 30.0
    keepalive_timeout_s = 75.0


class _Sim:
    """What the front end asks of `SimApp`, answering at once."""

    config = _Config()

    def unauthorized(self, path: str, headers: Any) -> bool:
        return False

    async def generate(self, front: Any, chat: bool) -> None:
        front.reply(200, b'{"ok":true}')


async def _measure(connections: int, rounds: int) -> float:
    from agentload.http_limits import ConnectionCap
    from agentload.sim import fasthttp

    factory = fasthttp.fast_factory(None, _Sim(), ConnectionCap(connections))  # type: ignore[arg-type]
    conns = []
    for _ in range(connections):
        proto, transport = factory(), _Transport()
        proto.connection_made(transport)  # type: ignore[arg-type]
        conns.append((proto, transport))
    gc.collect()
    t0 = time.process_time()
    for _ in range(rounds):
        for proto, _t in conns:
            proto.data_received(REQUEST)
        await asyncio.sleep(0)  # the answers' tasks run
        await asyncio.sleep(0)
    cpu = time.process_time() - t0
    assert all(t.writes == rounds for _, t in conns), "a request was not answered"
    return cpu / (rounds * connections) * 1e6


_CHAT = orjson.dumps(
    {
        "model": "m",
        "messages": [{"role": "user", "content": "hello there " * 20}],
        "max_tokens": 8,
        "stream": True,
    }
)
_CHAT_REQUEST = (
    b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
    b"Content-Length: %d\r\n\r\n%b" % (len(_CHAT), _CHAT)
)


def _proc_cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def _client(port: int, n: int) -> None:
    """`n` streamed calls, one after the other, on one keep-alive connection."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    for _ in range(n):
        writer.write(_CHAT_REQUEST)
        buf = b""
        while not buf.endswith(b"0\r\n\r\n"):  # the chunked body's last chunk
            data = await reader.read(1 << 16)
            assert data, "the simulator closed the connection"
            buf += data
    writer.close()


async def _measure_sockets(connections: int, rounds: int) -> float:
    from agentload.sim import SimConfig, SimProcess

    with SimProcess(SimConfig(port=0, model="m", profile="instant")) as sim:
        assert sim.proc is not None
        await asyncio.gather(*(_client(sim.port, 5) for _ in range(connections)))  # warm-up
        cpu0 = _proc_cpu_s(sim.proc.pid)
        await asyncio.gather(*(_client(sim.port, rounds) for _ in range(connections)))
        cpu = _proc_cpu_s(sim.proc.pid) - cpu0
    return cpu / (rounds * connections) * 1e6


def _one(src: Path, connections: int, rounds: int, sockets: bool) -> float:
    env = {**os.environ, "PYTHONPATH": str(src)}
    cmd = [sys.executable, __file__, "--connections", str(connections), "--rounds", str(rounds)]
    cmd += ["--sockets"] if sockets else []
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
    return float(orjson.loads(out.stdout)["us_per_request"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--connections", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=300)
    ap.add_argument(
        "--ab",
        metavar="SRC",
        help="alternating runs: the agentload under SRC (A) and this tree (B)",
    )
    ap.add_argument("--runs", type=int, default=6, help="runs per side with --ab")
    ap.add_argument(
        "--sockets", action="store_true", help="the whole simulator over loopback sockets"
    )
    a = ap.parse_args()
    if not a.ab:
        from agentload.util import new_event_loop

        loop = new_event_loop()
        measure = _measure_sockets if a.sockets else _measure
        us = loop.run_until_complete(measure(a.connections, a.rounds))
        print(orjson.dumps({"us_per_request": round(us, 2), "connections": a.connections}).decode())
        return
    sides = {"A": Path(a.ab).resolve(), "B": Path(__file__).resolve().parents[1] / "src"}
    runs: dict[str, list[float]] = {"A": [], "B": []}
    for i in range(a.runs):
        for side in ("A", "B") if i % 2 == 0 else ("B", "A"):  # neither side always first
            runs[side].append(_one(sides[side], a.connections, a.rounds, a.sockets))
        print(
            orjson.dumps({"run": i + 1, "a_us": runs["A"][-1], "b_us": runs["B"][-1]}).decode(),
            file=sys.stderr,
        )
    ratios = [b / x for x, b in zip(runs["A"], runs["B"], strict=True)]
    report = {
        "a": str(sides["A"]),
        "b": str(sides["B"]),
        "a_us": runs["A"],
        "b_us": runs["B"],
        "median_a_us": round(statistics.median(runs["A"]), 2),
        "median_b_us": round(statistics.median(runs["B"]), 2),
        "median_ratio": round(statistics.median(ratios), 3),
    }
    print(orjson.dumps(report, option=orjson.OPT_INDENT_2).decode())


if __name__ == "__main__":
    main()
