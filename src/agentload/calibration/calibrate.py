"""`agentload sim calibrate`: probe a server, fit the timing model, write a profile."""

from __future__ import annotations

import asyncio
import datetime as dt
import math
import os
import platform
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import yaml
from prometheus_client.parser import text_string_to_metric_families

from agentload.calibration.fit import (
    PARAMS,
    Fit,
    busy_spans,
    fit,
    fit_busy_lognormal,
    fit_coalescing,
    fit_first_hold,
    fit_idle_wake,
    spans_holding,
)
from agentload.calibration.probe import Probe, ProbePlan, ProbeResult, pooled
from agentload.calibration.prompts import PromptMaker
from agentload.calibration.stream import (
    ProbeError,
    Target,
    get_json,
    get_text,
    model_clock,
    stream_call,
)
from agentload.engines.detect import detect_server
from agentload.http_sessions import open_session
from agentload.sim.api import SimProcess
from agentload.sim.profiles import Profile, load_profile
from agentload.sim.settings import SimConfig
from agentload.stats import moved, pace
from agentload.util import is_loopback_url

Say = Callable[[str], None]

# With fewer CPUs than this, a server on the probe's own machine shares cores with it: vLLM's
# CPU build on 2 CPUs keeps one busy with its model worker and three quarters of the other
# with its engine core while it decodes, and its decode step moved by 30–58 % between server
# starts and minutes while the host itself held within 6–17 % (benchmarks/real_reference.py).
SHARED_HOST_CPUS = 4


def shared_host_note(base_url: str) -> str | None:
    """A note when the server runs on this machine and it has few CPUs, else None."""
    cpus = os.cpu_count() or 1
    if cpus >= SHARED_HOST_CPUS or not is_loopback_url(base_url):
        return None
    return (
        f"the server runs on this machine ({cpus} CPUs) beside this client, and its timings "
        "move with how they share the CPUs (vLLM's CPU build on 2 CPUs: the decode step by "
        "30-58 % between server starts and minutes); see docs/simulator.md, 'Measured fidelity'"
    )


@dataclass
class ServerInfo:
    engine: str
    version: str | None
    model: str
    max_model_len: int | None
    block_size: int | None
    kv_blocks: int | None
    is_sim: bool

    def as_dict(self) -> dict[str, Any]:
        return {
            "engine": self.engine,
            "version": self.version,
            "model": self.model,
            "max_model_len": self.max_model_len,
            "block_size": self.block_size,
            "kv_blocks": self.kv_blocks,
        }


def _cache_config(text: str | None) -> tuple[int | None, int | None]:
    if not text:
        return None, None
    try:
        for fam in text_string_to_metric_families(text):
            if fam.name == "vllm:cache_config_info":
                for s in fam.samples:
                    bs, nb = s.labels.get("block_size"), s.labels.get("num_gpu_blocks")
                    return (
                        int(bs) if bs and bs.isdigit() else None,
                        int(nb) if nb and nb.isdigit() else None,
                    )
    except ValueError:
        return None, None
    return None, None


async def server_info(http: aiohttp.ClientSession, target: Target) -> ServerInfo:
    """What the server says about itself: engine and version, the model, its KV cache."""
    models = await get_json(http, f"{target.base_url.rstrip('/')}/models", target)
    if models is None:
        raise ProbeError(
            f"{target.base_url}/models did not answer: is an OpenAI-compatible server there?"
        )
    entries = [m for m in models.get("data", []) if isinstance(m, dict)]
    names = [str(m.get("id")) for m in entries]
    if target.model not in names:
        served = ", ".join(names) or "nothing"
        raise ValueError(
            f"model {target.model!r} is not served at {target.base_url} (it serves: {served})"
        )
    entry = entries[names.index(target.model)]
    auth = {k: v for k, v in target.headers().items() if k == "Authorization"}
    ident = await detect_server(
        http,
        target.root,
        owned_by=[str(m.get("owned_by") or "") for m in entries],
        timeout_s=min(10.0, target.timeout_s),
        headers=auth,
    )
    metrics = ident.metrics.body.decode("utf-8", "replace") if ident.metrics_ok else None
    bs, nb = _cache_config(metrics)
    mml = entry.get("max_model_len")
    is_sim = ident.engine == "agentload-sim"
    engine = ident.engine if ident.engine != "other" else str(entry.get("owned_by") or "unknown")
    return ServerInfo(
        engine=engine,
        version=ident.version,
        model=target.model,
        max_model_len=int(mml) if isinstance(mml, int) else None,
        block_size=bs,
        kv_blocks=nb,
        is_sim=is_sim,
    )


