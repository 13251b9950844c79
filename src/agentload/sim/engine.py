"""The engine model: a continuous-batching scheduler over a paged KV cache, driven by a clock.

Like vLLM v1, each step schedules the running sequences first (one token for a decoding
sequence, a chunk for one still prefilling) and then admits waiting ones, under a token
budget (``max_num_batched_tokens``) and a sequence cap (``max_num_seqs``). The step's
duration comes from the profile; when it has elapsed (scaled by ``speedup``), every sequence
that completed its prompt or a decode in that step emits one token.

KV cache: ``kv_blocks`` blocks of ``block_size`` tokens. With prefix caching, each full
prompt block is identified by a hash chained over the blocks before it; blocks no request
references stay cached in an LRU free list and are evicted only when a block is needed.
When a running sequence needs a block and none is free, the most recently admitted running
sequence is preempted: its blocks are freed and it goes back to the head of the queue, to be
recomputed later (its cached prompt blocks may still hit).
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
import logging
import time
from bisect import bisect_left
from collections import OrderedDict, deque
from collections.abc import Callable
from typing import Any, Protocol

from agentload.sim.metrics import SimMetrics
from agentload.sim.profiles import Profile

log = logging.getLogger("agentload.sim")

LATE_STEP_S = 0.002
MAX_LEAD_S = 0.005
# The last part of the wait before a step is spent spinning (see Engine._wait_step).
SPIN_S = 0.001
# Longest run of zero-time steps between two visits to the event loop (instant profile).
BURST_S = 0.01


class Output(Protocol):
    """Where a sequence's tokens go (a stream, a collected response)."""

    def token(self, seq: Seq, index: int, finish: str | None, now: float) -> None:
        """Token ``index`` (0-based) left the engine; ``finish`` is set on the last one."""
        ...

    def aborted(self, seq: Seq | None) -> None:
        """The engine dropped the sequence (client gone, server stopping)."""
        ...


class Seq:
    """One request inside the engine."""

    __slots__ = (
        "aborted",
        "arrival_t",
        "block_hashes",
        "blocks",
        "cached_tokens",
        "created_cache_tokens",
        "finish_reason",
        "finished",
        "first_token_t",
        "ignore_eos",
        "last_token_t",
        "max_tokens",
        "model_added",
        "model_arrival",
        "model_times",
        "num_computed",
        "num_output",
        "num_registered",
        "out",
        "plan_len",
        "preemptions",
        "prompt_len",
        "queued_t",
        "rid",
        "scheduled_t",
        "stats_done",
        "total_len",
    )

    def __init__(
        self,
        rid: str,
        prompt_len: int,
        block_hashes: list[int],
        max_tokens: int,
        plan_len: int,
        out: Output,
        *,
        ignore_eos: bool = False,
        arrival_t: float = 0.0,
    ) -> None:
        self.rid = rid
        self.prompt_len = prompt_len
        self.block_hashes = block_hashes
        self.max_tokens = max_tokens
        self.plan_len = plan_len
        """Tokens before the end-of-sequence token (which is one more generated token)."""
        self.ignore_eos = ignore_eos
        self.out = out
        self.total_len = prompt_len
        self.num_computed = 0
        self.num_output = 0
        self.num_registered = 0
        self.blocks: list[int] = []
        self.cached_tokens = 0
        self.created_cache_tokens = 0
        self.preemptions = 0
        self.stats_done = False
        self.aborted = False
        self.finished = False
        self.finish_reason: str | None = None
        self.arrival_t = arrival_t
        self.queued_t = 0.0
        self.scheduled_t = 0.0
        self.first_token_t = 0.0
        self.last_token_t = 0.0
        # Model-clock times (see Engine.model_now), recorded only when asked for: calibration
        # reads them instead of wall times, which carry the machine's scheduling noise.
        self.model_arrival = 0.0
        self.model_added = 0.0
        self.model_times: list[float] | None = None


