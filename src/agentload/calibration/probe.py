"""The calibration probe: a fixed set of request patterns whose latencies pin down each term
of the timing model.

* **prefill**: cold prompts across lengths (the linear and the quadratic prefill terms), each
  sent again at once (a prefix-cache hit: the front end and the per-token front-end cost);
* **decode**: batches of 1-8 streams over a short and a long shared context (per-step,
  per-sequence and per-context-token decode costs), measured while every stream decodes, and
  batches of 3-6 streams over distinct cold contexts (prefilled one after the other while the
  first ones decode): what reading a block each sequence holds alone costs beside a shared one;
* **interference**: a cold prefill arriving while a stream decodes (the longest gap of that
  stream is one mixed step).

* **front end**: a stream decoding while long cached prompts arrive one after another (much
  front-end work, little prefill): its steps while each arrival is in the front end, against
  its plain decode steps, show what a busy front end costs the engine's steps.

* **busy start**: short cold prompts arriving one by one, at scattered moments, while streams
  decode: each one's prefill starts at a step boundary after it reached the queue and not at
  the boundary before, which bounds its front-end time on a busy engine (the prefill pattern
  reads it on an idle one; the difference is what waking an idle engine costs).

* **first chunk**: single streams over a short cached prompt, each after a short pause (a
  stream starting on a lightly loaded server, as in a TTFT measurement): how many tokens each
  one's first chunk carried, for the first-token hold of the output coalescing.

Every pattern is repeated and summarised by its median, which keeps a loaded machine's
outliers out of the fit.
"""

from __future__ import annotations

import asyncio
import random
import statistics
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import aiohttp

from agentload.calibration.fit import (
    Obs,
    decode_features,
    mixed_features,
    ttft_features,
)
from agentload.calibration.prompts import PromptMaker
from agentload.calibration.stream import Call, ProbeError, Target, model_clock, stream_call
from agentload.sim.engine import kv_tokens
from agentload.stats import pace

Progress = Callable[[str, float, float, float], None]
"""(phase, elapsed s, estimated s done, estimated s in all)."""
# Patterns the warm-up leaves out: they put next to no load on the engine.
WARMUP_SKIPS = ("idle start", "first chunk")