def _iteration_hist(text: str | None) -> dict[float, float]:
    """Cumulative bucket counts of vllm:iteration_tokens_total (tokens per engine step)."""
    out: dict[float, float] = {}
    if not text:
        return out
    try:
        for fam in text_string_to_metric_families(text):
            if fam.name == "vllm:iteration_tokens_total":
                for s in fam.samples:
                    if s.name.endswith("_bucket"):
                        le = float(s.labels["le"])
                        out[le] = out.get(le, 0.0) + float(s.value)
    except (ValueError, KeyError):
        return {}
    return out


async def detect_budget(
    http: aiohttp.ClientSession, target: Target, prompts: PromptMaker, max_len: int
) -> int | None:
    """The engine's prefill chunk (max_num_batched_tokens), from how many observations one
    long cold prompt adds to vllm:iteration_tokens_total; None when that cannot tell.

    vLLM records that histogram when a step returns output, not for every step: a prompt
    prefilled in several chunks still adds one observation, so one observation says nothing
    about the chunk (vLLM's CPU build prefills 2,048 tokens per step by default, and its
    /metrics still shows one step for an 8,192-token prompt). Several observations (the
    simulator records every step) give the chunk."""
    url = f"{target.root}/metrics"
    before = _iteration_hist(await get_text(http, url, target))
    p = min(8192, max_len - 16)
    call = await stream_call(http, target, prompts.text(p), 1)
    after = _iteration_hist(await get_text(http, url, target))
    if not before or not after:
        return None
    steps = after.get(math.inf, 0) - before.get(math.inf, 0)
    grown = [le for le in sorted(after) if after[le] - before.get(le, 0) > 0]
    if not grown or steps < 2:
        return None
    chunk = math.ceil(call.prompt_tokens / steps / 16) * 16
    return int(min(chunk, grown[-1])) if math.isfinite(grown[-1]) else chunk


def _first_chunk_note(streams: list[tuple[int, int]]) -> dict[str, Any]:
    """How many of the probe's streams came with a held first chunk, and how long it was."""
    held = [k for k, _ in streams if k > 1]
    return {
        "streams": len(streams),
        "held": len(held),
        "mean_tokens_when_held": round(sum(held) / len(held), 2) if held else None,
    }


def _idle_note(diffs: list[float]) -> dict[str, Any]:
    """The idle pattern's pairs: how much later an engine idle for a while gave its first
    token than one sent right after another request."""
    return {"pairs": len(diffs), "ttft_difference_s": [round(d, 6) for d in diffs]}


def _busy_note(
    bounds: list[tuple[float, float, int]], frontend_token_s: float, busy: float, idle: float
) -> dict[str, Any]:
    """The busy-start pattern: how many arrivals bounded the busy engine's front end, how
    many of those bounds agree with `busy`, the value most agree on (both without the
    per-token part), and that value beside the idle one."""
    return {
        "arrivals": len(bounds),
        "consistent": spans_holding(busy_spans(bounds, frontend_token_s), busy),
        "mode_s": round(busy, 6),
        "request_overhead_idle_s": round(idle, 6),
    }


# Rounds of the probe further apart than this (the fidelity goal's size) get a note: a profile
# fitted to their median cannot be checked against that server more closely.
PACE_NOTE = 0.10


def _pace_note(paces: list[float | None]) -> dict[str, Any]:
    """Each probe round's pace against the others (1.10: its latencies 10 % above their
    usual), and how far apart the rounds lie."""
    m = moved(paces)
    return {
        "rounds": [None if p is None else round(p, 3) for p in paces],
        "moved": None if m is None else round(m, 3),
    }


def pace_text(paces: list[float | None]) -> str:
    """`1.04 0.97 1.00 (apart by 7 %)`: rounds' or passes' paces for a person."""
    m = moved(paces)
    each = " ".join("?" if p is None else f"{p:.2f}" for p in paces)
    return each + ("" if m is None else f" (apart by {100 * m:.0f} %)")