def kv_tokens(blocks: float, block_size: int, context_sum: float) -> float:
    """KV tokens read by a step's decoding sequences that hold `blocks` distinct blocks and
    `context_sum` tokens of context in all: whole blocks, at most the context itself (means
    of both in the probe's features)."""
    return min(blocks * block_size, context_sum)


def _nothing() -> None:
    return None


class BlockPool:
    """Paged KV blocks with hash-chained prefix caching and LRU eviction.

    Blocks never used yet are handed out first (created on demand, so a huge pool costs
    nothing up front); after that, the least recently freed block is reused, and a cached
    block's hash is forgotten when it is.
    """

    def __init__(self, num_blocks: int, caching: bool) -> None:
        self.num_blocks = num_blocks
        self.caching = caching
        self.ref: list[int] = []
        self.hash: list[int | None] = []
        self.fresh = num_blocks
        self.free: OrderedDict[int, None] = OrderedDict()
        self.cached: dict[int, int] = {}

    @property
    def num_free(self) -> int:
        return self.fresh + len(self.free)

    def usage(self) -> float:
        return 1.0 - self.num_free / self.num_blocks

    def lookup(self, hashes: list[int], max_blocks: int) -> list[int]:
        if not self.caching:
            return []
        out: list[int] = []
        cached = self.cached
        for h in hashes[:max_blocks]:
            b = cached.get(h)
            if b is None:
                break
            out.append(b)
        return out

    def acquire(self, blocks: list[int]) -> None:
        ref, free = self.ref, self.free
        for b in blocks:
            if ref[b] == 0:
                del free[b]
            ref[b] += 1

    def allocate(self, k: int) -> list[int] | None:
        if k > self.fresh + len(self.free):
            return None
        out: list[int] = []
        ref = self.ref
        while k and self.fresh:
            b = len(ref)
            ref.append(1)
            self.hash.append(None)
            self.fresh -= 1
            out.append(b)
            k -= 1
        free, hashes, cached = self.free, self.hash, self.cached
        for _ in range(k):
            b, _ = free.popitem(last=False)
            h = hashes[b]
            if h is not None:
                if cached.get(h) == b:
                    del cached[h]
                hashes[b] = None
            ref[b] = 1
            out.append(b)
        return out

    def release(self, blocks: list[int]) -> None:
        ref, free = self.ref, self.free
        # tail blocks first, so they are evicted before the shared prefix
        for b in reversed(blocks):
            ref[b] -= 1
            if ref[b] == 0:
                free[b] = None

    def register(self, block: int, h: int) -> None:
        if self.caching and h not in self.cached:
            self.cached[h] = block
            self.hash[block] = h


class FrontEndSlot:
    """A request counted in ``Engine.in_frontend`` from its arrival until it reaches the queue
    (or fails before that); :meth:`leave` may be called more than once."""

    __slots__ = ("_engine",)

    def __init__(self, engine: Engine) -> None:
        engine.in_frontend += 1
        engine.arrived()
        self._engine: Engine | None = engine

    def leave(self) -> None:
        if self._engine is not None:
            self._engine.in_frontend -= 1
            self._engine = None