@dataclass
class ProbePlan:
    prompt_lengths: list[int] = field(default_factory=lambda: [128, 512, 1024, 2048, 4096, 8192])
    repeats: int = 3
    decode_batches: list[int] = field(default_factory=lambda: [1, 2, 4, 8])
    decode_contexts: list[int] = field(default_factory=lambda: [256, 2048, 6144])
    decode_tokens: int = 96
    interference_prompts: list[int] = field(default_factory=lambda: [1024, 2048])
    distinct_batches: list[int] = field(default_factory=lambda: [3, 6])
    distinct_contexts: list[int] = field(default_factory=lambda: [1536, 2560])
    """Decode over distinct cold contexts (sizes unlike the fidelity workloads')."""
    first_chunk_streams: int = 8
    first_chunk_tokens: int = 32
    first_chunk_pause_s: float = 0.1
    frontend_prompts: list[int] = field(default_factory=lambda: [4096, 8192])
    """Cached prompts that arrive while a stream decodes (long: their front end is long)."""
    frontend_context: int = 1024
    frontend_arrivals: int = 3
    idle_pause_s: float = 5.0
    """Idle time before each of the idle pattern's late requests (0 leaves it out)."""
    idle_pairs: int = 2
    """Pairs per round of the idle pattern (one TTFT is noisy next to a few ms of wake)."""
    busy_streams: int = 2
    """Streams decoding while the busy-start pattern's prompts arrive (0 leaves it out)."""
    busy_arrivals: int = 16
    """Short prompts per round of the busy-start pattern; each bounds the front end to one
    step's length, so many of them at scattered moments narrow it down."""
    busy_prompt: int = 64
    busy_contexts: list[int] = field(default_factory=lambda: [256, 2048])
    """Cached contexts the busy-start pattern's streams decode over, one run each: steps of
    different lengths, so that a front end the step an arrival comes in hides from one
    (`frontend_step_s`) shows in another (see `busy_start`)."""
    warmup_s: float = 60.0
    """Seconds of the probe's loading patterns first, recorded nothing: a freshly started vLLM
    ran its first minute or so up to 45 % slower (docs/simulator.md, "Warm-up")."""
    budget: int = 8192
    """The engine's max_num_batched_tokens (prefill chunk size)."""
    block_size: int = 16
    max_model_len: int = 32768

    @classmethod
    def quick(cls) -> ProbePlan:
        """A smaller probe: every term still has the observations that pin it down."""
        return cls(
            prompt_lengths=[128, 1024, 4096],
            repeats=1,
            decode_batches=[1, 2, 4],
            decode_contexts=[256, 2048],
            decode_tokens=32,
            interference_prompts=[1024],
            distinct_batches=[2, 3],
            distinct_contexts=[1024],
            frontend_prompts=[4096],
            idle_pairs=1,
            busy_arrivals=24,
            warmup_s=30.0,
        )

    def fitted(self) -> ProbePlan:
        """This plan with lengths the server accepts."""
        top = self.max_model_len - max(self.decode_tokens, 160) - 8
        return ProbePlan(
            prompt_lengths=[p for p in self.prompt_lengths if p <= top] or [min(256, top)],
            repeats=self.repeats,
            decode_batches=self.decode_batches,
            decode_contexts=[min(c, top) for c in self.decode_contexts],
            decode_tokens=self.decode_tokens,
            interference_prompts=[min(p, self.budget // 2, top) for p in self.interference_prompts],
            distinct_batches=self.distinct_batches,
            distinct_contexts=[min(c, top) for c in self.distinct_contexts],
            first_chunk_streams=self.first_chunk_streams,
            first_chunk_tokens=self.first_chunk_tokens,
            first_chunk_pause_s=self.first_chunk_pause_s,
            frontend_prompts=[min(p, top) for p in self.frontend_prompts],
            frontend_context=min(self.frontend_context, top),
            frontend_arrivals=self.frontend_arrivals,
            idle_pause_s=self.idle_pause_s,
            idle_pairs=self.idle_pairs,
            busy_streams=self.busy_streams,
            busy_arrivals=self.busy_arrivals,
            busy_prompt=min(self.busy_prompt, top),
            busy_contexts=[min(c, top) for c in self.busy_contexts],
            warmup_s=self.warmup_s,
            budget=self.budget,
            block_size=self.block_size,
            max_model_len=self.max_model_len,
        )


@dataclass
class Pilot:
    """One cold request's figures, to size the probe before it runs."""

    ttft_s: float
    prompt_tokens: int
    tpot_s: float

    def ttft(self, p: int) -> float:
        return self.ttft_s * max(0.05, (p / max(self.prompt_tokens, 1)) ** 1.3)

    def step(self, batch: int) -> float:
        return self.tpot_s * (1 + 0.3 * (batch - 1))


Sample = tuple[float, list[float], int]
"""One measurement of a pattern: (latency, its features, the round it was taken in)."""


@dataclass
class ProbeResult:
    obs: list[Obs] = field(default_factory=list)
    chunking: dict[int, float] = field(default_factory=dict)
    """Mean tokens per chunk (after the first) by decode batch size, on the wire."""
    held: dict[int, float] = field(default_factory=dict)
    """By decode batch size, the share of chunks (after the first) that carried more than one
    token: the chance a token is held back (`agentload.sim.coalesce`), counted per chunk so
    that a rare stall, one chunk of 30 tokens, weighs as one hold and not as 29."""
    requests: int = 0
    first_chunks: list[tuple[int, int]] = field(default_factory=list)
    """(tokens in the first chunk, tokens in the stream) of the first-chunk pattern's streams."""
    idle: list[float] = field(default_factory=list)
    """TTFT after `idle_pause_s` of quiet minus TTFT right after another request, per pair."""
    busy: list[tuple[float, float, int]] = field(default_factory=list)
    """The busy-start pattern's arrivals: (the last step boundary it missed, the one it made,
    both counted from when it was sent, and its prompt tokens)."""
    pace: list[float | None] = field(default_factory=list)
    """Per round, how its latencies compared with the same patterns' in the other rounds
    (`agentload.stats.pace`: 1.10 is a round 10 % slower than usual); empty with one round."""
    samples: dict[tuple[str, str], list[Sample]] = field(default_factory=dict)
    """Every pattern's measurements, by (kind, label): what `obs` and `pace` summarise."""
    chunks: dict[int, list[int]] = field(default_factory=dict)
    """Tokens per chunk on the wire (after the first), by decode batch size."""
    rounds: int = 1

    def summarise(self) -> None:
        """Each pattern's median sample becomes one observation; each round gets its pace."""
        self.obs = []
        for (kind, label), samples in self.samples.items():
            y, feats, _ = sorted(samples, key=lambda s: s[0])[len(samples) // 2]
            if kind == "decode":
                # the median step, with the mean context of the samples
                y = statistics.median(s[0] for s in samples)
                feats = [statistics.fmean(s[1][i] for s in samples) for i in range(len(feats))]
            self.obs.append(Obs(kind, label, y, feats, len(samples)))
        self.pace = []
        if self.rounds > 1:
            per_round: list[dict[tuple[str, str], float]] = [{} for _ in range(self.rounds)]
            for key, samples in self.samples.items():
                for r in range(self.rounds):
                    if ys := [y for y, _, k in samples if k == r]:
                        per_round[r][key] = statistics.median(ys)
            self.pace = pace(per_round)
        self.chunking = {b: statistics.fmean(v) for b, v in sorted(self.chunks.items()) if v}
        self.held = {b: sum(t > 1 for t in v) / len(v) for b, v in sorted(self.chunks.items()) if v}

    def as_dict(self) -> dict[str, Any]:
        """The measurements, for JSON: what `from_dict` reads back and `pooled` merges."""
        return {
            "rounds": self.rounds,
            "requests": self.requests,
            "samples": [
                {"kind": kind, "label": label, "samples": [[y, x, r] for y, x, r in ss]}
                for (kind, label), ss in self.samples.items()
            ],
            "chunks": {str(b): v for b, v in self.chunks.items()},
            "first_chunks": [list(fc) for fc in self.first_chunks],
            "idle": self.idle,
            "busy": [list(b) for b in self.busy],
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ProbeResult:
        """The measurements `as_dict` wrote, summarised; a KeyError, TypeError or ValueError
        for data of another shape."""
        r = cls(rounds=int(d["rounds"]), requests=int(d["requests"]))
        for entry in d["samples"]:
            r.samples[(str(entry["kind"]), str(entry["label"]))] = [
                (float(y), [float(v) for v in x], int(k)) for y, x, k in entry["samples"]
            ]
        r.chunks = {int(b): [int(t) for t in v] for b, v in d["chunks"].items()}
        r.first_chunks = [(int(a), int(b)) for a, b in d["first_chunks"]]
        r.idle = [float(x) for x in d["idle"]]
        r.busy = [(float(lo), float(hi), int(n)) for lo, hi, n in d["busy"]]
        r.summarise()
        return r


def pooled(results: list[ProbeResult]) -> ProbeResult:
    """Several probes as one: every pattern's samples together (each probe's rounds counted
    after the previous probe's), so each observation is the median over all of them and the
    pace compares every round with all the others."""
    out = ProbeResult()
    offset = 0
    for res in results:
        for key, samples in res.samples.items():
            out.samples.setdefault(key, []).extend((y, x, offset + k) for y, x, k in samples)
        for b, v in res.chunks.items():
            out.chunks.setdefault(b, []).extend(v)
        out.first_chunks += res.first_chunks
        out.idle += res.idle
        out.busy += res.busy
        out.requests += res.requests
        offset += res.rounds
    out.rounds = max(1, offset)
    out.summarise()
    return out


class Probe:
    def __init__(
        self,
        http: aiohttp.ClientSession,
        target: Target,
        plan: ProbePlan,
        prompts: PromptMaker,
        progress: Progress | None = None,
    ) -> None:
        self.http = http
        self.t = target
        self.plan = plan
        self.prompts = prompts
        self.progress = progress
        self.result = ProbeResult()
        self._prefixes: dict[int, str] = {}
        self._frontend_prompts: dict[int, str] = {}
        self._recording = True
        self._round = 0
        self._rng = random.Random(0)

    async def call(self, prompt: str, max_tokens: int, into: Call | None = None) -> Call:
        c = await stream_call(self.http, self.t, prompt, max_tokens, into)
        self.result.requests += 1
        return c

    async def clocked(self, calls: list[Call]) -> list[Call]:
        """The calls on the clock the fit uses (the simulator's model clock if it has one)."""
        if not self.t.model_times:
            return calls
        return [await model_clock(self.http, self.t, c) for c in calls]

    async def pilot(self) -> Pilot:
        c = await self.call(self.prompts.text(1024), 17)
        (c,) = await self.clocked([c])
        return Pilot(c.ttft, c.prompt_tokens, c.tpot() or 0.01)

    def estimate(self, pilot: Pilot) -> list[tuple[str, float, Callable[[], Awaitable[None]]]]:
        """One round of the probe (each pattern once) with estimated durations; the probe
        runs `repeats` rounds, so each pattern's repeats spread over the whole probe and a
        change in the machine's load shifts every pattern alike."""
        pl = self.plan
        steps: list[tuple[str, float, Callable[[], Awaitable[None]]]] = []
        for p in pl.prompt_lengths:
            est = pilot.ttft(p) + pilot.ttft(pl.block_size) + 0.05
            steps.append((f"prefill {p}", est, partial(self.prefill, p)))
        for ctx in pl.decode_contexts:
            for b in pl.decode_batches:
                est = pilot.ttft(32 * b) + pl.decode_tokens * pilot.step(b) + 0.05
                steps.append((f"decode b={b} ctx={ctx}", est, partial(self.decode, ctx, b)))
        for ctx in pl.distinct_contexts:
            for b in pl.distinct_batches:
                est = b * pilot.ttft(ctx) + pl.decode_tokens * pilot.step(b) + 0.05
                name = f"decode b={b} distinct ctx={ctx}"
                steps.append((name, est, partial(self.decode, ctx, b, shared=False)))
        for p in pl.interference_prompts:
            est = 160 * pilot.step(1) + pilot.ttft(p) + 0.1
            steps.append((f"interference {p}", est, partial(self.interference, p)))
        for p in pl.frontend_prompts:
            est = pl.first_chunk_pause_s + pilot.ttft(pl.frontend_context) + 160 * pilot.step(1)
            steps.append((f"front end {p}", est + 0.1, partial(self.frontend, p)))
        if pl.busy_streams and pl.busy_arrivals:
            for ctx in pl.busy_contexts:
                est = pilot.ttft(ctx) + self._busy_tokens() * pilot.step(pl.busy_streams) + 0.1
                steps.append((f"busy start ctx={ctx}", est, partial(self.busy_start, ctx)))
        if pl.idle_pause_s and pl.idle_pairs:
            est = pl.idle_pairs * (pl.idle_pause_s + 2 * pilot.ttft(128)) + 0.05
            steps.append(("idle start", est, self.idle))
        if pl.first_chunk_streams:
            each = pl.first_chunk_pause_s + pilot.ttft(256) + pl.first_chunk_tokens * pilot.step(1)
            steps.append(("first chunk", pl.first_chunk_streams * each, self.first_chunk))
        return steps

    async def run(self, steps: list[tuple[str, float, Callable[[], Awaitable[None]]]]) -> None:
        rounds = self.plan.repeats
        total = rounds * sum(e for _, e, _ in steps) + self.plan.warmup_s
        done = 0.0
        t0 = time.monotonic()
        # The warm-up cycles through the loading patterns until its time is up.
        loading = [s for s in steps if s[0] not in WARMUP_SKIPS]
        self._recording = False
        k = 0
        while loading and time.monotonic() - t0 < self.plan.warmup_s:
            name, _, fn = loading[k % len(loading)]
            if self.progress:
                self.progress(f"warm-up: {name}", time.monotonic() - t0, done, total)
            await fn()
            done = min(time.monotonic() - t0, self.plan.warmup_s)
            k += 1
        done = self.plan.warmup_s
        self._recording = True
        for r in range(rounds):
            self._round = r
            for name, est, fn in steps:
                if self.progress:
                    self.progress(
                        f"round {r + 1}/{rounds}: {name}", time.monotonic() - t0, done, total
                    )
                await fn()
                done += est
        if self.progress:
            self.progress("done", time.monotonic() - t0, total, total)
        self._finish()

    def _finish(self) -> None:
        self.result.rounds = self.plan.repeats
        self.result.summarise()

    def _sample(self, kind: str, label: str, y: float, feats: list[float]) -> None:
        if not self._recording:
            return
        self.result.samples.setdefault((kind, label), []).append((y, feats, self._round))

    # -- the phases (one repetition each) ----------------------------------------------------
    def _cached(self, c: Call, warm: bool) -> int:
        if c.cached_tokens is not None:
            return c.cached_tokens
        bs = self.plan.block_size
        return (c.prompt_tokens - 1) // bs * bs if warm else 0

    async def prefill(self, p: int) -> None:
        prompt = self.prompts.text(p)
        (cold,) = await self.clocked([await self.call(prompt, 2)])
        (warm,) = await self.clocked([await self.call(prompt, 2)])
        budget = self.plan.budget
        for c, label, is_warm in ((cold, "cold", False), (warm, "cached", True)):
            feats = ttft_features(c.prompt_tokens, self._cached(c, is_warm), budget)
            self._sample("ttft", f"{label} {p}", c.ttft, feats)

    async def decode(self, ctx: int, batch: int, shared: bool = True) -> None:
        # Streams that did not decode side by side long enough (one started late, e.g. on a
        # busy client host) give no sample; try again rather than leave the pattern out.
        await _until_sampled(partial(self._decode_once, ctx, batch, shared))

    async def _decode_once(self, ctx: int, batch: int, shared: bool = True) -> bool:
        pm = self.prompts
        if shared:
            if ctx not in self._prefixes:
                self._prefixes[ctx] = pm.text(max(1, ctx - 32))
            prefix = self._prefixes[ctx]
            await self.call(prefix, 1)  # (re)caches the shared prefix
            prompts = [pm.prompt(ctx, prefix) for _ in range(batch)]
        else:
            prompts = [pm.prompt(ctx) for _ in range(batch)]
        wire = await asyncio.gather(*(self.call(q, self.plan.decode_tokens) for q in prompts))
        if self._recording:
            for c in wire:
                self.result.chunks.setdefault(batch, []).extend(c.chunk_tokens)
        calls = await self.clocked(list(wire))
        w0 = max(c.times[0] for c in calls)
        w1 = min(c.times[-1] for c in calls)
        windows: list[tuple[Call, int, int]] = []
        per: list[float] = []
        for c in calls:
            idx = [i for i, t in enumerate(c.times) if w0 <= t <= w1]
            if len(idx) < 2 or c.counts[idx[-1]] - c.counts[idx[0]] < 4:
                return False  # the streams did not decode together long enough
            a, b = idx[0], idx[-1]
            per.append((c.times[b] - c.times[a]) / (c.counts[b] - c.counts[a]))
            windows.append((c, c.counts[a], c.counts[b]))
        label = f"batch {batch} context {ctx}" if shared else f"batch {batch} distinct {ctx}"
        self._sample(
            "decode", label, statistics.median(per), window_features(windows, self.plan.block_size)
        )
        return True

    async def first_chunk(self) -> None:
        """Single streams, each after a pause: the tokens in each one's first chunk."""
        pl = self.plan
        prompt = self.prompts.text(256)
        await self.call(prompt, 1)  # cached from here on: the stream starts at once
        for _ in range(pl.first_chunk_streams):
            await asyncio.sleep(pl.first_chunk_pause_s)
            c = await self.call(prompt, pl.first_chunk_tokens)
            if c.tokens >= 2 and self._recording:
                self.result.first_chunks.append((c.counts[0], c.tokens))

    async def idle(self) -> None:
        """A short cached prompt right after another request, and again after the engine
        idled for `idle_pause_s`: the difference in TTFT is what starting after that idle
        costs."""
        prompt = self.prompts.text(128)
        await self.call(prompt, 1)  # cached from here on
        for _ in range(self.plan.idle_pairs):
            near = await self.call(prompt, 2)
            await asyncio.sleep(self.plan.idle_pause_s)
            far = await self.call(prompt, 2)
            near, far = await self.clocked([near, far])
            if self._recording:
                self.result.idle.append(far.ttft - near.ttft)

    def _busy_tokens(self) -> int:
        # room for every arrival (its front end, a wait for the step boundary, its step and
        # a scattered pause: a few steps each) before the streams end
        return 48 + 10 * self.plan.busy_arrivals

    async def busy_start(self, ctx: int) -> None:
        """Short cold prompts sent one after another, each after a random pause, while
        `busy_streams` streams decode over a cached `ctx`-token context: the step boundaries
        around each one's prefill.

        An arrival makes the step it comes in `frontend_step_s` longer, so the next boundary
        is never nearer to it than that: a front end that ends less than that after a
        boundary (counting whole steps from the arrival) is bounded only to that stretch,
        wherever in a step the arrival comes. Steps of another length (another context) move
        where that happens, and their bounds close in on it."""
        # Streams whose chunks the server held (a whole answer in one chunk) show no step
        # boundaries: try again.
        await _until_sampled(partial(self._busy_start_once, ctx))

    async def _busy_start_once(self, ctx: int) -> bool:
        pl = self.plan
        context = self.prompts.text(ctx)
        await self.call(context, 1)  # cached: the streams start decoding at once
        # built before any is sent: making a prompt takes the client's loop for milliseconds
        texts = [self.prompts.text(pl.busy_prompt) for _ in range(pl.busy_arrivals)]
        tokens = self._busy_tokens()
        # streams started on an idle server after a pause have their tokens sent as they come
        await asyncio.sleep(pl.first_chunk_pause_s)
        decs = [Call(start=0.0) for _ in range(pl.busy_streams)]
        tasks = [asyncio.ensure_future(self.call(context, tokens, d)) for d in decs]

        def flowing() -> int | None:
            """A stream whose tokens come chunk by chunk (the first)."""
            return next((k for k, d in enumerate(decs) if len(d.times) >= 8), None)

        arrivals: list[Call] = []
        try:
            while (k := flowing()) is None and not all(t.done() for t in tasks):  # noqa: ASYNC110
                await asyncio.sleep(0.002)
            if k is None:
                return False
            dec, task = decs[k], tasks[k]
            for text in texts:
                if task.done() or dec.counts[-1] > tokens - 24:
                    break
                # a pause of up to two steps puts the sends at scattered points of a step
                step = statistics.median(dec.gaps()[-8:])
                await asyncio.sleep(self._rng.uniform(0.0, 2 * step))
                arrivals.append(await self.call(text, 1))
        finally:
            await asyncio.gather(*tasks)
        dec_c, *pres = await self.clocked([task.result(), *arrivals])
        found = busy_bounds(dec_c, pres)
        if self._recording:
            self.result.busy.extend(found)
        return bool(found)

    async def frontend(self, p: int) -> None:
        # A stream whose chunks the server held (no gaps to read) gives no sample: try again.
        await _until_sampled(partial(self._frontend_once, p))

    async def _frontend_once(self, p: int) -> bool:
        pl = self.plan
        if p not in self._frontend_prompts:
            self._frontend_prompts[p] = self.prompts.text(p)
        long = self._frontend_prompts[p]
        await self.call(long, 1)  # cached: each arrival is front end and one block of prefill
        # a stream started on an idle server after a pause has its tokens sent as they come
        await asyncio.sleep(pl.first_chunk_pause_s)
        dec = Call(start=0.0)
        task = asyncio.ensure_future(self.call(self.prompts.text(pl.frontend_context), 160, dec))
        arrivals: list[Call] = []
        try:
            while (not dec.counts or dec.counts[-1] < 16) and not task.done():  # noqa: ASYNC110
                await asyncio.sleep(0.002)
            for _ in range(pl.frontend_arrivals):
                if task.done():
                    break
                arrivals.append(await self.call(long, 1))
                await asyncio.sleep(0.01)  # a few plain steps between two arrivals
        finally:
            await task
        dec_c, *pres = await self.clocked([task.result(), *arrivals])
        gaps = frontend_gaps(dec_c, pres)
        if not gaps:
            return False
        ctx = dec_c.prompt_tokens + dec_c.tokens / 2
        feats = decode_features(1, ctx, ctx, frontend=1.0)
        self._sample("frontend", f"arrivals of {p}", statistics.median(gaps), feats)
        return True

    async def interference(self, p: int) -> None:
        # A prefill that reached the engine after the stream had finished (a late client on a
        # busy host) shows no mixed step: try again rather than fit a plain decode step.
        await _until_sampled(partial(self._interference_once, p))

    async def _interference_once(self, p: int) -> bool:
        dec = Call(start=0.0)
        task = asyncio.ensure_future(self.call(self.prompts.text(256), 160, dec))
        try:
            # the stream's chunks are appended by its reader: poll them
            while (not dec.counts or dec.counts[-1] < 16) and not task.done():  # noqa: ASYNC110
                await asyncio.sleep(0.002)
            pre = await self.call(self.prompts.text(p), 1)
        finally:
            await task
        dec_c, pre_c = await self.clocked([task.result(), pre])
        found = self._mixed_gap(dec_c, pre_c)
        if found is not None:
            self._sample("interference", f"prefill {p}", *found)
        return found is not None

    def _mixed_gap(self, dec: Call, pre: Call) -> tuple[float, list[float]] | None:
        """The decoding stream's gap that holds the prefill's step, and its features."""
        i = mixed_step(dec, pre)
        if i is None:
            return None
        gap = dec.times[i + 1] - dec.times[i]
        ctx = dec.prompt_tokens + dec.counts[i]
        cached = pre.cached_tokens or 0
        feats = mixed_features(pre.prompt_tokens - cached, cached, 1, ctx, ctx)
        extra = dec.counts[i + 1] - dec.counts[i] - 1
        step = decode_features(1, ctx, ctx)
        return gap, [f + extra * s for f, s in zip(feats, step, strict=True)]


async def _until_sampled(once: Callable[[], Awaitable[bool]], attempts: int = 3) -> None:
    """Run a pattern until it gives a sample, at most `attempts` times."""
    for _ in range(attempts):
        if await once():
            return


def mixed_step(dec: Call, pre: Call) -> int | None:
    """Index `i` of the decoding stream's gap (chunk `i` to `i + 1`) that holds the step in
    which `pre` was prefilled.

    That step also gives the prefill its first token, so the gap is the one that ends at (on
    the wall clock: nearest to) the prefill's first token; None when the stream had no gap
    there (it finished before the prefill was scheduled)."""
    if not pre.times:
        return None
    first = pre.times[0]
    best: tuple[float, int] | None = None
    for i in range(len(dec.times) - 1):
        end = dec.times[i + 1]
        if end <= pre.start:
            continue
        if best is None or abs(end - first) < best[0]:
            best = (abs(end - first), i)
    if best is None:
        return None
    off, i = best
    if off > 0.5 * (dec.times[i + 1] - dec.times[i]) or dec.times[i] > first:
        return None
    return i


def frontend_gaps(dec: Call, arrivals: list[Call]) -> list[float]:
    """The decoding stream's steps taken while an arrival was in the front end: the gaps that
    ended after the arrival was sent (the one in progress then included) and before the step
    holding its prefill began. Chunks of several tokens are left out (a held token would hide
    a step)."""
    out: list[float] = []
    t, n = dec.times, dec.counts
    for a in arrivals:
        mixed = mixed_step(dec, a)
        if mixed is None:
            continue
        for i in range(1, mixed + 1):
            if t[i] > a.start and n[i] - n[i - 1] == 1:
                out.append(t[i] - t[i - 1])
    return out


def busy_bounds(dec: Call, arrivals: list[Call]) -> list[tuple[float, float, int]]:
    """For each arrival whose prefill shared a step with the decoding stream `dec`: the start
    of the step before that one and of that one (the stream's chunks there), counted from
    when the arrival was sent, and its prompt tokens. It reached the queue after the first
    and by the second. Arrivals next to a chunk of several tokens (a held token hides a step
    boundary) are left out."""
    out: list[tuple[float, float, int]] = []
    t, n = dec.times, dec.counts
    for a in arrivals:
        i = mixed_step(dec, a)
        if i is None or i < 1 or n[i] - n[i - 1] != 1 or n[i + 1] - n[i] != 1:
            continue
        out.append((t[i - 1] - a.start, t[i] - a.start, a.prompt_tokens))
    return out


def window_features(windows: list[tuple[Call, int, int]], block_size: int) -> list[float]:
    """Mean decode-step features over the window in which every stream decoded: each stream's
    (call, tokens at the window's start, tokens at its end).

    A stream that has `m` tokens decodes its next one over a context of `prompt + m` tokens
    in `ceil((prompt + m) / block_size)` KV blocks, of which its cached prompt blocks are the
    ones it shares with the others (the shared prefix, counted once)."""
    ctx_sum = 0.0
    ctx_max = 0.0
    own_blocks = 0.0
    shared = 0
    for c, m0, m1 in windows:
        steps = range(m0, m1)
        mean = c.prompt_tokens + (m0 + m1 - 1) / 2
        ctx_sum += mean
        ctx_max = max(ctx_max, mean)
        hit = (c.cached_tokens or 0) // block_size
        shared = max(shared, hit)
        blocks = [-(-(c.prompt_tokens + m) // block_size) - hit for m in steps]
        own_blocks += statistics.fmean(blocks) if blocks else 0.0
    kv = kv_tokens(shared + own_blocks, block_size, ctx_sum)
    return decode_features(len(windows), ctx_sum, ctx_max, kv)


__all__ = ["Pilot", "Probe", "ProbeError", "ProbePlan", "ProbeResult"]
