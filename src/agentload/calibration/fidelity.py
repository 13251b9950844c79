"""`agentload sim fidelity`: the same fixed workloads against a real server and against the
simulator with a profile, and the simulator's error on each metric.

The workloads are those the simulator was first measured on: random prompts of 2,000 and 6,000
tokens, a shared 1,800-token prefix, concurrency 1 and 4, 32-64 output tokens with
``ignore_eos``. Both sides get the same prompts (a fresh random salt per run, so a real server's
prefix cache holds nothing from an earlier run) and are measured by the same client code.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import aiohttp

from agentload.calibration.calibrate import shared_host_note
from agentload.calibration.prompts import PromptMaker
from agentload.calibration.stream import Call, Target, stream_call
from agentload.http_sessions import open_session
from agentload.sim.api import SimProcess
from agentload.sim.settings import SimConfig
from agentload.stats import moved, pace, percentile_sorted


@dataclass(frozen=True)
class Workload:
    name: str
    prompt: int
    out: int
    concurrency: int
    requests: int
    prefix: int = 0
    """Tokens of a prefix every prompt shares (warmed into the cache before measuring)."""


WORKLOADS: tuple[Workload, ...] = (
    Workload("prefill-heavy", prompt=6000, out=32, concurrency=1, requests=6),
    Workload("decode-heavy", prompt=2000, out=64, concurrency=1, requests=6),
    Workload("shared-prefix", prompt=2000, out=32, concurrency=1, requests=8, prefix=1800),
    Workload("concurrent", prompt=2000, out=64, concurrency=4, requests=16),
)
METRICS = (
    "ttft_p50_s",
    "ttft_p90_s",
    "tpot_mean_s",
    "itl_mean_s",
    "output_tok_s",
    "tokens_per_chunk",
)
# Within this relative error a metric counts as matched (the goal for TTFT and TPOT).
GOAL = 0.10
GOAL_METRICS = ("ttft_p50_s", "ttft_p90_s", "tpot_mean_s")
# The TTFT percentiles and, per side, how far one request crossing each moves it (see `shift`).
SHIFTS = {"ttft_p50_s": ("ttft_p50_shift", 0.5), "ttft_p90_s": ("ttft_p90_shift", 0.9)}


def _quantile(sorted_vals: list[float], q: float) -> float:
    v = percentile_sorted(sorted_vals, q)
    return float("nan") if v is None else v


def shift(sorted_vals: list[float], q: float) -> float:
    """How far the q-quantile of `sorted_vals` moves, relative to it, when one value crosses
    it (the larger of the moves to the quantile one rank up and one rank down): small where
    values crowd round it, large where it lies in a gap between bands of values. A workload
    whose requests wait for whole prefills has its TTFTs in such bands, a prefill apart."""
    n = len(sorted_vals)
    if n < 2:
        return 0.0
    at = _quantile(sorted_vals, q)
    if not at:
        return 0.0
    pos = (n - 1) * q
    up = _quantile(sorted_vals, min(pos + 1, n - 1) / (n - 1))
    down = _quantile(sorted_vals, max(pos - 1, 0) / (n - 1))
    return max(up - at, at - down) / at


def summarise(calls: list[Call], wall_s: float) -> dict[str, float]:
    ttfts = sorted(c.ttft for c in calls)
    tpots = [t for c in calls if (t := c.tpot()) is not None]
    gaps = [g for c in calls for g in c.gaps()]
    chunks = [n for c in calls for n in c.chunk_tokens]
    return {
        "ttft_p50_s": _quantile(ttfts, 0.5),
        "ttft_p90_s": _quantile(ttfts, 0.9),
        "tpot_mean_s": statistics.fmean(tpots) if tpots else float("nan"),
        "itl_mean_s": statistics.fmean(gaps) if gaps else float("nan"),
        "output_tok_s": sum(c.tokens for c in calls) / wall_s if wall_s > 0 else float("nan"),
        "tokens_per_chunk": statistics.fmean(chunks) if chunks else 1.0,
        **{key: shift(ttfts, q) for key, q in SHIFTS.values()},
    }


async def run_workload(
    http: aiohttp.ClientSession, target: Target, w: Workload, prompts: list[str], warm: str | None
) -> dict[str, float]:
    if warm:
        await stream_call(http, target, warm, 1)
    queue = list(prompts)
    calls: list[Call] = []

    async def worker() -> None:
        while queue:
            p = queue.pop(0)
            calls.append(await stream_call(http, target, p, w.out))

    t0 = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(w.concurrency)))
    return summarise(calls, time.perf_counter() - t0)


def workload_prompts(w: Workload, maker: PromptMaker) -> tuple[list[str], str | None]:
    if not w.prefix:
        return [maker.prompt(w.prompt) for _ in range(w.requests)], None
    prefix = maker.text(w.prefix)
    return [maker.prompt(w.prompt, prefix) for _ in range(w.requests)], prefix


async def measure(
    target: Target,
    workloads: list[Workload],
    plans: dict[str, tuple[list[str], str | None]],
    say: Callable[[str], None],
    side: str,
) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    async with open_session() as http:
        for w in workloads:
            t0 = time.monotonic()
            prompts, warm = plans[w.name]
            out[w.name] = await run_workload(http, target, w, prompts, warm)
            say(f"fidelity: {side} {w.name} done in {time.monotonic() - t0:.1f} s")
    return out


async def warm_up(
    target: Target,
    workloads: list[Workload],
    maker: PromptMaker,
    seconds: float,
    say: Callable[[str], None],
) -> int:
    """The workloads in turn, with prompts of their own and nothing recorded, until `seconds`
    have passed (the one in progress then finishes): a freshly started vLLM runs its first
    minute or so slower (docs/simulator.md, "Warm-up"). How many workloads ran."""
    t0 = time.monotonic()
    done = 0
    async with open_session() as http:
        while time.monotonic() - t0 < seconds:
            w = workloads[done % len(workloads)]
            say(f"fidelity: warm-up: {w.name} ({time.monotonic() - t0:.0f} of {seconds:g} s)")
            prompts, warm = workload_prompts(w, maker)
            await run_workload(http, target, w, prompts, warm)
            done += 1
    return done


def compare(
    real: dict[str, dict[str, float]],
    sim: dict[str, dict[str, float]],
    spread: dict[str, dict[str, float]] | None = None,
    real_range: dict[str, dict[str, tuple[float, float]]] | None = None,
) -> list[dict[str, Any]]:
    """One row per workload: both sides' figures and the simulator's relative error; with
    several passes, the real server's spread and range between them, and per goal metric a
    verdict: ``goal`` (within it), ``swings`` (outside it, but inside the range the real
    server itself covered between passes, so not told apart from its movement) or ``off``
    (outside both: the profile's own error)."""
    rows = []
    for name, r in real.items():
        s = sim[name]
        errors = {m: (s[m] / r[m] - 1) if r[m] else float("nan") for m in METRICS}
        row: dict[str, Any] = {
            "workload": name,
            "real": r,
            "sim": s,
            "error": errors,
            "within_goal": all(abs(errors[m]) <= GOAL for m in GOAL_METRICS),
        }
        shifts = {
            m: {"real": r[key], "sim": s[key]}
            for m, (key, _) in SHIFTS.items()
            if key in r and key in s
        }
        if shifts:
            row["shift"] = shifts
            row["band_edge"] = [
                m for m, v in shifts.items() if abs(errors[m]) > GOAL and max(v.values()) > GOAL
            ]
        if spread is not None:
            row["real_spread"] = spread[name]
        if real_range is not None:
            lo_hi = real_range[name]
            row["real_range"] = {m: list(lo_hi[m]) for m in METRICS}
            row["verdict"] = {
                m: "goal"
                if abs(errors[m]) <= GOAL
                else "swings"
                if lo_hi[m][0] <= s[m] <= lo_hi[m][1]
                else "off"
                for m in GOAL_METRICS
            }
        rows.append(row)
    return rows


def ranges(
    passes: list[dict[str, dict[str, float]]],
) -> dict[str, dict[str, tuple[float, float]]]:
    """Per workload and metric, the lowest and highest value over the passes."""
    return {
        name: {
            m: (min(p[name][m] for p in passes), max(p[name][m] for p in passes)) for m in METRICS
        }
        for name in passes[0]
    }


def off(rows: list[dict[str, Any]]) -> list[str]:
    """`workload metric` pairs outside the goal and outside every pass of the real server."""
    return [
        f"{r['workload']} {m.removesuffix('_s')}"
        for r in rows
        for m, v in r.get("verdict", {}).items()
        if v == "off"
    ]


def combine(
    passes: list[dict[str, dict[str, float]]],
) -> tuple[dict[str, dict[str, float]], dict[str, dict[str, float]]]:
    """Per workload and metric, the median over passes, and the spread of the passes
    ((max - min) / median): how far the server moved between passes of the same workload.
    The TTFT percentiles' shifts (`shift`) get their median too."""
    median: dict[str, dict[str, float]] = {}
    spread: dict[str, dict[str, float]] = {}
    for name in passes[0]:
        median[name], spread[name] = {}, {}
        for key, _ in SHIFTS.values():
            if all(key in p[name] for p in passes):
                median[name][key] = statistics.median(p[name][key] for p in passes)
        for m in METRICS:
            vals = [p[name][m] for p in passes]
            mid = statistics.median(vals)
            median[name][m] = mid
            spread[name][m] = (max(vals) - min(vals)) / mid if mid else float("nan")
    return median, spread


def pass_pace(passes: list[dict[str, dict[str, float]]]) -> list[float | None]:
    """Per pass, how its goal metrics compared with the same metrics in the other passes
    (1.10: 10 % above their usual): the server's speed from pass to pass."""
    return pace([{(w, m): p[w][m] for w in p for m in GOAL_METRICS} for p in passes])


def median_error(rows: list[dict[str, Any]]) -> float:
    """The median of the goal metrics' errors: far from 0 with most errors of one sign, the
    server ran at another speed than the profile's as a whole (more than a shape error)."""
    errs = [r["error"][m] for r in rows for m in GOAL_METRICS if r["real"][m]]
    return statistics.median(errs) if errs else float("nan")


def band_edges(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Goal TTFT percentiles outside the goal that lie, on either side, where one request
    crossing them moves them by more than the goal: between bands of TTFTs (requests that
    waited for one, two, three prefills), so the error counts requests that waited for one
    prefill more or less rather than measuring how long each waited."""
    return [
        {"workload": r["workload"], "metric": m, **r["shift"][m]}
        for r in rows
        for m in r.get("band_edge", [])
    ]


def unresolved(rows: list[dict[str, Any]]) -> list[str]:
    """`workload metric` pairs whose real values moved between passes by more than the
    goal: there an error of the goal's size cannot be told from the server's own swings."""
    return [
        f"{r['workload']} {m.removesuffix('_s')}"
        for r in rows
        for m in GOAL_METRICS
        if r.get("real_spread", {}).get(m, 0.0) > GOAL
    ]


def summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """What a result says of its rows: whether all are within the goal, and what is not."""
    return {
        "within_goal": all(r["within_goal"] for r in rows),
        "unresolved": unresolved(rows),
        "off": off(rows),
        "band_edges": band_edges(rows),
        "median_error": median_error(rows),
    }


def paces(
    real: list[dict[str, dict[str, float]]], sim: list[dict[str, dict[str, float]]]
) -> dict[str, Any]:
    """Each side's pace by pass (or pooled result), and how far apart each side's lie."""
    real_pace, sim_pace = pass_pace(real), pass_pace(sim)
    return {
        "real": real_pace,
        "sim": sim_pace,
        "real_moved": moved(real_pace),
        "sim_moved": moved(sim_pace),
    }


def _profile_name(profile: str) -> str:
    # A built-in name or a file: results of one profile name it either way.
    return profile.rsplit("/", 1)[-1].removesuffix(".yaml").removesuffix(".yml")


def _side(source: str, rows: list[Any], side: str) -> dict[str, dict[str, float]]:
    """One side's figures of a result read back, per workload; a clear error where one lacks."""
    out: dict[str, dict[str, float]] = {}
    for i, row in enumerate(rows):
        where = f"{source}: rows[{i}]"
        if not isinstance(row, dict) or not isinstance(row.get("workload"), str):
            raise ValueError(f"{where}: no workload")
        try:
            figures = row[side]
            out[row["workload"]] = {m: float(figures[m]) for m in METRICS} | {
                key: float(figures[key]) for key, _ in SHIFTS.values() if key in figures
            }
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"{where}.{side}: missing or not a number: {exc}") from None
    return out


def pool(results: list[tuple[str, dict[str, Any]]]) -> dict[str, Any]:
    """Several fidelity results of one profile (each `(source, result)`: one per server start,
    replica or day) as one comparison: per workload and metric, the median of the results'
    real figures against the median of their simulated ones, each result one vote. A server
    that ran fast or slow in one result moves that result's errors, not the pool's; the range
    the results' real figures covered takes the place of the passes' range in the verdicts,
    and each result's pace against the others is the servers' speed from result to result."""
    if len(results) < 2:
        raise ValueError("pooling needs two or more fidelity results")
    reals: list[dict[str, dict[str, float]]] = []
    sims: list[dict[str, dict[str, float]]] = []
    own: list[list[dict[str, Any]]] = []  # each result's rows, from its figures
    first_source, first = results[0]
    for source, res in results:
        rows = res.get("rows") if isinstance(res, dict) else None
        if not isinstance(rows, list) or not rows:
            raise ValueError(f"{source}: not a result of agentload sim fidelity (no rows)")
        if not isinstance(res.get("profile"), str):
            raise ValueError(f"{source}: not a result of agentload sim fidelity (no profile)")
        if "pooled" in res:
            raise ValueError(f"{source}: already a pool; give the results it pooled")
        if _profile_name(res["profile"]) != _profile_name(first["profile"]):
            raise ValueError(
                f"{source}: profile {res.get('profile')!r}, but {first_source} has "
                f"{first.get('profile')!r}: pool the results of one profile"
            )
        real, sim = _side(source, rows, "real"), _side(source, rows, "sim")
        if reals and list(real) != list(reals[0]):
            raise ValueError(
                f"{source}: workloads {', '.join(real)}, but {first_source} has "
                f"{', '.join(reals[0])}: pool results of the same workloads"
            )
        reals.append(real)
        sims.append(sim)
        own.append(compare(real, sim))
    real_med, spread = combine(reals)
    rows = compare(real_med, combine(sims)[0], spread, ranges(reals))
    pooled = []
    for (source, res), rows_, p in zip(results, own, pass_pace(reals), strict=True):
        errs = [r["error"][m] for r in rows_ for m in GOAL_METRICS]
        pooled.append(
            {
                "source": source,
                "real_url": res.get("real_url"),
                "passes": int(res.get("passes", 1)),
                "within_goal": sum(abs(e) <= GOAL for e in errs),
                "goal_metrics": len(errs),
                "median_error": median_error(rows_),
                "pace": p,
            }
        )
    return {
        "pooled": pooled,
        "profile": first["profile"],
        "passes": sum(q["passes"] for q in pooled),
        "workloads": first.get("workloads", []),
        "rows": rows,
        **summary(rows),
        "pace": paces(reals, sims),
    }


def table(rows: list[dict[str, Any]]) -> str:
    """A markdown table: real value, sim value and error for the main metrics."""
    head = (
        "| workload | TTFT p50 real / sim | TTFT p90 real / sim | TPOT mean real / sim | "
        "ITL mean real / sim | output tok/s real / sim | tokens/chunk real / sim |"
    )
    lines = [head, "|---|---|---|---|---|---|---|"]

    def ms(r: dict[str, Any], m: str) -> str:
        return (
            f"{1e3 * r['real'][m]:.1f} / {1e3 * r['sim'][m]:.1f} ms ({100 * r['error'][m]:+.0f} %)"
        )

    def plain(r: dict[str, Any], m: str, fmt: str) -> str:
        return f"{r['real'][m]:{fmt}} / {r['sim'][m]:{fmt}} ({100 * r['error'][m]:+.0f} %)"

    spreads = all("real_spread" in r for r in rows)
    if spreads:
        lines[0] += " real spread TTFT p50 / p90 / TPOT |"
        lines[1] += "---|"
    for r in rows:
        line = (
            f"| {r['workload']} | {ms(r, 'ttft_p50_s')} | {ms(r, 'ttft_p90_s')} | "
            f"{ms(r, 'tpot_mean_s')} | {ms(r, 'itl_mean_s')} | {plain(r, 'output_tok_s', '.0f')} "
            f"| {plain(r, 'tokens_per_chunk', '.2f')} |"
        )
        if spreads:
            line += " " + " / ".join(f"{100 * r['real_spread'][m]:.0f} %" for m in GOAL_METRICS)
            line += " |"
        lines.append(line)
    return "\n".join(lines)


def load_note() -> dict[str, float]:
    one, five, _ = os.getloadavg()
    return {"load_avg_1m": round(one, 2), "load_avg_5m": round(five, 2)}


async def fidelity(
    real: Target,
    profile: str,
    *,
    tokenizer: str | None = None,
    workloads: list[Workload] | None = None,
    say: Callable[[str], None] = lambda s: None,
    seed: int | None = None,
    passes: int = 1,
    warmup_s: float = 0.0,
) -> dict[str, Any]:
    """Run the workloads on the real server, then on a simulator (its own process) with
    `profile`; the comparison, the load average and the salt that made the prompts.

    With `passes` > 1 every workload runs that many times on both sides (fresh prompts each
    pass), each metric is the median over passes, and each row carries the real server's
    spread between passes. `warmup_s` seconds of the workloads go to the real server first,
    with prompts of their own, recorded nothing."""
    if note := shared_host_note(real.base_url):
        say(f"fidelity: note: {note}")
    chosen = workloads or list(WORKLOADS)
    salt = seed if seed is not None else int(time.time())
    load_before = load_note()
    config = SimConfig(
        port=0, profile=profile, model=real.model, tokenizer=tokenizer, log_interval_s=0
    )
    warmed = 0
    if warmup_s > 0:
        # A salt no pass uses: the passes' prompts stay cold in the real prefix cache.
        warmed = await warm_up(real, chosen, PromptMaker(tokenizer, salt - 1), warmup_s, say)
    sim = SimProcess(config)
    await asyncio.to_thread(sim.start)
    real_passes: list[dict[str, dict[str, float]]] = []
    sim_passes: list[dict[str, dict[str, float]]] = []
    try:
        sim_t = Target(sim.base_url, real.model)
        for k in range(passes):
            # A new salt per pass: nothing of an earlier pass is in the real prefix cache.
            maker = PromptMaker(tokenizer, salt + k)
            plans = {w.name: workload_prompts(w, maker) for w in chosen}
            real_m: dict[str, dict[str, float]] = {}
            sim_m: dict[str, dict[str, float]] = {}
            # Each workload on the real server, then at once on the simulator: a change in
            # the machine's load between workloads does not fall on one side only.
            for w in chosen:
                real_m.update(await measure(real, [w], plans, say, "real"))
                sim_m.update(await measure(sim_t, [w], plans, say, "sim"))
            real_passes.append(real_m)
            sim_passes.append(sim_m)
            if passes > 1:
                say(f"fidelity: pass {k + 1} of {passes} done")
    finally:
        await asyncio.to_thread(sim.stop)
    real_med, spread = combine(real_passes)
    several = passes > 1
    rows = compare(
        real_med,
        combine(sim_passes)[0],
        spread if several else None,
        ranges(real_passes) if several else None,
    )
    extra: dict[str, Any] = {"pace": paces(real_passes, sim_passes)} if several else {}
    return {
        "real_url": real.base_url,
        "profile": profile,
        "salt": salt,
        "passes": passes,
        "warmup": {"seconds": warmup_s, "workloads": warmed},
        "load_before": load_before,
        "load_after": load_note(),
        "workloads": [w.__dict__ for w in chosen],
        "rows": rows,
        **summary(rows),
        **extra,
        # every pass's figures, for a look at the spread beyond its summary
        "per_pass": {"real": real_passes, "sim": sim_passes},
    }