def pace_warning(paces: list[float | None]) -> str | None:
    """A line for the user when the server ran at different speeds in different rounds."""
    m = moved(paces)
    if m is None or m <= PACE_NOTE:
        return None
    line = (
        f"the server's latencies moved between the probe's rounds (each round against the "
        f"others: {pace_text(paces)}); the profile fits their median, so a fidelity check "
        f"against this server cannot be expected to come closer than that"
    )
    if _first_slowest(paces):
        line += "; the first round was the slowest: a longer --warmup may help"
    return line


def _first_slowest(paces: list[float | None]) -> bool:
    known = [p for p in paces if p is not None]
    return len(known) > 2 and paces[0] is not None and paces[0] == max(known)


def first_pass_hint(paces: list[float | None], warmup_s: float | None) -> str | None:
    """For `sim fidelity`: a line when the real server's first pass was its slowest by more
    than the goal's size, as a server that has not warmed up runs."""
    m = moved(paces)
    if m is None or m <= PACE_NOTE or not _first_slowest(paces):
        return None
    now = f" (this run had {warmup_s:g} s)" if warmup_s else ""
    return f"the real server's first pass was its slowest: --warmup 60{now} may steady it"


def _round(x: float) -> float:
    return float(f"{x:.4g}")


# Short requests, one after another, to time the simulator's own serving overhead (the first
# two warm its process and the connection and are not counted).
OVERHEAD_REQUESTS = 16
OVERHEAD_PROMPT = 64


async def short_request_ttfts(
    profile: Profile, model: str, tokenizer: str | None, prompts: PromptMaker
) -> list[tuple[float, float]]:
    """(wall-clock TTFT as this client saw it, model TTFT) of short requests, one after
    another, to a simulator with `profile` in its own process."""
    config = SimConfig(port=0, profile=profile, model=model, tokenizer=tokenizer, log_interval_s=0)
    sim = SimProcess(config)
    await asyncio.to_thread(sim.start)
    try:
        target = Target(sim.base_url, model, model_times=True)
        out = []
        async with open_session() as http:
            for _ in range(OVERHEAD_REQUESTS + 2):
                wall = await stream_call(http, target, prompts.prompt(OVERHEAD_PROMPT), 2)
                out.append((wall.ttft, (await model_clock(http, target, wall)).ttft))
        return out[2:]
    finally:
        await asyncio.to_thread(sim.stop)


async def serving_overhead(
    profile: Profile, model: str, tokenizer: str | None, prompts: PromptMaker
) -> list[float]:
    """How much later than its own model a simulator with `profile` gives this client a short
    request's first token, per request: the client's and the loopback's share, and the
    simulator's HTTP path. A probe's wall-clock TTFTs hold the same client's and loopback's
    share of the real server, which the fit puts into `request_overhead_s`; a simulator
    serving that profile would add it a second time."""
    pairs = await short_request_ttfts(profile, model, tokenizer, prompts)
    return [wall - model_ttft for wall, model_ttft in pairs]


def without_overhead(profile: Profile, diffs: list[float]) -> Profile:
    """The profile with the simulator's measured serving overhead taken off its front end,
    and a note of it in the calibration block."""
    over = statistics.median(diffs)
    fitted = profile.request_overhead_s
    sigma = profile.request_overhead_sigma
    cal = dict(profile.calibration or {})
    cal["serving_overhead"] = {
        "requests": len(diffs),
        "median_s": round(over, 6),
        "min_s": round(min(diffs), 6),
        "max_s": round(max(diffs), 6),
        "request_overhead_fitted_s": fitted,
        **({"request_overhead_sigma_fitted": sigma} if sigma > 0 else {}),
    }
    left = max(0.0, fitted - over)
    return profile.model_copy(
        update={
            "request_overhead_s": _round(left),
            "request_overhead_sigma": spread_without(fitted, sigma, over),
            "calibration": cal,
        }
    )


def spread_without(median: float, sigma: float, over: float) -> float:
    """The spread of the front end less `over`, a part of it that does not vary (the
    simulator's own serving overhead), such that the simulator's whole front end keeps the
    fitted median and the fitted value one sigma above it: what varies is a smaller share."""
    if sigma <= 0 or median <= over:
        return sigma
    return round(math.log((median * math.exp(sigma) - over) / (median - over)), 3)


