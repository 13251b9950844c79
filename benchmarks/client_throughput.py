"""Client capacity: streaming requests/s and SSE events/s of one agentload client process.

The server is a minimal uvloop protocol that answers every POST with the same canned
chat-completion stream (19 SSE events: role, 16 content tokens, finish, usage, plus [DONE]),
pinned to one core; the client runs `ChatClient.chat` from N concurrent tasks pinned to the
other core. A canned raw-socket server is used because an aiohttp server tops out below the
client's rate on one core, and then the benchmark would measure the server.

    python benchmarks/client_throughput.py [--seconds 10] [--concurrency 64]

Paired A/B against another source tree (for instance a checkout of an older commit): runs of
the two alternate, each in its own process, and the ratio of client CPU per request is taken
per round, so both sides see the same machine load:

    git archive main | tar -x -C /tmp/base
    python benchmarks/client_throughput.py --ab /tmp/base/src --rounds 6 --concurrency 16 64

A series of runs (each a fresh process, cycling through the concurrencies) and their median,
the figure benchmarks/README.md reports, since one run on a shared VM moves by +-15 %:

    python benchmarks/client_throughput.py --series 12 --concurrency 16 32 64
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing as mp
import os
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

import orjson

from agentload.client import ChatClient, EndpointConfig, RetryPolicy
from agentload.util import gc_tuned, new_event_loop


def canned_stream() -> tuple[bytes, int]:
    def ev(obj: object) -> bytes:
        return b"data: " + orjson.dumps(obj) + b"\n\n"

    base = {
        "id": "chatcmpl-bench",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "bench",
    }
    events = [
        ev(
            {
                **base,
                "choices": [
                    {
                        "index": 0,
                        "delta": {"role": "assistant", "content": ""},
                        "finish_reason": None,
                    }
                ],
            }
        )
    ]
    for i in range(16):
        events.append(
            ev(
                {
                    **base,
                    "choices": [
                        {"index": 0, "delta": {"content": f" tok{i}"}, "finish_reason": None}
                    ],
                }
            )
        )
    events.append(ev({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}))
    events.append(
        ev(
            {
                **base,
                "choices": [],
                "usage": {
                    "prompt_tokens": 12,
                    "completion_tokens": 16,
                    "total_tokens": 28,
                    "prompt_tokens_details": {"cached_tokens": 0},
                },
            }
        )
    )
    events.append(b"data: [DONE]\n\n")
    body = b"".join(events)
    chunked = b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body)
    head = (
        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream; charset=utf-8\r\n"
        b"transfer-encoding: chunked\r\n\r\n"
    )
    return head + chunked, len(events)


class _Canned(asyncio.Protocol):
    response = b""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.t = transport
        self.buf = b""

    def data_received(self, data: bytes) -> None:
        self.buf += data
        while True:
            end = self.buf.find(b"\r\n\r\n")
            if end < 0:
                return
            head = self.buf[:end].lower()
            i = head.find(b"content-length:")
            n = (
                int(head[i + 15 : head.find(b"\r\n", i) if head.find(b"\r\n", i) > 0 else None])
                if i >= 0
                else 0
            )
            if len(self.buf) < end + 4 + n:
                return
            self.buf = self.buf[end + 4 + n :]
            self.t.write(self.response)  # type: ignore[attr-defined]


def _serve(port_q: mp.Queue, core: int) -> None:
    os.sched_setaffinity(0, {core})
    _Canned.response = canned_stream()[0]
    loop = new_event_loop()
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(1024)
    server = loop.run_until_complete(loop.create_server(_Canned, sock=sock))
    port_q.put(sock.getsockname()[1])
    try:
        loop.run_forever()
    finally:
        server.close()


async def _load(
    base_url: str, seconds: float, concurrency: int, tune_gc: bool = True
) -> dict[str, float]:
    ep = EndpointConfig(base_url=base_url, model="bench", retry=RetryPolicy(max_attempts=1))
    msgs = [{"role": "user", "content": "hello"}]
    done = errors = chunks = 0
    async with ChatClient(ep) as client:
        for _ in range(concurrency):  # warm the pool
            await client.chat(msgs)
        stop = time.perf_counter() + seconds

        async def worker() -> None:
            nonlocal done, errors, chunks
            while time.perf_counter() < stop:
                res = await client.chat(msgs)
                if res.ok:
                    done += 1
                    chunks += res.record.token_chunks
                else:
                    errors += 1

        # As `agentload run` and `replay` drive their clients (runner.drive): collections of
        # the young generation every 20,000 allocations, start-up objects frozen.
        with gc_tuned(tune_gc):
            cpu0, t0 = time.process_time(), time.perf_counter()
            await asyncio.gather(*(worker() for _ in range(concurrency)))
            cpu, wall = time.process_time() - cpu0, time.perf_counter() - t0
    return {
        "requests": done,
        "errors": errors,
        "token_chunks": chunks,
        "wall_s": wall,
        "cpu_s": cpu,
    }


def _one(src: Path, seconds: float, concurrency: int, extra: list[str]) -> dict[str, float]:
    """One run in a fresh process importing agentload from `src`."""
    env = {**os.environ, "PYTHONPATH": str(src)}
    cmd = [sys.executable, __file__, "--seconds", str(seconds), "--concurrency", str(concurrency)]
    out = subprocess.run(cmd + extra, env=env, capture_output=True, text=True, check=True)
    return orjson.loads(out.stdout)


def _ab(args: argparse.Namespace, extra: list[str]) -> None:
    """Alternating runs of `args.ab` (A) and this tree (B); the per-round ratio B / A."""
    sides = {"A": Path(args.ab).resolve(), "B": Path(__file__).resolve().parents[1] / "src"}
    report: dict[str, object] = {"a": str(sides["A"]), "b": str(sides["B"]), "runs": []}
    for c in args.concurrency:
        ratios = []
        for i in range(args.rounds):
            order = ("A", "B") if i % 2 == 0 else ("B", "A")  # neither side always first
            us = {k: _one(sides[k], args.seconds, c, extra)["client_us_per_request"] for k in order}
            ratios.append(us["B"] / us["A"])
            row = {"concurrency": c, "round": i + 1, "a_us": us["A"], "b_us": us["B"]}
            row["ratio"] = round(ratios[-1], 3)
            load = os.getloadavg()[0]
            row["load"] = round(load, 1)
            print(orjson.dumps(row).decode(), file=sys.stderr, flush=True)
            report["runs"].append(row)  # type: ignore[attr-defined]
        report[f"median_ratio_c{c}"] = round(statistics.median(ratios), 3)
    print(orjson.dumps(report, option=orjson.OPT_INDENT_2).decode())


def _series(args: argparse.Namespace, extra: list[str]) -> None:
    """`args.series` runs of this tree, cycling through the concurrencies; each run and the
    median, min and max of requests/s and client CPU per request."""
    src = Path(__file__).resolve().parents[1] / "src"
    runs = []
    for i in range(args.series):
        c = args.concurrency[i % len(args.concurrency)]
        r = _one(src, args.seconds, c, extra)
        r["load"] = round(os.getloadavg()[0], 1)
        print(orjson.dumps(r).decode(), file=sys.stderr, flush=True)
        runs.append(r)
    report: dict[str, object] = {"runs": runs}
    for key in ("requests_per_s", "client_us_per_request"):
        vals = [float(r[key]) for r in runs]
        report[key] = {
            "median": round(statistics.median(vals), 1),
            "min": min(vals),
            "max": max(vals),
        }
    report["runs_at_or_over_20000"] = sum(r["requests_per_s"] >= 20_000 for r in runs)
    report["errors"] = sum(int(r["errors"]) for r in runs)
    print(orjson.dumps(report, option=orjson.OPT_INDENT_2).decode())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument(
        "--concurrency", type=int, nargs="+", default=[64], help="several values with --ab"
    )
    ap.add_argument("--ab", metavar="SRC", help="paired A/B against the agentload under SRC")
    ap.add_argument("--rounds", type=int, default=4, help="A/B rounds per concurrency")
    ap.add_argument(
        "--series", type=int, default=0, metavar="N", help="N runs of this tree and their median"
    )
    ap.add_argument("--client-core", type=int, default=0)
    ap.add_argument("--server-core", type=int, default=1)
    ap.add_argument(
        "--default-gc",
        action="store_true",
        help="keep CPython's default GC thresholds (runs use agentload.util.gc_tuned)",
    )
    args = ap.parse_args()
    if args.ab or args.series:
        extra = ["--client-core", str(args.client_core), "--server-core", str(args.server_core)]
        extra += ["--default-gc"] if args.default_gc else []
        (_ab if args.ab else _series)(args, extra)
        return
    if len(args.concurrency) != 1:
        ap.error("one --concurrency value without --ab or --series")
    args.concurrency = args.concurrency[0]
    _, n_events = canned_stream()
    q: mp.Queue = mp.Queue()
    srv = mp.Process(target=_serve, args=(q, args.server_core), daemon=True)
    srv.start()
    port = q.get(timeout=10)
    os.sched_setaffinity(0, {args.client_core})
    try:
        loop = new_event_loop()
        r = loop.run_until_complete(
            _load(
                f"http://127.0.0.1:{port}/v1",
                args.seconds,
                args.concurrency,
                tune_gc=not args.default_gc,
            )
        )
        loop.close()
    finally:
        srv.terminate()
    rps = r["requests"] / r["wall_s"]
    out = {
        "concurrency": args.concurrency,
        "gc": "default" if args.default_gc else "tuned",
        "seconds": round(r["wall_s"], 2),
        "requests": r["requests"],
        "errors": r["errors"],
        "requests_per_s": round(rps),
        "sse_events_per_request": n_events,
        "sse_events_per_s": round(rps * n_events),
        "client_cpu_share": round(r["cpu_s"] / r["wall_s"], 3),
        "client_us_per_request": round(r["cpu_s"] / max(1, r["requests"]) * 1e6, 1),
    }
    print(orjson.dumps(out, option=orjson.OPT_INDENT_2).decode())


if __name__ == "__main__":
    main()