class Engine:
    """The step loop. Call :meth:`add` to submit, run :meth:`run` as one task."""

    def __init__(
        self,
        profile: Profile,
        metrics: SimMetrics,
        *,
        speedup: float = 1.0,
        prefix_caching: bool = True,
        log_interval_s: float = 10.0,
    ) -> None:
        self.p = profile
        self.bs = profile.block_size
        self.metrics = metrics
        self.speedup = speedup
        self.pool = BlockPool(profile.kv_blocks, prefix_caching)
        self.waiting: deque[Seq] = deque()
        self.running: list[Seq] = []
        self._wake = asyncio.Event()
        self._stopped = False
        self._aborts = 0
        self.steps = 0
        # requests the server is still reading (see FrontEndSlot) and, in _pending, the ones
        # in their front-end delay: steps that start meanwhile pay frontend_step_s (and the one
        # in progress when a request arrives: see `arrived`)
        self.in_frontend = 0
        # (model time it reaches the queue, order, wall time it is due, seq), a heap
        self._pending: list[tuple[float, int, float, Seq]] = []
        self._order = itertools.count()
        # wall time an idle engine was due to wake (its timer fires up to a millisecond late)
        self._wake_wall: float | None = None
        self.emit_cost = 5e-6
        # Set by the server: gather each stream's writes during a burst of zero-time steps.
        self.write_gather_begin: Callable[[], None] = _nothing
        self.write_gather_end: Callable[[], None] = _nothing
        self._carry: tuple[list[tuple[Seq, int]], float] | None = None
        """Seconds the simulator needs to write one token (moving average)."""
        self.log_interval_s = log_interval_s
        # The model clock: seconds of model time, advanced by exactly each step's duration
        # while busy, and running at `speedup` times the wall clock while idle.
        self.model_clock = 0.0
        self._model_anchor = time.monotonic()
        self._wake_model: float | None = None
        self._step_end_model = 0.0
        # A timed step in progress, whether it pays frontend_step_s, and what arrivals during
        # it added to its length (see `arrived`).
        self._stepping = False
        self._step_pays_frontend = False
        self._stretch = 0.0

    def model_now(self) -> float:
        """The model clock now (between steps it runs with the wall clock, times speedup)."""
        return self.model_clock + (time.monotonic() - self._model_anchor) * self.speedup

    # -- submission ------------------------------------------------------------------------
    def capacity_tokens(self) -> int:
        return self.p.kv_blocks * self.bs

    def add(self, seq: Seq) -> None:
        seq.queued_t = time.monotonic()
        if seq.model_times is not None or self._wake_model is None:
            now = self.model_now()
            if self.running or self.waiting:
                # a late host must not push arrivals past the step in progress
                now = min(now, self._step_end_model)
            elif self._wake_model is None:
                # an idle engine's next step starts, in model time, when this request came
                self._wake_model = now
            seq.model_added = now
        self.waiting.append(seq)
        self.metrics.num_waiting = len(self.waiting)
        self._wake.set()

    def arrived(self) -> None:
        """A request came in. A timed step in progress that does not pay `frontend_step_s`
        yet (it started with no request in the front end) pays it now, and ends that much
        later: the front end's work competes with the step in progress as with the ones
        that start while it lasts (measured by the probe's front-end pattern)."""
        if (
            self._stepping
            and not self._step_pays_frontend
            and self.p.frontend_step_s > 0
            and self.model_now() < self._step_end_model
        ):
            self._step_pays_frontend = True
            self._stretch += self.p.frontend_step_s

    @property
    def frontend_requests(self) -> int:
        """Requests in the front end now: being read by the server or in their delay."""
        return self.in_frontend + len(self._pending)

    def submit(self, seq: Seq, arrival: float, frontend_s: float) -> None:
        """Queue `seq` once its front end is over: `frontend_s` of model time after it
        arrived (`arrival`, wall clock). A busy engine takes it into the first step that
        starts after that moment in model time, whenever the host gets to run it: a timer per
        request, or a step's final spin holding the loop, would make it miss by a millisecond
        a step it made in the model, and on a busy engine that costs it a whole step."""
        if frontend_s <= 0:
            self.add(seq)
            return
        now = time.monotonic()
        arrived = self.model_now() - (now - arrival) * self.speedup
        if self.running or self.waiting:
            arrived = min(arrived, self._step_end_model)
        seq.model_arrival = arrived
        due = arrival + frontend_s / self.speedup
        heapq.heappush(self._pending, (arrived + frontend_s, next(self._order), due, seq))
        self._wake.set()

    def _take_pending(self, model_t: float | None) -> None:
        """Queue the pending requests whose front end is over: by model time `model_t` (the
        start of a busy engine's next step), or by now on the wall clock (an idle engine,
        which then starts when the first of them reached the queue)."""
        pending = self._pending
        now = time.monotonic()
        while pending:
            at, _, due, seq = pending[0]
            if (at > model_t) if model_t is not None else (due > now):
                break
            heapq.heappop(pending)
            seq.queued_t = now
            seq.model_added = at
            if model_t is None and self._wake_model is None and not self.running:
                self._wake_model = at
                self._wake_wall = due
            self.waiting.append(seq)
        self.metrics.num_waiting = len(self.waiting)

    def abort(self, seq: Seq) -> None:
        """Drop a sequence (its output is told through ``Output.aborted`` only if asked)."""
        if seq.finished or seq.aborted:
            return
        seq.aborted = True
        self._aborts += 1
        self._wake.set()

    def stop(self) -> None:
        self._stopped = True
        self._wake.set()

    # -- scheduling ------------------------------------------------------------------------
    def _purge_aborted(self) -> None:
        self._aborts = 0
        keep: list[Seq] = []
        for seq in self.running:
            if seq.aborted:
                self._finish_stats(seq, "abort", time.monotonic())
                self.pool.release(seq.blocks)
                seq.blocks = []
            else:
                keep.append(seq)
        self.running = keep
        if any(s.aborted for s in self.waiting):
            kept: deque[Seq] = deque()
            for seq in self.waiting:
                if seq.aborted:
                    self._finish_stats(seq, "abort", time.monotonic())
                else:
                    kept.append(seq)
            self.waiting = kept

    def _preempt(self, victim: Seq) -> None:
        self.pool.release(victim.blocks)
        victim.blocks = []
        victim.num_computed = 0
        victim.num_registered = 0
        victim.preemptions += 1
        self.metrics.preemptions += 1
        self.waiting.appendleft(victim)

    def schedule(self) -> tuple[list[tuple[Seq, int]], float]:
        """Pick this step's work; returns ``[(seq, new_tokens)]`` and the step's model time."""
        if self._aborts:
            self._purge_aborted()
        p, bs, pool = self.p, self.bs, self.pool
        budget = p.max_num_batched_tokens
        scheduled: list[tuple[Seq, int]] = []
        prefill_tokens = 0
        prefill_pairs = 0.0
        decode_seqs = 0
        decode_ctx = 0
        decode_max = 0
        # blocks read by decoding sequences, a shared one once (only when the profile has the
        # term: a set union per step is not free at GPU batch sizes)
        kv_blocks: set[int] | None = set() if p.decode_kv_token_s else None
        running = self.running
        preempted = False
        i = 0
        while i < len(running) and budget > 0:
            seq = running[i]
            n = seq.total_len - seq.num_computed
            if n > budget:
                n = budget
            need = -(-(seq.num_computed + n) // bs) - len(seq.blocks)
            self_preempted = False
            while need > pool.num_free:
                victim = running.pop()
                self._preempt(victim)
                preempted = True
                if victim is seq:
                    self_preempted = True
                    break
            if self_preempted:
                break
            if need > 0:
                new = pool.allocate(need)
                assert new is not None
                seq.blocks.extend(new)
            scheduled.append((seq, n))
            budget -= n
            before = seq.num_computed
            if n == 1 and before >= seq.prompt_len:
                decode_seqs += 1
                decode_ctx += before + 1
                if before >= decode_max:
                    decode_max = before + 1
                if kv_blocks is not None:
                    kv_blocks.update(seq.blocks)
            else:
                prefill_tokens += n
                prefill_pairs += n * before + n * (n + 1) / 2
            i += 1
        if not preempted:
            budget, prefill_tokens, prefill_pairs = self._admit_waiting(
                scheduled, budget, prefill_tokens, prefill_pairs
            )
        dt = 0.0
        if scheduled:
            dt = (
                p.step_overhead_s
                + p.prefill_token_s * prefill_tokens
                + p.decode_seq_s * decode_seqs
                + p.prefill_attention_s * prefill_pairs
                + p.decode_context_token_s * decode_ctx
                + p.decode_max_context_s * decode_max
            )
            if kv_blocks:
                dt += p.decode_kv_token_s * kv_tokens(len(kv_blocks), bs, decode_ctx)
            self._step_pays_frontend = bool(self.in_frontend or self._pending)
            if self._step_pays_frontend:
                dt += p.frontend_step_s
            self.metrics.iteration_tokens.observe(p.max_num_batched_tokens - budget)
        return scheduled, dt

    def _admit_waiting(
        self,
        scheduled: list[tuple[Seq, int]],
        budget: int,
        prefill_tokens: int,
        prefill_pairs: float,
    ) -> tuple[int, int, float]:
        """Start waiting sequences (prefix-cache hits first) while budget, seats and blocks
        allow; returns the budget left and the updated prefill totals."""
        p, bs, pool = self.p, self.bs, self.pool
        running = self.running
        waiting = self.waiting
        max_seqs = p.max_num_seqs
        while waiting and budget > 0 and len(running) < max_seqs:
            seq = waiting[0]
            if seq.aborted:
                waiting.popleft()
                self._finish_stats(seq, "abort", time.monotonic())
                continue
            hits: list[int] = []
            if seq.num_computed == 0:
                max_hit = min(len(seq.block_hashes), (seq.total_len - 1) // bs)
                hits = pool.lookup(seq.block_hashes, max_hit)
                pool.acquire(hits)
            start = len(hits) * bs
            n = min(seq.total_len - start, budget)
            need = -(-(start + n) // bs) - len(hits)
            new = pool.allocate(need)
            if new is None:
                pool.release(hits)
                break
            waiting.popleft()
            seq.blocks = hits + new
            seq.num_computed = start
            seq.num_registered = len(hits)
            if seq.preemptions == 0:
                seq.cached_tokens = start
                full = seq.prompt_len // bs
                seq.created_cache_tokens = max(0, full * bs - start) if pool.caching else 0
                seq.scheduled_t = time.monotonic()
                m = self.metrics
                m.prefix_queries += seq.prompt_len
                m.prefix_hits += start
                m.prompt_tokens += seq.prompt_len
                m.prompt_tokens_computed += seq.prompt_len - start
            running.append(seq)
            scheduled.append((seq, n))
            budget -= n
            prefill_tokens += n
            prefill_pairs += n * start + n * (n + 1) / 2
        return budget, prefill_tokens, prefill_pairs

    # -- completion of a step --------------------------------------------------------------
    def complete(self, scheduled: list[tuple[Seq, int]], deadline: float) -> None:
        """Apply a step's results: advance KV state, emit one token per finished forward."""
        clock = time.monotonic
        t_first = clock()
        emitted, finished_any = self._emit_tokens(scheduled)
        self._account_emissions(emitted, deadline, t_first)
        if finished_any or self._aborts:
            self._release_finished()
        m = self.metrics
        m.num_running = len(self.running)
        m.num_waiting = len(self.waiting)
        m.kv_usage = self.pool.usage()

    def _emit_tokens(
        self, scheduled: list[tuple[Seq, int]]
    ) -> tuple[list[tuple[Seq, int, float]], bool]:
        """Advance each sequence; write a token for each that finished a forward.

        Returns (sequence, token index, write time) per token, and whether any finished."""
        pool, bs = self.pool, self.bs
        finished_any = False
        clock = time.monotonic
        emitted: list[tuple[Seq, int, float]] = []
        for seq, n in scheduled:
            if seq.aborted or seq.finished:
                continue
            seq.num_computed += n
            if seq.num_registered < len(seq.block_hashes):
                full = min(seq.num_computed // bs, len(seq.block_hashes))
                for k in range(seq.num_registered, full):
                    pool.register(seq.blocks[k], seq.block_hashes[k])
                if full > seq.num_registered:
                    seq.num_registered = full
            if seq.num_computed < seq.total_len:
                continue
            # a forward over the sequence's last token: one new token
            if seq.model_times is not None:
                seq.model_times.append(self.model_clock)
            seq.num_output += 1
            seq.total_len += 1
            idx = seq.num_output - 1
            finish: str | None = None
            if seq.num_output >= seq.max_tokens:
                finish = "length"
            if not seq.ignore_eos and seq.num_output == seq.plan_len + 1:
                finish = "stop"
            now = clock()
            if finish is not None:
                seq.finished = True
                seq.finish_reason = finish
                finished_any = True
            # Write first, account afterwards: every µs spent per token before the last
            # write of the step moves the step's later tokens away from their assigned time.
            seq.out.token(seq, idx, finish, now)
            emitted.append((seq, idx, now))
        return emitted, finished_any

    def _account_emissions(
        self, emitted: list[tuple[Seq, int, float]], deadline: float, t_first: float
    ) -> None:
        """Emission lag, inter-token latency and the cost of emitting, after the writes."""
        m = self.metrics
        fine = m.fine_lag
        lag_counts, lag_scale, lag_size = fine.counts, fine.SCALE, fine.SIZE
        itl = m.itl
        itl_counts, itl_bounds = itl.counts, itl.bounds
        itl_sum = 0.0
        itl_n = 0
        lag_sum = 0.0
        worst = 0.0
        produced = len(emitted)
        for seq, idx, now in emitted:
            lag = now - deadline
            if lag < 0:
                lag = -lag
            b = int(lag * lag_scale)
            lag_counts[b if b < lag_size else lag_size] += 1
            lag_sum += lag
            if lag > worst:
                worst = lag
            if idx == 0:
                seq.first_token_t = now
            else:
                gap = now - seq.last_token_t
                itl_counts[bisect_left(itl_bounds, gap)] += 1
                itl_sum += gap
                itl_n += 1
            seq.last_token_t = now
        if produced:
            per_token = (emitted[-1][2] - t_first) / produced
            self.emit_cost = 0.8 * self.emit_cost + 0.2 * per_token
        fine.n += produced
        fine.sum += lag_sum
        if worst > fine.max:
            fine.max = worst
        if worst > fine.window_max:
            fine.window_max = worst
        itl.sum += itl_sum
        itl.count += itl_n
        m.generation_tokens += produced
        if worst > LATE_STEP_S:
            m.step_overrun += 1

    def _release_finished(self) -> None:
        """Free the blocks of finished and aborted sequences and take them off the batch."""
        pool = self.pool
        keep: list[Seq] = []
        now = time.monotonic()
        for seq in self.running:
            if seq.finished:
                pool.release(seq.blocks)
                seq.blocks = []
                self._finish_stats(seq, seq.finish_reason or "stop", now)
            elif seq.aborted:
                pool.release(seq.blocks)
                seq.blocks = []
                self._finish_stats(seq, "abort", now)
            else:
                keep.append(seq)
        self.running = keep

    def _finish_stats(self, seq: Seq, reason: str, now: float) -> None:
        if seq.stats_done:
            return
        seq.stats_done = True
        m = self.metrics
        if reason == "abort":
            seq.out.aborted(seq)
        m.success[reason if reason in m.success else "stop"] += 1
        m.e2e.observe(now - seq.arrival_t)
        m.request_generation_tokens.observe(seq.num_output)
        m.request_preemptions.observe(seq.preemptions)
        if seq.scheduled_t:
            m.request_prompt_tokens.observe(seq.prompt_len)
            m.request_prefill_kv_computed.observe(seq.prompt_len - seq.cached_tokens)
            m.queue_time.observe(seq.scheduled_t - seq.queued_t)
        if seq.first_token_t:
            m.ttft.observe(seq.first_token_t - seq.arrival_t)
            m.prefill_time.observe(seq.first_token_t - seq.scheduled_t)
            m.decode_time.observe(seq.last_token_t - seq.first_token_t)
            m.inference_time.observe(seq.last_token_t - seq.scheduled_t)
            if seq.num_output > 1:
                m.tpot.observe((seq.last_token_t - seq.first_token_t) / (seq.num_output - 1))

    # -- the loop --------------------------------------------------------------------------
    async def run(self) -> None:
        """Step until stopped: sleep while idle, then schedule a step, wait out its time
        and emit its tokens. Each helper runs once per step, never per token."""
        clock = time.monotonic
        prev_end = 0.0
        busy = False
        next_log = clock() + self.log_interval_s if self.log_interval_s else float("inf")
        timed = False  # the last step had model time (zero-time bursts do not move the clock)
        while not self._stopped:
            if self._pending:
                self._take_pending(self.model_clock if busy and timed else None)
            if not self.running and not self.waiting:
                busy = False
                await self._sleep_idle()
                continue
            t0 = self._wall_start(prev_end, busy)
            scheduled, dt = self._next_step()
            if not scheduled:
                busy = False
                await self._retry_later()
                continue
            if dt <= 0.0:
                # No model time (instant profile): run the steps that are due back to back
                # for up to BURST_S, with each stream's bytes gathered into one write, since
                # one send() per token per stream would make the simulator the bottleneck of
                # a client-capacity test. Requests that arrive meanwhile wait at most BURST_S.
                self._burst(scheduled, clock)
                prev_end = clock()
                busy = True
                timed = False
                await asyncio.sleep(0)
                continue
            model_t0, dt = self._model_start(dt, busy)
            deadline, dt = await self._wait_step(scheduled, t0, model_t0, dt)
            if self._stopped:
                break
            self.model_clock = model_t0 + dt
            self._model_anchor = deadline
            self.complete(scheduled, deadline)
            prev_end = deadline
            busy = True
            timed = True
            if clock() >= next_log:
                next_log = clock() + self.log_interval_s
                self.log_stats()

    async def _sleep_idle(self) -> None:
        """Nothing to run: sleep until an arrival, or until the first front end is over."""
        # the next arrival sets when the engine woke (an arrival aborted before it was
        # scheduled must not leave its time behind)
        self._wake_model = None
        self._wake.clear()
        if self._aborts:
            self._aborts = 0
        if self._pending:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self._pending[0][2] - time.monotonic())
        else:
            await self._wake.wait()

    def _wall_start(self, prev_end: float, busy: bool) -> float:
        """Wall time the next step starts: right after the last one while busy."""
        now = time.monotonic()
        t0 = prev_end if busy and prev_end > now - 0.05 else now
        if not busy and self._wake_wall is not None and self._wake_wall > now - 0.05:
            # the step woken from idle began when the front end was over, not when the
            # engine's timer got round to it
            t0 = min(t0, self._wake_wall)
        self._wake_wall = None
        return t0

    def _next_step(self) -> tuple[list[tuple[Seq, int]], float]:
        """The step a burst handed over, or a newly scheduled one."""
        if self._carry is not None:
            step, self._carry = self._carry, None
        else:
            step = self.schedule()
        self.steps += 1
        return step

    async def _retry_later(self) -> None:
        """Nothing fits (every request waits for memory held by aborted ones): retry soon."""
        self.metrics.num_waiting = len(self.waiting)
        self._wake.clear()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._wake.wait(), 0.01)

    def _model_start(self, dt: float, busy: bool) -> tuple[float, float]:
        """The step's start in model time, and its duration with any cost of waking.

        In model time a busy engine's steps follow each other exactly, however late the host
        runs them; an idle one starts when the request that woke it came, and late by what
        waking costs after that long idle (idle_wake_s, idle_wake_per_s)."""
        if busy:
            model_t0 = self.model_clock
        elif self._wake_model is not None:
            model_t0 = self._wake_model
            dt += self.p.idle_wake_s
            if self.p.idle_wake_per_s:
                idle = min(max(0.0, model_t0 - self.model_clock), self.p.idle_wake_cap_s)
                dt += self.p.idle_wake_per_s * idle
        else:
            # not woken from idle (a step after the retry of one that did not fit)
            model_t0 = self.model_now()
        self._wake_model = None
        return model_t0, dt

    async def _wait_step(
        self, scheduled: list[tuple[Seq, int]], t0: float, model_t0: float, dt: float
    ) -> tuple[float, float]:
        """Wait until the step is due; returns its wall deadline and its model duration,
        both longer if requests arrived during it (see `arrived`)."""
        clock = time.monotonic
        deadline = t0 + dt / self.speedup
        self._step_end_model = model_t0 + dt
        self._stepping, self._stretch = True, 0.0
        # Writing a step's tokens takes time; start early by half of it, so that tokens
        # leave spread around the deadline rather than all after it.
        emitting = sum(1 for seq, n in scheduled if seq.num_computed + n >= seq.total_len)
        lead = min(0.5 * self.emit_cost * emitting, MAX_LEAD_S, deadline - t0)
        target = deadline - lead
        while True:
            delay = target - clock()
            # Yield at least once per step, even to spin: steps shorter than the spin (a
            # high --speedup) would otherwise starve the loop, and arrivals, timers and
            # anything sharing the loop would wait until the engine went idle.
            await asyncio.sleep(delay - SPIN_S if delay > SPIN_S else 0)
            # The loop's timers have millisecond resolution: end the wait by spinning, so
            # the step starts on time rather than up to a millisecond late. The spin
            # yields to the loop: a request arriving in it is read now, on time, rather
            # than after the step (when, in model time, it would have missed its end).
            while clock() < target:  # noqa: ASYNC110 (a spin; an event has no deadline)
                await asyncio.sleep(0)
            if not self._stretch:
                break
            # a request arrived during the step and made it longer (`arrived`)
            x, self._stretch = self._stretch, 0.0
            dt += x
            deadline += x / self.speedup
            target += x / self.speedup
            self._step_end_model = model_t0 + dt
        self._stepping = False
        return deadline, dt

    def _burst(self, scheduled: list[tuple[Seq, int]], clock: Any) -> None:
        start = clock()
        self.write_gather_begin()
        try:
            while True:
                self.complete(scheduled, clock())
                if clock() - start >= BURST_S or not (self.running or self.waiting):
                    return
                scheduled, dt = self.schedule()
                if not scheduled or dt > 0.0:
                    # A step with model time (or nothing to do) goes through the timed path.
                    self._carry = (scheduled, dt)
                    return
                self.steps += 1
        finally:
            self.write_gather_end()

    def log_stats(self) -> None:
        m = self.metrics
        log.info(
            "sim: running=%d waiting=%d kv=%.1f%% gen_tokens=%d preemptions=%d "
            "emission lag p50=%.2fms p99=%.2fms max=%.2fms late_steps=%d",
            len(self.running),
            len(self.waiting),
            100 * self.pool.usage(),
            m.generation_tokens,
            m.preemptions,
            1e3 * m.fine_lag.quantile(0.5),
            1e3 * m.fine_lag.quantile(0.99),
            1e3 * m.fine_lag.max,
            m.step_overrun,
        )

    def shutdown(self) -> None:
        """Abort everything in flight (server stopping)."""
        self.stop()
        now = time.monotonic()
        for seq in [*self.running, *self.waiting, *(e[3] for e in self._pending)]:
            if not seq.finished:
                seq.aborted = True
                self._finish_stats(seq, "abort", now)
        self.running = []
        self.waiting = deque()
        self._pending = []
