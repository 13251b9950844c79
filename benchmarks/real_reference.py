"""How far the real reference itself moves: fresh vLLM servers, the same decode again and again.

    python benchmarks/real_reference.py --real-python .venv-real/bin/python --starts 3

A simulator profile can only be shown within N % of a real server that stays within N % of
itself. This starts `--starts` fresh vLLM servers (CPU build, the real-engine tier's tiny model
and arguments, one after another) and on each runs `--blocks` blocks of single streams: a cold
`--prompt`-token prompt, then `--tokens` output tokens, one stream at a time, nothing else
sent. Each block gives the median TPOT of its streams. Between blocks, on an idle server, a
fixed computation (a 256 x 256 float32 matrix product on one thread) times the host itself, as
a control: if the host holds still and the server's decode moves, the movement is the
server's.

Then the time to first token of a short cached prompt (64 tokens, 2 output tokens), sent to
the idle engine after pauses of 0, 0.3, 1.5, 3 and 5 s, and sent while one stream decodes over a
1,024-token context: whether an idle engine is slower to start than a busy one.

With `--pin`, every server process but the model worker (which vLLM binds to a CPU of its
own), and this client, are pinned to the last CPU for every second block and left to the
kernel for the others: whether placement steadies it.

It also reads each server process's CPU time (from /proc, Linux only) while the engine is idle
and during the blocks, which shows what shares the machine's cores with the model worker.
The result goes to OUT/real_reference.json; the summary is printed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp

from agentload.calibration.prompts import PromptMaker
from agentload.calibration.stream import Call, Target, stream_call
from sim_fidelity import start_vllm


def process_tree(pid: int) -> list[int]:
    out = [pid]
    # each thread lists the children it forked (proc(5)): take them all
    children: set[int] = set()
    for task in Path(f"/proc/{pid}/task").glob("*/children"):
        try:
            children.update(int(c) for c in task.read_text().split())
        except OSError:
            continue  # a thread that ended meanwhile
    for c in sorted(children):
        out += process_tree(c)
    return out


def cpu_seconds(root: int) -> dict[str, float]:
    """CPU seconds (user + system) of the server's processes, by process name: processes of
    one name are summed (the API server's and multiprocessing's helpers are all `python`;
    the helpers idle)."""
    tick = os.sysconf("SC_CLK_TCK")
    out: dict[str, float] = {}
    for pid in process_tree(root):
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            continue
        name = stat[stat.index("(") + 1 : stat.rindex(")")]
        fields = stat[stat.rindex(")") + 2 :].split()
        # fields[11] and [12] are utime and stime (proc(5), counted from field 3)
        out[name] = out.get(name, 0.0) + (int(fields[11]) + int(fields[12])) / tick
    return out


def pin(root: int, cpus: set[int]) -> None:
    """Pin every thread of the server (but the model worker's, bound by vLLM itself) and of
    this process to `cpus`."""
    for pid in [*process_tree(root), os.getpid()]:
        try:
            if Path(f"/proc/{pid}/comm").read_text().strip() == "VLLM::Worker":
                continue
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue  # a process that ended meanwhile
        for tid in tids:
            try:
                os.sched_setaffinity(int(tid), cpus)
            except OSError:
                pass  # a thread that ended meanwhile


def cpu_share(
    before: dict[str, float], after: dict[str, float], seconds: float
) -> dict[str, float]:
    """Each process's share of one core over the interval."""
    return {k: round((after[k] - before.get(k, 0.0)) / seconds, 2) for k in after}


# Single-threaded, in a process of its own: a multi-threaded BLAS would time its own threads
# fighting over two cores rather than the host.
CONTROL = """
import statistics, time, numpy as np
a = np.random.default_rng(0).random((256, 256), dtype=np.float32)
runs = []
for _ in range(5):
    t0 = time.perf_counter()
    for _ in range(40):
        a @ a
    runs.append((time.perf_counter() - t0) / 40 * 1e3)
print(statistics.median(runs))
"""


def host_control() -> float:
    """Milliseconds per 256 x 256 float32 matrix product on one thread (median of 5 x 40)."""
    one = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")
    env = os.environ | dict.fromkeys(one, "1")
    every = range(os.cpu_count() or 1)
    out = subprocess.run(
        [sys.executable, "-c", CONTROL],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        # on any CPU, as in every block, whether this process is pinned (--pin) or not
        preexec_fn=lambda: os.sched_setaffinity(0, every),
    )
    return float(out.stdout)


async def one_server(url: str, root: int, tok: str, args: argparse.Namespace) -> dict[str, Any]:
    target = Target(url, "tiny")
    prompts = PromptMaker(tok, seed=43)
    res: dict[str, Any] = {"blocks": []}
    async with aiohttp.ClientSession() as http:
        for _ in range(2):  # warm-up
            await stream_call(http, target, prompts.text(args.prompt), args.tokens)
        # vLLM's model worker keeps polling for new work for a second after its last step
        # (`SpinCondition`, vllm/distributed/device_communicators/shm_broadcast.py): wait it out.
        await asyncio.sleep(2.0)
        c0, t0 = cpu_seconds(root), time.monotonic()
        await asyncio.sleep(5.0)
        res["idle_cpu"] = cpu_share(c0, cpu_seconds(root), time.monotonic() - t0)
        every = set(range(os.cpu_count() or 1))
        for b in range(args.blocks):
            pinned = args.pin and b % 2 == 1
            pin(root, {max(every)} if pinned else every)
            # after the worker's polling that follows a step (see above)
            await asyncio.sleep(1.5)
            control = host_control()
            c0, t0 = cpu_seconds(root), time.monotonic()
            tpots = []
            for _ in range(args.streams):
                c = await stream_call(http, target, prompts.text(args.prompt), args.tokens)
                if (t := c.tpot()) is not None:
                    tpots.append(t * 1e3)
            busy = cpu_share(c0, cpu_seconds(root), time.monotonic() - t0)
            block = {
                "tpot_median_ms": round(statistics.median(tpots), 3) if tpots else None,
                "tpot_ms": [round(t, 3) for t in tpots],
                "host_control_ms": round(control, 4),
                "busy_cpu": busy,
                "load_avg_1m": round(os.getloadavg()[0], 2),
                "pinned": pinned,
            }
            res["blocks"].append(block)
            print(
                f"  block {b + 1}: TPOT median {block['tpot_median_ms']} ms "
                f"({len(tpots)} streams{', pinned' if pinned else ''}), "
                f"host control {control:.3f} ms, CPU {busy}",
                flush=True,
            )
        pin(root, every)
        res["arrivals_ttft_ms"] = await arrivals(http, target, prompts)
        print(f"  short-prompt TTFT medians (ms): {res['arrivals_ttft_ms']['median']}", flush=True)
    return res


async def arrivals(http: aiohttp.ClientSession, target: Target, prompts: PromptMaker) -> Any:
    short = prompts.text(64)
    for _ in range(3):  # cached from here on
        await stream_call(http, target, short, 2)
    ttft: dict[str, list[float]] = {}
    for _ in range(4):
        for pause in (0.0, 0.3, 1.5, 3.0, 5.0):
            await stream_call(http, target, short, 2)
            await asyncio.sleep(pause)
            c = await stream_call(http, target, short, 2)
            ttft.setdefault(f"idle, after {pause:g} s", []).append(c.ttft * 1e3)
        for _ in range(2):
            stream = Call(start=0.0)
            task = asyncio.ensure_future(stream_call(http, target, prompts.text(1024), 80, stream))
            # the stream's chunks are appended by its reader: poll them
            while (not stream.counts or stream.counts[-1] < 20) and not task.done():  # noqa: ASYNC110
                await asyncio.sleep(0.002)
            c = await stream_call(http, target, short, 2)
            await task
            ttft.setdefault("beside a decoding stream", []).append(c.ttft * 1e3)
    return {
        "median": {k: round(statistics.median(v), 2) for k, v in ttft.items()},
        "all": {k: [round(x, 2) for x in sorted(v)] for k, v in ttft.items()},
    }


def spread(values: list[float]) -> float | None:
    """(max - min) / median, to three places; None for no values."""
    if not values:
        return None
    return round((max(values) - min(values)) / statistics.median(values), 3)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--real-python", required=True, help="interpreter with vLLM")
    ap.add_argument("--out", type=Path, default=Path("real-reference-out"))
    ap.add_argument("--starts", type=int, default=3, help="fresh servers, one after another")
    ap.add_argument("--blocks", type=int, default=4, help="blocks of streams per server")
    ap.add_argument("--streams", type=int, default=6, help="streams per block")
    ap.add_argument("--prompt", type=int, default=2000, help="prompt tokens (cold)")
    ap.add_argument("--tokens", type=int, default=64, help="output tokens per stream")
    ap.add_argument(
        "--pin", action="store_true", help="pin the front end and client for every other block"
    )
    args = ap.parse_args()
    if not sys.platform.startswith("linux"):
        sys.exit("reads process CPU time from /proc: Linux only")
    args.out.mkdir(parents=True, exist_ok=True)
    servers = []
    for i in range(args.starts):
        proc, tok = start_vllm(args.real_python, args.out)
        assert proc.proc is not None
        print(f"server {i + 1}/{args.starts} (pid {proc.proc.pid})", flush=True)
        try:
            run = one_server(proc.spec.base_url, proc.proc.pid, str(tok), args)
            servers.append(asyncio.run(run))
        finally:
            proc.stop()
        print(f"  idle CPU share per process: {servers[-1]['idle_cpu']}", flush=True)
    blocks = [b for s in servers for b in s["blocks"] if b["tpot_median_ms"] is not None]
    decode = [b["tpot_median_ms"] for b in blocks]
    control = [b["host_control_ms"] for b in blocks]
    summary = {
        "decode_block_medians_ms": [[b["tpot_median_ms"] for b in s["blocks"]] for s in servers],
        "decode_spread": spread(decode),
        "decode_spread_within_server": [
            spread([b["tpot_median_ms"] for b in s["blocks"] if b["tpot_median_ms"] is not None])
            for s in servers
        ],
        "host_control_spread": spread(control),
        "short_prompt_ttft_medians_ms": [s["arrivals_ttft_ms"]["median"] for s in servers],
        "cpus": os.cpu_count(),
    }
    record = {"args": vars(args) | {"out": str(args.out)}, "summary": summary, "servers": servers}
    (args.out / "real_reference.json").write_text(json.dumps(record, indent=2))
    print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
