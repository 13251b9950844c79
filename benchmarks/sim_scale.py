"""Simulator scale benchmark: open streams, token throughput, emission lag.

Runs the simulator in one subprocess and a lean load client (raw asyncio protocol on uvloop,
counting events without parsing them) in another, so each gets its own core. The client keeps
``--concurrency`` streaming requests open at all times (closed loop: a finished request is
replaced at once); the engine runs ``--max-num-seqs`` of them per step and queues the rest, so
every request holds an open stream from the start.

    python benchmarks/sim_scale.py                      # 2,000 streams, 256-seq batch, 20 s
    python benchmarks/sim_scale.py --concurrency 500 --duration 10

Prints a JSON summary: streams open, errors, tokens/s seen by the client and counted by the
simulator, the simulator's CPU use, its own emission lag (p50 / p99 / max) over the measured
window, and how many lines of its log report errors (``SIM_SCALE_LOG=path`` keeps the log).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import subprocess
import sys
import tempfile
import time
import urllib.request
from typing import Any, cast

MODEL = "bench"


# --- the load client (runs in its own process) ---------------------------------------------
class _Stream(asyncio.Protocol):
    """One keep-alive HTTP/1.1 connection issuing streaming requests back to back.

    It only counts SSE events (``data: `` prefixes) and spots the end of each response (the
    chunked terminator after ``[DONE]``): no parsing, no per-event objects.
    """

    def __init__(self, requests: list[bytes], stats: dict[str, int], stop_at: float) -> None:
        self.requests = requests
        self.stats = stats
        self.stop_at = stop_at
        self.tail = b""
        self.head_seen = False
        self.transport: asyncio.Transport | None = None
        self.closed = asyncio.get_running_loop().create_future()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)
        self._send()

    def _send(self) -> None:
        assert self.transport is not None
        self.head_seen = False
        self.tail = b""
        self.stats["open"] += 1
        self.stats["max_open"] = max(self.stats["max_open"], self.stats["open"])
        self.transport.write(random.choice(self.requests))

    def data_received(self, data: bytes) -> None:
        stats = self.stats
        buf = self.tail + data
        if not self.head_seen:
            if not buf.startswith(b"HTTP/1.1 200"):
                if len(buf) >= 12:
                    stats["errors"] += 1
                    assert self.transport is not None
                    self.transport.close()
                self.tail = buf
                return
            self.head_seen = True
        stats["events"] += buf.count(b"data: ") - self.tail.count(b"data: ")
        if buf.endswith(b"data: [DONE]\n\n\r\n0\r\n\r\n"):
            stats["events"] -= 1
            stats["done"] += 1
            stats["open"] -= 1
            if time.monotonic() < self.stop_at:
                self._send()
            else:
                assert self.transport is not None
                self.transport.close()
            return
        self.tail = buf[-40:]

    def connection_lost(self, exc: Exception | None) -> None:
        if self.head_seen or self.tail:
            self.stats["open"] -= 1
            if exc is not None or time.monotonic() < self.stop_at:
                self.stats["errors"] += 1
        if not self.closed.done():
            self.closed.set_result(None)


async def _client(
    url: str, concurrency: int, warmup: float, duration: float, max_tokens: int, spread: float
) -> dict[str, Any]:
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    host, port = parts.hostname or "127.0.0.1", parts.port or 80
    # Output lengths uniform in max_tokens × [1 - spread, 1 + spread], as real outputs vary;
    # with spread 0 every sequence of a batch ends in the same step and the simulator admits
    # a whole batch of new requests at once every max_tokens steps.
    lo, hi = max(1, round(max_tokens * (1 - spread))), max(1, round(max_tokens * (1 + spread)))
    requests = []
    for n in sorted({lo + (hi - lo) * k // 40 for k in range(41)}):
        body = json.dumps(
            {
                "model": MODEL,
                "messages": [{"role": "user", "content": "Stream, please."}],
                "max_tokens": n,
                "ignore_eos": True,
                "stream": True,
            }
        ).encode()
        requests.append(
            (
                f"POST {parts.path} HTTP/1.1\r\nHost: {host}:{port}\r\n"
                f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
            ).encode()
            + body
        )
    stats = {"events": 0, "done": 0, "errors": 0, "open": 0, "max_open": 0}
    loop = asyncio.get_running_loop()
    t_start = time.monotonic()
    t_measure = t_start + warmup
    t_end = t_measure + duration
    protocols: list[_Stream] = []
    for _ in range(concurrency):
        _, proto = await loop.create_connection(lambda: _Stream(requests, stats, t_end), host, port)
        protocols.append(proto)
    await asyncio.sleep(max(0.0, t_measure - time.monotonic()))
    events0, t0, open_min = stats["events"], time.monotonic(), stats["open"]
    while time.monotonic() < t_end:
        await asyncio.sleep(0.25)
        open_min = min(open_min, stats["open"])
    events1, t1 = stats["events"], time.monotonic()
    for proto in protocols:
        if proto.transport is not None:
            proto.transport.close()
    await asyncio.wait([p.closed for p in protocols], timeout=5)
    return {
        "client_tokens_per_s": (events1 - events0) / (t1 - t0),
        "streams_open_max": stats["max_open"],
        "streams_open_min_in_window": open_min,
        "requests_completed": stats["done"],
        "errors": stats["errors"],
        "window_s": t1 - t0,
    }


def _run_client(args: argparse.Namespace) -> None:
    try:
        import uvloop

        runner: Any = uvloop.run
    except ImportError:
        runner = asyncio.run
    res = runner(
        _client(
            args.url, args.concurrency, args.warmup, args.duration, args.max_tokens, args.spread
        )
    )
    print(json.dumps(res), flush=True)


# --- the driver ------------------------------------------------------------------------------
def _get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=10) as resp:
        return json.loads(resp.read())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--concurrency", type=int, default=2000)
    ap.add_argument("--max-num-seqs", type=int, default=256)
    ap.add_argument("--step-overhead-s", type=float, default=0.010)
    ap.add_argument("--decode-seq-s", type=float, default=1.0e-5)
    ap.add_argument("--max-tokens", type=int, default=400, help="mean output length")
    ap.add_argument(
        "--spread",
        type=float,
        default=0.5,
        help="output lengths uniform in max_tokens x [1-spread, 1+spread]",
    )
    ap.add_argument("--warmup", type=float, default=5.0)
    ap.add_argument("--duration", type=float, default=20.0)
    ap.add_argument("--json", help="also write the summary to this file")
    ap.add_argument("--no-pin", action="store_true", help="do not pin sim and client to cores")
    ap.add_argument("--client", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--url", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.client:
        _run_client(args)
        return

    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "src"))
    from agentload.sim import SimConfig, SimProcess

    with tempfile.TemporaryDirectory() as tmp:
        profile = os.path.join(tmp, "bench.yaml")
        with open(profile, "w") as f:
            f.write(
                f"name: bench\nstep_overhead_s: {args.step_overhead_s}\n"
                f"decode_seq_s: {args.decode_seq_s}\nmax_num_seqs: {args.max_num_seqs}\n"
                "max_num_batched_tokens: 65536\nkv_blocks: 200000\nblock_size: 16\n"
                "max_model_len: 8192\n"
            )
        config = SimConfig(port=0, model=MODEL, profile=profile, log_interval_s=5.0)
        log_path = os.environ.get("SIM_SCALE_LOG") or os.path.join(tmp, "sim.log")
        with SimProcess(config, log_path=log_path) as sim:
            pin = (os.cpu_count() or 1) >= 2 and not args.no_pin
            if pin and sim.proc is not None:
                # Simulator on core 0, load client on core 1: neither preempts the other.
                os.sched_setaffinity(sim.proc.pid, {0})
            step_s = args.step_overhead_s + args.decode_seq_s * args.max_num_seqs
            client = subprocess.Popen(
                [
                    sys.executable,
                    __file__,
                    "--client",
                    "--url",
                    f"{sim.base_url}/chat/completions",
                    "--concurrency",
                    str(args.concurrency),
                    "--warmup",
                    str(args.warmup),
                    "--duration",
                    str(args.duration),
                    "--max-tokens",
                    str(args.max_tokens),
                    "--spread",
                    str(args.spread),
                ],
                stdout=subprocess.PIPE,
                text=True,
            )
            if pin:
                os.sched_setaffinity(client.pid, {1})
            time.sleep(args.warmup)
            before = _get(f"{sim.url}/sim/stats?reset=1")
            time.sleep(args.duration)
            after = _get(f"{sim.url}/sim/stats")
            out, _ = client.communicate(timeout=120)
            with open(log_path) as f:
                sim_log = f.read()
        client_res = json.loads(out.strip().splitlines()[-1])
    summary = {
        "concurrency": args.concurrency,
        "max_num_seqs": args.max_num_seqs,
        "model_step_ms": 1e3 * step_s,
        "model_tokens_per_s": args.max_num_seqs / step_s,
        "sim_tokens_per_s": (after["generation_tokens"] - before["generation_tokens"])
        / (after["monotonic_s"] - before["monotonic_s"]),
        "sim_cpu_share": (after["process_cpu_s"] - before["process_cpu_s"])
        / (after["monotonic_s"] - before["monotonic_s"]),
        "sim_cpu_us_per_token": 1e6
        * (after["process_cpu_s"] - before["process_cpu_s"])
        / max(1, after["generation_tokens"] - before["generation_tokens"]),
        "load_average_1m": os.getloadavg()[0],
        **client_res,
        "emission_lag_p50_ms": 1e3 * after["emission_lag_p50_s"],
        "emission_lag_p99_ms": 1e3 * after["emission_lag_p99_s"],
        "emission_lag_max_ms": 1e3 * after["emission_lag_max_s"],
        "late_steps": after["late_steps"],
        "tokens_in_lag_window": after["emitted_tokens"],
    }
    problems = [
        line
        for line in sim_log.splitlines()
        if "Traceback" in line or "ERROR" in line or "Error" in line
    ]
    summary["sim_log_problem_lines"] = len(problems)
    print(json.dumps(summary, indent=2))
    print("\nsimulator log (last lines):\n" + "\n".join(sim_log.splitlines()[-3:]))
    if problems:
        print("\nsimulator log problems (first 5):\n" + "\n".join(problems[:5]))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(summary, f, indent=2)


if __name__ == "__main__":
    main()
