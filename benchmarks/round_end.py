"""The end of a concurrent round, on a real vLLM and on the simulator: how soon a request sent
the moment another stream finishes gets into the engine's steps, against one sent mid-decode.

    python benchmarks/round_end.py --real-python .venv-real/bin/python --profile vllm-cpu-tiny

Three streams decode over distinct cold contexts (`--context` tokens, as in the fidelity
suite's concurrent workload). Then, by variant:

* `finish`: a fourth stream over a cached short prompt decodes beside them and ends; the
  client sends a cold `--context`-token prompt the moment its last token arrives (what a
  closed-loop client does at the end of a round);
* `cold`: the same kind of prompt, sent at a random moment of the decode;
* `cached`: a cached prompt of that length, sent at a random moment.

From the first stream's chunks, per variant: `reach`, the time from sending the new request to
the start of the step that prefilled it (the stream's chunk before its long gap), and the
stream's steps while the request was in the front end, beside its plain steps a few steps
earlier. Both servers get every variant `--reps` times, in turn (real, simulator, real again,
so a server that drifts shows it). The simulator runs the profile under test with the tier's
tokenizer.

With `--trace-runs N` it then runs the concurrent workload itself N times on each side (16
cold `--context`-token prompts, 64 tokens each, four closed-loop workers) and reports, for
the requests of rounds 2 to 4 (groups of four, in order of sending), the median TTFT by place
in the round, and how many of a round's streams had their last token after a gap over 50 ms
(the next round's first prefills caught them). Results go to OUT/round_end.json; tables are printed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import time
from pathlib import Path
from typing import Any

import aiohttp

from agentload.calibration.probe import mixed_step
from agentload.calibration.prompts import PromptMaker
from agentload.calibration.stream import Call, Target, stream_call
from agentload.sim.api import SimProcess
from agentload.sim.settings import SimConfig
from sim_fidelity import server_args, start_vllm

VARIANTS = ("finish", "cold", "cached")


async def one(
    http: aiohttp.ClientSession, t: Target, pm: PromptMaker, variant: str, cached: str, ctx: int
) -> dict[str, Any] | None:
    """One repetition: three streams, one new request; None when its prefill did not share a
    step with the first stream (the stream had ended)."""
    contexts = [pm.prompt(ctx) for _ in range(3)]
    fresh = pm.prompt(ctx)  # built before the clock matters: it takes the loop for ms
    decs = [Call(start=0.0) for _ in range(3)]
    tasks = []
    for c, p in zip(decs, contexts, strict=True):
        tasks.append(asyncio.ensure_future(stream_call(http, t, p, 120, c)))
        while not c.times and not tasks[-1].done():  # noqa: ASYNC110 (the reader fills c)
            await asyncio.sleep(0.001)
    if variant == "finish":
        await stream_call(http, t, cached, 20)
        arrival = await stream_call(http, t, fresh, 1)
    else:
        await asyncio.sleep(0.08 + random.random() * 0.01)
        arrival = await stream_call(http, t, cached if variant == "cached" else fresh, 1)
    await asyncio.gather(*tasks)
    d = decs[0]
    i = mixed_step(d, arrival)
    if i is None or i < 8:
        return None
    gaps = d.gaps()
    during = [gaps[k - 1] for k in range(1, i + 1) if d.times[k - 1] >= arrival.start]
    return {
        "reach_s": d.times[i] - arrival.start,
        "during_s": during,
        "plain_s": statistics.median(gaps[i - 8 : i - 3]),
        "ttft_s": arrival.ttft,
    }


async def side(
    http: aiohttp.ClientSession, t: Target, pm: PromptMaker, reps: int, ctx: int
) -> dict[str, list[dict[str, Any]]]:
    cached = pm.prompt(ctx)
    await stream_call(http, t, cached, 1)
    out: dict[str, list[dict[str, Any]]] = {v: [] for v in VARIANTS}
    for _ in range(reps):
        for v in VARIANTS:
            r = await one(http, t, pm, v, cached, ctx)
            if r is not None:
                out[v].append(r)
    return out


def summary(runs: dict[str, list[dict[str, Any]]]) -> dict[str, dict[str, float | int | None]]:
    out: dict[str, dict[str, float | int | None]] = {}
    for v, rs in runs.items():
        during = [g for r in rs for g in r["during_s"]]
        out[v] = {
            "n": len(rs),
            "reach_ms": round(1e3 * statistics.median(r["reach_s"] for r in rs), 2) if rs else None,
            "plain_step_ms": round(1e3 * statistics.median(r["plain_s"] for r in rs), 2)
            if rs
            else None,
            "step_in_front_end_ms": round(1e3 * statistics.median(during), 2) if during else None,
            "steps_in_front_end": round(statistics.fmean(len(r["during_s"]) for r in rs), 2)
            if rs
            else None,
        }
    return out


async def concurrent(
    http: aiohttp.ClientSession, t: Target, pm: PromptMaker, ctx: int
) -> list[dict[str, Any]]:
    """The fidelity suite's concurrent workload once: each call's start, TTFT and gaps."""
    prompts = [pm.prompt(ctx) for _ in range(16)]
    calls: list[dict[str, Any]] = []

    async def worker() -> None:
        while prompts:
            c = await stream_call(http, t, prompts.pop(0), 64)
            calls.append({"start": c.start, "ttft": c.ttft, "gaps": c.gaps()})

    await asyncio.gather(*(worker() for _ in range(4)))
    return sorted(calls, key=lambda c: c["start"])


def rounds(runs: list[list[dict[str, Any]]]) -> dict[str, Any]:
    """Median TTFT by place in the round and streams caught per round, rounds 2-4."""
    by_place: list[list[float]] = [[], [], [], []]
    caught: list[int] = []
    for calls in runs:
        for r in range(1, 4):
            group = calls[4 * r : 4 * r + 4]
            for k, c in enumerate(group):
                by_place[k].append(c["ttft"])
            # a stream whose last token waited out a long step: the next round's prefill
            caught.append(sum(1 for c in group if c["gaps"] and c["gaps"][-1] > 0.05))
    return {
        "ttft_by_place_ms": [round(1e3 * statistics.median(x), 1) for x in by_place if x],
        "caught_per_round": {str(n): caught.count(n) for n in range(5)},
    }


async def run(args: argparse.Namespace, url: str, tok: Path) -> dict[str, Any]:
    res: dict[str, Any] = {"args": {k: str(v) for k, v in vars(args).items()}}
    async with aiohttp.ClientSession() as http:
        real = Target(url, args.model)
        pm = PromptMaker(str(tok), args.seed)
        t0 = time.monotonic()
        print(f"warming the server up for {args.warmup:.0f} s", flush=True)
        while time.monotonic() - t0 < args.warmup:
            await asyncio.gather(
                *(stream_call(http, real, pm.prompt(args.context), 32) for _ in range(3))
            )
        res["real"] = await side(http, real, pm, args.reps, args.context)
        print("real done", flush=True)
        cfg = SimConfig(
            port=0, profile=args.profile, model=args.model, tokenizer=str(tok), log_interval_s=0
        )
        with SimProcess(cfg) as sim:
            sim_pm = PromptMaker(str(tok), args.seed + 1)
            res["sim"] = await side(
                http, Target(sim.base_url, args.model), sim_pm, args.reps, args.context
            )
        print("simulator done", flush=True)
        res["real_again"] = await side(
            http, real, PromptMaker(str(tok), args.seed + 2), args.reps, args.context
        )
        if args.trace_runs:
            traces: dict[str, list[list[dict[str, Any]]]] = {"real": [], "sim": []}
            with SimProcess(cfg) as sim:
                simt = Target(sim.base_url, args.model)
                for k in range(args.trace_runs):
                    salt = args.seed + 100 + k
                    for name, t in (("real", real), ("sim", simt)):
                        pmk = PromptMaker(str(tok), salt)
                        traces[name].append(await concurrent(http, t, pmk, args.context))
            res["trace"] = {k: rounds(v) for k, v in traces.items()}
            res["trace_calls"] = traces
            print("traces done", flush=True)
    res["summary"] = {k: summary(res[k]) for k in ("real", "sim", "real_again")}
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    server_args(ap)
    ap.add_argument("--profile", default="vllm-cpu-tiny", help="simulator profile")
    ap.add_argument("--reps", type=int, default=8)
    ap.add_argument("--context", type=int, default=2000)
    ap.add_argument("--warmup", type=float, default=40.0, help="seconds of load first")
    ap.add_argument("--seed", type=int, default=77)
    ap.add_argument("--trace-runs", type=int, default=0, help="concurrent workload runs a side")
    ap.add_argument("--out", default="round-end-out")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.url:
        if not args.tokenizer:
            ap.error("--url needs --tokenizer")
        url = args.url.rstrip("/") + "/v1"
        res = asyncio.run(run(args, url, Path(args.tokenizer)))
    elif args.real_python:
        proc, tok = start_vllm(args.real_python, out)
        try:
            res = asyncio.run(run(args, proc.spec.base_url, tok))
        finally:
            proc.stop()
    else:
        ap.error("give --real-python (to start a vLLM) or --url")
    (out / "round_end.json").write_text(json.dumps(res, indent=1))
    keys = ("n", "reach_ms", "plain_step_ms", "step_in_front_end_ms", "steps_in_front_end")
    print("| side | variant | " + " | ".join(keys) + " |")
    print("|---" * (len(keys) + 2) + "|")
    for s in ("real", "sim", "real_again"):
        for v, row in res["summary"][s].items():
            print(f"| {s} | {v} | " + " | ".join(str(row[k]) for k in keys) + " |")
    for s, tr in res.get("trace", {}).items():
        print(
            f"{s}: TTFT by place in the round {tr['ttft_by_place_ms']} ms; rounds by streams "
            f"caught {tr['caught_per_round']}"
        )


if __name__ == "__main__":
    main()
