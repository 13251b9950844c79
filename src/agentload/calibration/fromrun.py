"""Calibrate from a finished run's calls (``agentload sim calibrate --from RESULTS_DIR``).

No extra load on the server: every successful streamed call gives a TTFT observation (prompt and
cached tokens from the server's usage) and a decode observation (its TPOT, with the number of
calls decoding beside it, counted from the calls' own start, first-token and end times).
This is rougher than a probe, which controls what runs beside each request:

* TTFT rows come from calls that ran alone from their start to their first token (when fewer
  than three did, from the calls with the fewest beside them, ignoring the others);
* a decode row's batch is the mean number of calls decoding during its decode, and the context
  of the others is taken as the same as its own.

Rows are grouped (prompt length and cache state for TTFT, batch size for decode) and each group
is summarised by its median. When the run scraped the server's metrics, the server's own mean
TTFT, queue time and end-to-end latency over the run are recorded beside the client's mean TTFT
(their difference is the network and front end the client sees).
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentload.calibration.calibrate import Calibration, ServerInfo, build_profile
from agentload.calibration.fit import PARAMS, Obs, decode_features, fit, ttft_features
from agentload.calibration.probe import ProbeResult
from agentload.results.jsonl import read_jsonl, warn_bad
from agentload.sim.profiles import load_profile


@dataclass
class RunCall:
    start: int
    first: int
    end: int
    ttft: float
    tpot: float | None
    prompt: int
    cached: int
    completion: int
    chunks: int


def read_calls(path: Path) -> list[RunCall]:
    """Successful streamed calls with timings and usage. A torn last line (a run killed while
    writing) is skipped with a warning; any other unreadable line is an error naming it."""
    out: list[RunCall] = []
    need = ("start_ns", "first_token_ns", "end_ns", "ttft_s", "prompt_tokens")
    read = read_jsonl(path, warn=False)
    for line, reason in read.bad:
        if reason != "torn last line":
            raise ValueError(f"{path}:{line}: not JSON: {reason}")
    warn_bad(read)
    for d in read.records:
        if d.get("status", "ok") != "ok" or not d.get("stream", True):
            continue
        if any(d.get(k) is None for k in need) or d.get("tokens_estimated"):
            continue
        out.append(
            RunCall(
                start=int(d["start_ns"]),
                first=int(d["first_token_ns"]),
                end=int(d["end_ns"]),
                ttft=float(d["ttft_s"]),
                tpot=float(d["tpot_s"]) if d.get("tpot_s") else None,
                prompt=int(d["prompt_tokens"]),
                cached=int(d.get("cached_tokens") or 0),
                completion=int(d.get("completion_tokens") or 0),
                chunks=int(d.get("token_chunks") or 0),
            )
        )
    return out


def _overlap(a0: int, a1: int, b0: int, b1: int) -> int:
    return max(0, min(a1, b1) - max(a0, b0))


def observations(calls: list[RunCall], budget: int) -> tuple[list[Obs], dict[int, float]]:
    """Grouped TTFT and decode observations, and tokens per chunk by batch size."""
    calls = sorted(calls, key=lambda c: c.start)
    beside = [
        sum(1 for o in calls if o is not c and _overlap(c.start, c.first, o.start, o.end) > 0)
        for c in calls
    ]
    alone = [c for c, k in zip(calls, beside, strict=True) if k == 0]
    if len(alone) < 3:
        fewest = min(beside, default=0)
        alone = [c for c, k in zip(calls, beside, strict=True) if k == fewest]
    ttft_groups: dict[tuple[int, bool], list[RunCall]] = defaultdict(list)
    for c in alone:
        ttft_groups[(round(math.log2(max(c.prompt, 1)) * 2), c.cached > 0)].append(c)
    obs: list[Obs] = []
    for (_, warm), group in sorted(ttft_groups.items()):
        mid = sorted(group, key=lambda c: c.ttft)[len(group) // 2]
        feats = ttft_features(mid.prompt, mid.cached, budget)
        label = f"{'cached' if warm else 'cold'} {mid.prompt} (run)"
        obs.append(Obs("ttft", label, mid.ttft, feats, len(group)))
    decode_groups: dict[int, list[tuple[float, float, float, float]]] = defaultdict(list)
    chunking: dict[int, list[float]] = defaultdict(list)
    for c in calls:
        if c.tpot is None or c.completion < 8 or c.end <= c.first:
            continue
        span = c.end - c.first
        others = sum(_overlap(c.first, c.end, o.first, o.end) for o in calls if o is not c)
        b = 1 + others / span
        own = c.prompt + c.completion / 2
        decode_groups[round(b)].append((c.tpot, b, b * own, own))
        if c.chunks > 1:
            chunking[round(b)].append((c.completion - 1) / (c.chunks - 1))
    for key, rows in sorted(decode_groups.items()):
        y = statistics.median(r[0] for r in rows)
        b = statistics.fmean(r[1] for r in rows)
        ctx = statistics.fmean(r[2] for r in rows)
        longest = statistics.fmean(r[3] for r in rows)
        feats = decode_features(round(b), ctx, longest)
        obs.append(Obs("decode", f"batch ~{key} (run)", y, feats, len(rows)))
    return obs, {b: statistics.fmean(v) for b, v in sorted(chunking.items())}


def server_side(path: Path) -> dict[str, float]:
    """Mean TTFT and queue time as the server measured them over the run (first and last
    scrape of server_metrics.jsonl), for comparison with the client's figures."""
    if not path.is_file():
        return {}
    rows = read_jsonl(path).records
    out: dict[str, float] = {}
    for name in ("ttft", "queue", "e2e"):
        have = [
            r
            for r in rows
            if r.get(f"{name}_sum") is not None and r.get(f"{name}_count") is not None
        ]
        if len(have) < 2:
            continue
        n = have[-1][f"{name}_count"] - have[0][f"{name}_count"]
        if n > 0:
            out[f"server_mean_{name}_s"] = round(
                (have[-1][f"{name}_sum"] - have[0][f"{name}_sum"]) / n, 6
            )
    return out