@dataclass
class Calibration:
    profile: Profile
    fit: Fit
    probe: ProbeResult
    info: ServerInfo
    seconds: float


def _pooled_from(extra: dict[str, Any]) -> str:
    n = len(extra.get("pooled", ()))
    return f"{n} probes pooled, " if n > 1 else ""


def build_profile(
    name: str,
    base: Profile,
    f: Fit,
    probe: ProbeResult,
    info: ServerInfo,
    extra: dict[str, Any],
) -> Profile:
    p0, p1 = fit_coalescing(list(probe.held.items()))
    first_p, first_run = fit_first_hold(probe.first_chunks)
    fields = base.model_dump()
    fields.update({k: _round(v) for k, v in f.params.items()})
    # The fitted front end is an idle engine's (the prefill pattern's requests each come to
    # an idle engine); a busy engine's arrivals reached its steps sooner on vLLM's CPU build.
    # The difference is paid by the first step after idle instead (idle_wake_s), so an idle
    # engine's TTFT stays as fitted.
    # The busy front end also varies from request to request: the profile carries the median
    # and spread of the lognormal that fits the busy-start bounds best.
    busy_note: dict[str, Any] = {}
    fields["idle_wake_s"] = 0.0
    fields["request_overhead_sigma"] = 0.0
    if probe.busy:
        idle_over = f.params["request_overhead_s"]
        token = f.params["frontend_token_s"]
        busy_over, sigma, mode = fit_busy_lognormal(probe.busy, token)
        busy_note = _busy_note(probe.busy, token, mode, idle_over)
        busy_note.update(request_overhead_busy_s=round(busy_over, 6), sigma=sigma)
        if 0.0 <= busy_over < idle_over:
            fields["request_overhead_s"] = _round(busy_over)
            fields["request_overhead_sigma"] = sigma
            fields["idle_wake_s"] = _round(idle_over - busy_over)
    if probe.idle:
        pause = extra["probe"]["idle_pause_s"]
        fields["idle_wake_per_s"] = _round(fit_idle_wake(probe.idle, pause))
        fields["idle_wake_cap_s"] = pause
    fields.update(
        name=name,
        description=f"Calibrated against {info.engine} {info.version or ''} serving {info.model}"
        f" ({_pooled_from(extra)}{dt.date.today().isoformat()}).".replace("  ", " "),
        coalesce_p=p0,
        coalesce_per_seq=p1,
        coalesce_first_p=first_p,
        coalesce_first_run=first_run,
        calibration={
            "server": info.as_dict(),
            **extra,
            "fit": f.quality(),
            "chunking": {str(b): round(m, 3) for b, m in probe.chunking.items()},
            "held": {str(b): round(h, 4) for b, h in probe.held.items()},
            "first_chunk": _first_chunk_note(probe.first_chunks),
            **({"idle_start": _idle_note(probe.idle)} if probe.idle else {}),
            **({"busy_start": busy_note} if busy_note else {}),
            **({"pace": _pace_note(probe.pace)} if probe.pace else {}),
            "observations": f.table(),
        },
    )
    for key, value in (
        ("block_size", info.block_size),
        ("kv_blocks", info.kv_blocks),
        ("max_model_len", info.max_model_len),
    ):
        if value:
            fields[key] = value
    return Profile.model_validate(fields)


