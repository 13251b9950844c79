"""Simulator scale benchmark: open streams, token throughput, emission lag.

Runs the simulator in one subprocess and a lean aiohttp load client in another, so each gets
its own core. The client keeps ``--concurrency`` streaming requests open at all times (closed
loop: a finished request is replaced at once); the engine runs ``--max-num-seqs`` of them per
step and queues the rest, so every request holds an open stream from the start.

    python benchmarks/sim_scale.py                      # 2,000 streams, 256-seq batch, 20 s
    python benchmarks/sim_scale.py --concurrency 500 --duration 10

Prints a JSON summary: streams open, errors, tokens/s seen by the client and counted by the
simulator, and the simulator's own emission lag (p50 / p99 / max) over the measured window.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
from typing import Any

MODEL = "bench"


# --- the load client (runs in its own process) ---------------------------------------------
async def _client(url: str, concurrency: int, warmup: float, duration: float,
                  max_tokens: int) -> dict[str, Any]:
    import aiohttp

    body = json.dumps({
        "model": MODEL, "messages": [{"role": "user", "content": "Stream, please."}],
        "max_tokens": max_tokens, "ignore_eos": True, "stream": True,
    }).encode()
    headers = {"Content-Type": "application/json"}
    stats = {"events": 0, "done": 0, "errors": 0, "open": 0, "max_open": 0}
    window: dict[str, float] = {}
    t_start = time.monotonic()
    t_measure = t_start + warmup
    t_end = t_measure + duration
    connector = aiohttp.TCPConnector(limit=0, force_close=False)
    timeout = aiohttp.ClientTimeout(total=None, sock_read=120)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:

        async def worker() -> None:
            while time.monotonic() < t_end:
                stats["open"] += 1
                stats["max_open"] = max(stats["max_open"], stats["open"])
                try:
                    async with session.post(url, data=body, headers=headers) as resp:
                        if resp.status != 200:
                            stats["errors"] += 1
                            await resp.read()
                            continue
                        tail = b""
                        async for chunk in resp.content.iter_any():
                            stats["events"] += chunk.count(b"data: ")
                            tail = (tail + chunk)[-32:]
                        if b"[DONE]" in tail:
                            stats["done"] += 1
                            stats["events"] -= 1  # [DONE] carries no token
                        else:
                            stats["errors"] += 1
                except (TimeoutError, aiohttp.ClientError):
                    stats["errors"] += 1
                finally:
                    stats["open"] -= 1

        async def sampler() -> None:
            await asyncio.sleep(max(0.0, t_measure - time.monotonic()))
            window["events0"] = stats["events"]
            window["t0"] = time.monotonic()
            window["open_min"] = stats["open"]
            while time.monotonic() < t_end:
                await asyncio.sleep(0.25)
                window["open_min"] = min(window["open_min"], stats["open"])
            window["events1"] = stats["events"]
            window["t1"] = time.monotonic()

        tasks = [asyncio.create_task(worker()) for _ in range(concurrency)]
        await sampler()
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    elapsed = window["t1"] - window["t0"]
    return {
        "client_tokens_per_s": (window["events1"] - window["events0"]) / elapsed,
        "streams_open_max": stats["max_open"],
        "streams_open_min_in_window": window["open_min"],
        "requests_completed": stats["done"],
        "errors": stats["errors"],
        "window_s": elapsed,
    }


def _run_client(args: argparse.Namespace) -> None:
    try:
        import uvloop

        runner: Any = uvloop.run
    except ImportError:
        runner = asyncio.run
    res = runner(_client(args.url, args.concurrency, args.warmup, args.duration,
                         args.max_tokens))
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
    ap.add_argument("--max-tokens", type=int, default=400)
    ap.add_argument("--warmup", type=float, default=5.0)
    ap.add_argument("--duration", type=float, default=20.0)
    ap.add_argument("--json", help="also write the summary to this file")
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
            f.write(f"name: bench\nstep_overhead_s: {args.step_overhead_s}\n"
                    f"decode_seq_s: {args.decode_seq_s}\nmax_num_seqs: {args.max_num_seqs}\n"
                    "max_num_batched_tokens: 65536\nkv_blocks: 200000\nblock_size: 16\n"
                    "max_model_len: 8192\n")
        config = SimConfig(port=0, model=MODEL, profile=profile, log_interval_s=5.0)
        log_path = os.path.join(tmp, "sim.log")
        with SimProcess(config, log_path=log_path) as sim:
            step_s = args.step_overhead_s + args.decode_seq_s * args.max_num_seqs
            client = subprocess.Popen(
                [sys.executable, __file__, "--client", "--url",
                 f"{sim.base_url}/chat/completions", "--concurrency", str(args.concurrency),
                 "--warmup", str(args.warmup), "--duration", str(args.duration),
                 "--max-tokens", str(args.max_tokens)],
                stdout=subprocess.PIPE, text=True)
            time.sleep(args.warmup)
            before = _get(f"{sim.url}/sim/stats?reset=1")
            t0 = time.monotonic()
            time.sleep(args.duration)
            after = _get(f"{sim.url}/sim/stats")
            t1 = time.monotonic()
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
        / (t1 - t0),
        **client_res,
        "emission_lag_p50_ms": 1e3 * after["emission_lag_p50_s"],
        "emission_lag_p99_ms": 1e3 * after["emission_lag_p99_s"],
        "emission_lag_max_ms": 1e3 * after["emission_lag_max_s"],
        "late_steps": after["late_steps"],
        "tokens_in_lag_window": after["emitted_tokens"],
    }
    print(json.dumps(summary, indent=2))
    print("\nsimulator log (last lines):\n" + "\n".join(sim_log.splitlines()[-3:]))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(summary, f, indent=2)


if __name__ == "__main__":
    main()
