"""Latency the recording proxy adds: the same calls direct and through `agentload proxy`.

The simulator (`instant` profile: no model time) runs in its own process, the proxy in
another (the real `agentload proxy` command), and this process sends streaming chat
completions at a fixed rate (open loop, Poisson arrivals) with agentload's client, alternating
direct and proxied blocks so that drift in machine load hits both arms alike. The client asks
for no usage, so the proxy takes its usual path: it adds `include_usage` upstream and drops the
usage chunk on the way back. Added latency = the proxied arm's TTFT / end-to-end percentile
minus the direct arm's; the proxy's own figure (`proxy.overhead_s` of its summary.json) is
printed beside it.

    python benchmarks/proxy_overhead.py [--rate 500] [--seconds 20] [--blocks 4] [--pin]
    python benchmarks/proxy_overhead.py --cpu-calls 2500   # CPU per proxied call only

`--pin` puts the proxy alone on CPU 1 and the simulator and this client on CPU 0 (scheduler
affinity, inherited by their threads), so that on a 2-core machine the proxied arm's added
latency is the proxy's work plus the extra hop, not the proxy waiting for a core that the two
other processes hold. `--cpu-calls N` sends N calls through the proxy in a closed loop (16 in
flight) and reports only the proxy's CPU per call: the figure that does not depend on how
loaded the machine is, for comparing two versions of the proxy back to back
(`--proxy-src DIR` runs the proxy from another checkout's `src`).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from typing import Any

from agentload.client import ChatClient, EndpointConfig, RetryPolicy
from agentload.sim import SimConfig
from agentload.sim.api import SimProcess
from agentload.stats import percentile_sorted
from agentload.util import run_async

MESSAGES = [
    {"role": "system", "content": "You are a benchmark."},
    {"role": "user", "content": "Say something."},
]


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def _arm(client: ChatClient, rate: float, seconds: float, out: dict[str, list[float]]):
    """Open-loop arrivals at `rate` per second for `seconds`; records TTFT and e2e."""
    rng = random.Random(1)
    tasks: list[asyncio.Task[Any]] = []
    t0 = time.perf_counter()
    next_t = t0
    errors = 0

    async def one() -> None:
        nonlocal errors
        r = await client.chat(
            MESSAGES, max_tokens=16, extra_body={"stream_options": {"include_usage": False}}
        )
        rec = r.record
        if rec.status != "ok" or rec.ttft_s is None or rec.e2e_s is None:
            errors += 1
            return
        out["ttft"].append(rec.ttft_s)
        out["e2e"].append(rec.e2e_s)

    while next_t - t0 < seconds:
        delay = next_t - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.create_task(one()))
        next_t += rng.expovariate(rate)
    await asyncio.gather(*tasks)
    out.setdefault("errors", []).append(errors)
    out.setdefault("sent", []).append(len(tasks))
    out.setdefault("wall", []).append(time.perf_counter() - t0)


def _cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process so far (Linux /proc)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def _cpu_only(client: ChatClient, n: int, proxy_pid: int) -> dict[str, Any]:
    await asyncio.gather(*(client.chat(MESSAGES, max_tokens=4) for _ in range(50)))
    gate = asyncio.Semaphore(16)
    failed = 0

    async def one() -> None:
        nonlocal failed
        async with gate:
            r = await client.chat(
                MESSAGES, max_tokens=16, extra_body={"stream_options": {"include_usage": False}}
            )
            failed += r.record.status != "ok"

    cpu0, t0 = _cpu_s(proxy_pid), time.perf_counter()
    await asyncio.gather(*(one() for _ in range(n)))
    cpu = _cpu_s(proxy_pid) - cpu0
    return {
        "calls": n,
        "errors": failed,
        "seconds": time.perf_counter() - t0,
        "proxy_cpu_us_per_call": cpu / n * 1e6,
        "one_core_calls_per_s": n / cpu if cpu else None,
    }


def _q(v: list[float], q: float) -> float:
    return percentile_sorted(sorted(v), q) or 0.0


async def _main(
    a: argparse.Namespace, sim_url: str, proxy_url: str, proxy_pid: int
) -> dict[str, Any]:
    def endpoint(url: str) -> EndpointConfig:
        return EndpointConfig(
            name="bench", base_url=url, model="sim", retry=RetryPolicy(max_attempts=1)
        )

    arms: dict[str, dict[str, list[float]]] = {
        "direct": {"ttft": [], "e2e": []},
        "proxy": {"ttft": [], "e2e": []},
    }
    if a.cpu_calls:
        async with ChatClient(endpoint(proxy_url + "/v1")) as p:
            return await _cpu_only(p, a.cpu_calls, proxy_pid)
    async with (
        ChatClient(endpoint(sim_url + "/v1")) as d,
        ChatClient(endpoint(proxy_url + "/v1")) as p,
    ):
        for c in (d, p):  # warm the pools
            await asyncio.gather(*(c.chat(MESSAGES, max_tokens=4) for _ in range(50)))
        block = a.seconds / a.blocks
        proxy_cpu = 0.0
        for _ in range(a.blocks):
            await _arm(d, a.rate, block, arms["direct"])
            cpu0 = _cpu_s(proxy_pid)
            await _arm(p, a.rate, block, arms["proxy"])
            proxy_cpu += _cpu_s(proxy_pid) - cpu0
    res: dict[str, Any] = {}
    for name, v in arms.items():
        res[name] = {
            "calls": len(v["e2e"]),
            "errors": sum(v["errors"]),
            "rate": sum(v["sent"]) / sum(v["wall"]),
            **{
                f"{m}_{k}_ms": _q(v[m], q) * 1e3
                for m in ("ttft", "e2e")
                for k, q in (("p50", 0.5), ("p99", 0.99))
            },
        }
    # CPU the proxy process spent per proxied call: what does not depend on machine load.
    res["proxy_cpu_us_per_call"] = proxy_cpu / max(1, sum(arms["proxy"]["sent"])) * 1e6
    # What one core could proxy if the proxy had it to itself.
    res["one_core_calls_per_s"] = 1e6 / max(1e-9, res["proxy_cpu_us_per_call"])
    res["added_ms"] = {
        k: res["proxy"][k] - res["direct"][k] for k in res["direct"] if k.endswith("_ms")
    }
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rate", type=float, default=500.0, help="calls per second per arm")
    ap.add_argument("--seconds", type=float, default=20.0, help="seconds per arm in all")
    ap.add_argument("--blocks", type=int, default=4, help="alternating blocks per arm")
    ap.add_argument(
        "--cpu-calls", type=int, default=0, help="only measure CPU per call over N proxied calls"
    )
    ap.add_argument(
        "--pin", action="store_true", help="proxy alone on CPU 1; simulator and client on CPU 0"
    )
    ap.add_argument(
        "--proxy-src", metavar="DIR", help="run the proxy from this src folder (A/B of versions)"
    )
    a = ap.parse_args()
    env = dict(os.environ)
    if a.proxy_src:
        env["PYTHONPATH"] = os.path.abspath(a.proxy_src)
    pin_proxy = None
    if a.pin:
        cpus = os.sched_getaffinity(0)
        if not {0, 1} <= cpus:
            raise SystemExit(f"--pin needs CPUs 0 and 1; this process may use {sorted(cpus)}")
        os.sched_setaffinity(0, {0})  # this client, and the simulator started below

        def pin_proxy() -> None:  # in the proxy's process, before it starts any thread
            os.sched_setaffinity(0, {1})

    sim = SimProcess(SimConfig(port=0, profile="instant", model="sim")).start()
    port = _free_port()
    with tempfile.TemporaryDirectory() as tmp:
        proxy = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "agentload",
                "proxy",
                "--upstream",
                sim.url,
                "--port",
                str(port),
                "--out",
                os.path.join(tmp, "run"),
                "--json",
            ],
            stdout=subprocess.PIPE,
            text=True,
            env=env,
            preexec_fn=pin_proxy,
        )
        try:
            assert proxy.stdout is not None
            line = proxy.stdout.readline()  # "agentload proxy: URL -> upstream" once it listens
            if "agentload proxy:" not in line:
                raise SystemExit(f"proxy did not start: {line!r}")
            res = run_async(_main(a, sim.url, f"http://127.0.0.1:{port}", proxy.pid))
        finally:
            proxy.send_signal(signal.SIGINT)
            rest, _ = proxy.communicate(timeout=120)
            sim.stop()
    own = json.loads(rest)
    if a.cpu_calls:
        res["load_average"] = os.getloadavg()
        res["pinned"] = a.pin
        print(json.dumps(res, indent=2))
        return
    res["proxy_own_overhead_ms"] = {
        k: (own["overhead_s"][k] or 0) * 1e3 for k in ("p50", "p99", "max")
    }
    res["load_average"] = os.getloadavg()
    res["cpus"] = os.cpu_count()
    res["pinned"] = a.pin
    print(json.dumps(res, indent=2))


if __name__ == "__main__":
    main()