def calibrate_from_run(
    results: Path,
    *,
    name: str,
    base: str = "tiny-cpu",
    budget: int | None = None,
    say: Callable[[str], None] = lambda s: None,
) -> Calibration:
    path = results / "calls.jsonl"
    if not path.is_file():
        raise ValueError(f"--from: {results} has no calls.jsonl (not a results directory?)")
    base_p = load_profile(base)
    calls = read_calls(path)
    if len(calls) < 5:
        raise ValueError(
            f"{path}: only {len(calls)} successful streamed calls with timings and usage; "
            "a fit needs more"
        )
    budget = budget or base_p.max_num_batched_tokens
    obs, chunking = observations(calls, budget)
    say(f"calibrate: {len(calls)} calls from {path} give {len(obs)} grouped observations")
    # A run's calls do not say which KV blocks their neighbours shared (that term is the
    # per-context one's twin here) nor when a neighbour was in the front end: both are left
    # out (a probe measures them).
    fixed = {"decode_kv_token_s": 0.0, "frontend_step_s": 0.0}
    free = len(PARAMS) - len(fixed)
    if len(obs) < free:
        say(
            f"calibrate: warning: {len(obs)} observations for {free} parameters: the fit "
            "is underdetermined (the run had too few prompt lengths or batch sizes); a probe "
            "(--base-url) pins down every term"
        )
    f = fit(obs, fixed=fixed)
    # A run's records count each request's chunks, not their sizes: the geometric model's
    # hold chance from the mean tokens per chunk (1 - 1 / mean).
    held = {b: 1 - 1 / m for b, m in chunking.items() if m > 0}
    probe = ProbeResult(obs=obs, chunking=chunking, held=held, requests=len(calls))
    info = ServerInfo(
        engine="unknown",
        version=None,
        model="",
        max_model_len=None,
        block_size=None,
        kv_blocks=None,
        is_sim=False,
    )
    extra: dict[str, Any] = {
        "source": f"results directory {results.name}",
        "clock": "wall",
        "calls": len(calls),
        "client_mean_ttft_s": round(statistics.fmean(c.ttft for c in calls), 6),
    }
    extra.update(server_side(results / "server_metrics.jsonl"))
    profile = build_profile(name, base_p, f, probe, info, extra)
    profile = profile.model_copy(update={"max_num_batched_tokens": budget})
    return Calibration(profile, f, probe, info, 0.0)