async def calibrate(
    target: Target,
    *,
    name: str,
    base: str = "tiny-cpu",
    tokenizer: str | None = None,
    budget: int | None = None,
    max_num_seqs: int | None = None,
    plan: ProbePlan | None = None,
    wall_clock: bool = False,
    say: Say = lambda s: None,
    seed: int | None = None,
    save_probe: Path | None = None,
) -> Calibration:
    """Probe the server at `target`, fit, and return the profile (not written); the probe's
    measurements go to `save_probe` (for `pool`) before the fit."""
    t_start = time.monotonic()
    base_p = load_profile(base)
    # A fresh salt by default: a real server's prefix cache may hold an earlier probe's prompts.
    prompts = PromptMaker(tokenizer, seed if seed is not None else time.time_ns())
    load_before = os.getloadavg()
    async with open_session() as http:
        info = await _meet_server(http, target, wall_clock, say)
        plan = await _probe_plan(http, target, info, base_p, prompts, plan, budget, say)
        probe = await _run_probe(http, target, plan, prompts, say)
    extra = _probe_extra(
        target,
        plan,
        probe.result,
        t_start=t_start,
        max_num_seqs=max_num_seqs,
        tokenizer=tokenizer,
        load=(load_before, os.getloadavg()),
    )
    if save_probe is not None:
        _keep_probe(save_probe, info, extra, probe.result, say)
    if warning := pace_warning(probe.result.pace):
        say(f"calibrate: note: {warning}")
    return await _fitted(
        name,
        base_p,
        probe.result,
        info,
        extra,
        model=info.model or target.model,
        tokenizer=tokenizer,
        prompts=prompts,
        max_num_seqs=max_num_seqs,
        say=say,
        t_start=t_start,
    )


async def _meet_server(
    http: aiohttp.ClientSession, target: Target, wall_clock: bool, say: Say
) -> ServerInfo:
    """What serves at `target`, and which clock the probe times it on (a simulator's model
    clock unless `wall_clock`)."""
    info = await server_info(http, target)
    target.model_times = info.is_sim and not wall_clock
    say(
        f"calibrate: {info.engine} {info.version or '?'} at {target.base_url}, model "
        f"{info.model}; timing on the {'model' if target.model_times else 'wall'} clock"
    )
    if not target.model_times and (note := shared_host_note(target.base_url)):
        say(f"calibrate: note: {note}")
    return info


async def _probe_plan(
    http: aiohttp.ClientSession,
    target: Target,
    info: ServerInfo,
    base_p: Profile,
    prompts: PromptMaker,
    plan: ProbePlan | None,
    budget: int | None,
    say: Say,
) -> ProbePlan:
    """The probe's plan fitted to the server: its token budget per step (detected unless
    given), block size and context length."""
    plan = plan or ProbePlan()
    if budget is None:
        budget = await detect_budget(
            http, target, prompts, info.max_model_len or base_p.max_model_len
        )
        if budget:
            say(
                f"calibrate: the engine prefills {budget} tokens per step (from "
                "vllm:iteration_tokens_total; --max-num-batched-tokens overrides)"
            )
        else:
            say(
                "calibrate: the server does not show its prefill chunk; assuming "
                f"{base_p.max_num_batched_tokens} tokens per step (the base profile's): give "
                "--max-num-batched-tokens (vLLM's CPU build defaults to 2048)"
            )
    plan.budget = budget or base_p.max_num_batched_tokens
    plan.block_size = info.block_size or base_p.block_size
    plan.max_model_len = info.max_model_len or base_p.max_model_len
    if info.is_sim:
        plan.warmup_s = 0.0  # a simulator runs at its speed from the first request
    return plan.fitted()


async def _run_probe(
    http: aiohttp.ClientSession, target: Target, plan: ProbePlan, prompts: PromptMaker, say: Say
) -> Probe:
    """A pilot request to size the probe, then the probe itself."""
    probe = Probe(http, target, plan, prompts, progress=_progress(say))
    pilot = await probe.pilot()
    steps = probe.estimate(pilot)
    est = plan.repeats * sum(e for _, e, _ in steps) + plan.warmup_s
    say(
        f"calibrate: pilot TTFT {1e3 * pilot.ttft_s:.0f} ms for {pilot.prompt_tokens} "
        f"tokens, {1e3 * pilot.tpot_s:.1f} ms per token; the probe takes about "
        f"{_dur(est)} ({plan.repeats} rounds of {len(steps)} steps"
        + (f", after a {_dur(plan.warmup_s)} warm-up)" if plan.warmup_s else ")")
    )
    await probe.run(steps)
    return probe


def _probe_extra(
    target: Target,
    plan: ProbePlan,
    result: ProbeResult,
    *,
    t_start: float,
    max_num_seqs: int | None,
    tokenizer: str | None,
    load: tuple[tuple[float, float, float], tuple[float, float, float]],
) -> dict[str, Any]:
    """The profile's record of how it was probed: the clock, the plan, the host and its
    load average before and after."""
    load_before, load_after = load
    return {
        "created": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "clock": "model" if target.model_times else "wall",
        "probe": {
            "requests": result.requests,
            "seconds": round(time.monotonic() - t_start, 1),
            "max_num_batched_tokens": plan.budget,
            "max_num_seqs": max_num_seqs,
            "prompt_lengths": plan.prompt_lengths,
            "decode_batches": plan.decode_batches,
            "decode_contexts": plan.decode_contexts,
            "distinct_batches": plan.distinct_batches,
            "distinct_contexts": plan.distinct_contexts,
            "first_chunk_streams": plan.first_chunk_streams,
            "idle_pause_s": plan.idle_pause_s,
            "busy_streams": plan.busy_streams,
            "busy_arrivals": plan.busy_arrivals,
            "busy_contexts": plan.busy_contexts,
            "repeats": plan.repeats,
            "warmup_s": plan.warmup_s,
            "tokenizer": Path(tokenizer).name if tokenizer else None,
        },
        "host": {
            "machine": platform.machine(),
            "cpus": os.cpu_count(),
            "server_on_this_host": is_loopback_url(target.base_url),
            "load_avg_1m_before": round(load_before[0], 2),
            "load_avg_1m_after": round(load_after[0], 2),
        },
    }


def _keep_probe(
    path: Path, info: ServerInfo, extra: dict[str, Any], result: ProbeResult, say: Say
) -> None:
    """Keep the probe's measurements before anything can go wrong in the fit."""
    try:
        write_probe(path, info, extra, result)
    except OSError as exc:
        say(f"calibrate: warning: could not keep the probe's measurements: {exc}")
    else:
        say(f"calibrate: kept the probe's measurements in {path}")


async def _fitted(
    name: str,
    base_p: Profile,
    result: ProbeResult,
    info: ServerInfo,
    extra: dict[str, Any],
    *,
    model: str,
    tokenizer: str | None,
    prompts: PromptMaker,
    max_num_seqs: int | None,
    say: Say,
    t_start: float,
) -> Calibration:
    """Fit the probe's observations and finish the profile: a probe timed on the wall clock
    (a real server) loses the simulator's own serving overhead from its front end."""
    f = fit(result.obs)
    profile = build_profile(name, base_p, f, result, info, extra)
    if extra["clock"] == "wall":
        say(
            f"calibrate: timing this client against a simulator with the fitted profile "
            f"({OVERHEAD_REQUESTS} short requests)"
        )
        try:
            diffs = await serving_overhead(profile, model, tokenizer, prompts)
        except (ProbeError, OSError, RuntimeError, TimeoutError) as exc:
            # The probe's minutes are not thrown away for this last, small correction.
            say(
                f"calibrate: warning: could not time a simulator ({exc}); request_overhead_s "
                "keeps this client's share (about a millisecond)"
            )
        else:
            profile = without_overhead(profile, diffs)
    if max_num_seqs:
        profile = profile.model_copy(update={"max_num_seqs": max_num_seqs})
    budget = extra["probe"]["max_num_batched_tokens"]
    profile = profile.model_copy(update={"max_num_batched_tokens": budget})
    return Calibration(profile, f, result, info, time.monotonic() - t_start)


# The probe's measurements as `sim calibrate` keeps them beside the profile, for `--pool`.
PROBE_FORMAT = "agentload-probe/1"


def probe_path(profile_path: Path) -> Path:
    """Where `sim calibrate --out FILE` keeps its probe's measurements."""
    return profile_path.with_name(profile_path.stem + ".probe.json")


def write_probe(path: Path, info: ServerInfo, extra: dict[str, Any], result: ProbeResult) -> None:
    record = {
        "format": PROBE_FORMAT,
        "server": {**info.as_dict(), "is_sim": info.is_sim},
        "calibration": extra,
        "result": result.as_dict(),
    }
    path.write_bytes(orjson.dumps(record))


@dataclass
class SavedProbe:
    path: Path
    info: ServerInfo
    extra: dict[str, Any]
    result: ProbeResult


def read_probe(path: Path) -> SavedProbe:
    """A probe `write_probe` kept; a ValueError naming the file for anything else."""
    try:
        record = orjson.loads(path.read_bytes())
    except OSError as exc:
        raise ValueError(f"{path}: cannot read: {exc.strerror}") from None
    except orjson.JSONDecodeError as exc:
        raise ValueError(f"{path}: not JSON ({exc})") from None
    if not isinstance(record, dict) or record.get("format") != PROBE_FORMAT:
        raise ValueError(
            f'{path}: not a probe kept by `agentload sim calibrate` (no "format": '
            f'"{PROBE_FORMAT}"); it keeps one beside each profile it writes, as NAME.probe.json'
        )
    try:
        server = record["server"]
        info = ServerInfo(
            engine=str(server["engine"]),
            version=server.get("version"),
            model=str(server["model"]),
            max_model_len=server.get("max_model_len"),
            block_size=server.get("block_size"),
            kv_blocks=server.get("kv_blocks"),
            is_sim=bool(server.get("is_sim")),
        )
        extra = dict(record["calibration"])
        for key in ("clock", "probe"):
            if key not in extra:
                raise KeyError(f"calibration.{key}")
        for key in ("max_num_batched_tokens", "idle_pause_s"):
            if key not in extra["probe"]:
                raise KeyError(f"calibration.probe.{key}")
        result = ProbeResult.from_dict(record["result"])
    except (KeyError, TypeError, ValueError, IndexError) as exc:
        raise ValueError(f"{path}: a probe with a missing or malformed field ({exc!r})") from None
    return SavedProbe(path, info, extra, result)


async def pool(
    paths: list[Path],
    *,
    name: str,
    base: str = "tiny-cpu",
    tokenizer: str | None = None,
    max_num_seqs: int | None = None,
    say: Say = lambda s: None,
) -> Calibration:
    """Fit one profile to probes that `sim calibrate` kept (several server starts, replicas
    or days of one engine): every pattern's samples together, so each observation is the
    median over all of them. One probe is a refit."""
    t_start = time.monotonic()
    probes = [read_probe(p) for p in paths]
    first = probes[0]
    _check_poolable(probes, say)
    result = pooled([p.result for p in probes])
    each = pace([{(o.kind, o.label): o.y for o in p.result.obs} for p in probes])
    say(
        f"calibrate: pooled {len(probes)} probe{'s' if len(probes) > 1 else ''}, "
        f"{result.requests} requests in "
        f"{result.rounds} rounds"
        + (f"; each probe against the others: {pace_text(each)}" if len(probes) > 1 else "")
    )
    if len(probes) > 1 and (m := moved(each)) is not None and m > PACE_NOTE:
        say(
            "calibrate: note: the server ran at different speeds in different probes; the "
            "profile fits their median, the server as it usually runs"
        )
    extra = _pooled_extra(probes, result, each)
    base_p = load_profile(base)
    prompts = PromptMaker(tokenizer, time.time_ns())
    return await _fitted(
        name,
        base_p,
        result,
        first.info,
        extra,
        model=first.info.model,
        tokenizer=tokenizer,
        prompts=prompts,
        # the sequence cap the first probe's calibration was given, unless given again
        max_num_seqs=max_num_seqs or first.extra["probe"].get("max_num_seqs"),
        say=say,
        t_start=t_start,
    )


def _check_poolable(probes: list[SavedProbe], say: Say) -> None:
    """A ValueError for probes whose observations do not line up; a note for probes of
    different servers (which pool fine)."""
    if len({p.extra["clock"] for p in probes}) > 1:
        raise ValueError(
            "--pool: some probes were timed on a simulator's model clock and some on the wall "
            "clock; pool like with like"
        )
    # Patterns one probe has and another lacks pool fine; a prefill's features depend on the
    # token budget, so one label would stand for different steps.
    budgets = {str(p.extra["probe"].get("max_num_batched_tokens")) for p in probes}
    if len(budgets) > 1:
        raise ValueError(
            f"--pool: the probes ran with different token budgets per step "
            f"({', '.join(sorted(budgets))}); their prefill observations do not line up"
        )
    if len({p.info.block_size for p in probes}) > 1:
        raise ValueError("--pool: the probes' servers had different KV block sizes")
    servers = {(p.info.engine, p.info.version, p.info.model) for p in probes}
    if len(servers) > 1:
        listed = "; ".join(f"{e} {v or '?'} serving {m}" for e, v, m in sorted(servers, key=str))
        say(f"calibrate: note: the probes came from different servers ({listed})")


def _pooled_extra(
    probes: list[SavedProbe], result: ProbeResult, each: list[float | None]
) -> dict[str, Any]:
    """The pooled profile's record of its probes: the first one's plan and host, with the
    pooled counts, and each probe with its pace against the others."""
    first = probes[0]
    return {
        "created": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "clock": first.extra["clock"],
        "probe": {
            **first.extra["probe"],
            "requests": result.requests,
            "seconds": round(sum(float(p.extra["probe"].get("seconds", 0)) for p in probes), 1),
            "repeats": result.rounds,
        },
        "host": first.extra.get("host", {}),
        "pooled": [
            {
                "file": p.path.name,
                "created": p.extra.get("created"),
                "server": f"{p.info.engine} {p.info.version or '?'} serving {p.info.model}",
                "requests": p.result.requests,
                "rounds": p.result.rounds,
                "pace": None if (pc := each[i]) is None else round(pc, 3),
                "host": p.extra.get("host", {}),
            }
            for i, p in enumerate(probes)
        ],
    }


def _dur(s: float) -> str:
    return f"{s:.0f} s" if s < 120 else f"{s / 60:.1f} min"


def _progress(say: Say) -> Callable[[str, float, float, float], None]:
    def report(phase: str, elapsed: float, done: float, total: float) -> None:
        if phase == "done":
            say(f"calibrate: probe done in {_dur(elapsed)}")
            return
        rate = elapsed / done if done > 0 else 1.0
        left = max(0.0, (total - done) * rate)
        pct = 100 * done / total if total else 100
        say(f"calibrate: [{pct:3.0f}%] {phase}; {_dur(elapsed)} elapsed, about {_dur(left)} left")

    return report


def profile_yaml(profile: Profile, command: str | None = None) -> str:
    """The profile as YAML, with a header saying where it came from."""
    data = profile.model_dump(exclude_none=True)
    head = [f"# agentload simulator profile: {profile.name}", f"# {profile.description}"]
    if command:
        head.append(f"# reproduce: {command}")
    body = yaml.safe_dump(data, sort_keys=False, width=100)
    return "\n".join(head) + "\n" + body


def summary_lines(c: Calibration) -> list[str]:
    p = c.profile
    lines = [f"{'parameter':<24} {'value':>12}"]
    over = (p.calibration or {}).get("serving_overhead")
    for k in PARAMS:
        lines.append(f"{k:<24} {getattr(p, k):>12.4g}")
        if k == "request_overhead_s" and over:
            lines.append(
                f"  (fitted {1e3 * over['request_overhead_fitted_s']:.2f} ms, less "
                f"{1e3 * over['median_s']:.2f} ms the simulator adds by serving it)"
            )
    lines.append(f"{'request_overhead_sigma':<24} {p.request_overhead_sigma:>12.4g}")
    lines.append(f"{'idle_wake_s':<24} {p.idle_wake_s:>12.4g}")
    lines.append(f"{'idle_wake_per_s':<24} {p.idle_wake_per_s:>12.4g}")
    lines.append(f"{'coalesce_p':<24} {p.coalesce_p:>12.4g}")
    lines.append(f"{'coalesce_per_seq':<24} {p.coalesce_per_seq:>12.4g}")
    lines.append(f"{'coalesce_first_p':<24} {p.coalesce_first_p:>12.4g}")
    lines.append(f"{'coalesce_first_run':<24} {p.coalesce_first_run:>12.4g}")
    q = c.fit.quality()
    for kind, v in q.items():
        med, worst = 100 * (v["median_abs_error"] or 0), 100 * (v["max_abs_error"] or 0)
        lines.append(
            f"fit {kind:<12} {v['observations']:>3} observations, median error "
            f"{med:.1f} %, worst {worst:.1f} %"
        )
    if pace_ := (p.calibration or {}).get("pace"):
        lines.append(f"pace of the probe's rounds {pace_text(pace_['rounds'])}")
    if len(probes := (p.calibration or {}).get("pooled", [])) > 1:
        lines.append(f"pace of the pooled probes {pace_text([q['pace'] for q in probes])}")
    return lines
