"""The body every worker runs: the ordinary scheduler, fed by the driver's grants.

`run_worker(spec, channel)` builds the workload and one client per role from the spec, runs
the scheduler over a :class:`FeedPlan` (items arrive as grants) and streams records back in
batches. It does not know how it was started: a spawned process, a Ray actor.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import resource
import socket
import time
from collections import deque
from typing import Any

from agentload.client import CallRecord
from agentload.distributed.clock import ClockOffset, shift_call, shift_record
from agentload.distributed.protocol import (
    Abort,
    Assignment,
    Batch,
    CallBrief,
    Failed,
    Finished,
    Grant,
    Hello,
    NoMore,
    SessionDone,
    Stop,
    WorkerChannel,
    WorkerSpec,
    WorkerStats,
)
from agentload.outcome import say_stderr
from agentload.scheduler import Scheduler, WorkItem
from agentload.session.host import SessionHost, load_spec, session_id_for
from agentload.util import gc_tuned
from agentload.workloads.base import make_workload

log = logging.getLogger("agentload.worker")


class FeedPlan:
    """A plan whose items come from the driver: `next` takes what was granted, `more` waits
    for the next grant (or for the end).

    Idle scheduler workers wait in `more`; a grant wakes one waiter per item (not all of
    them: a worker may hold hundreds idle while its share is small)."""

    def __init__(self) -> None:
        self._queue: deque[Assignment] = deque()
        self._waiters: deque[asyncio.Future[None]] = deque()
        self._assigned: dict[WorkItem, Assignment] = {}
        self._stop_hook: asyncio.Task[Any] | None = None
        self.closed = False
        self.started = 0

    def feed(self, items: tuple[Assignment, ...]) -> None:
        self._queue.extend(items)
        self._wake(len(items))

    def close(self) -> None:
        self.closed = True
        self._wake(len(self._waiters))

    def _wake(self, n: int) -> None:
        while n > 0 and self._waiters:
            f = self._waiters.popleft()
            if not f.done():
                f.set_result(None)
                n -= 1

    def next(self, elapsed_s: float) -> WorkItem | None:
        if not self._queue:
            return None
        a = self._queue.popleft()
        self._assigned[a.item] = a
        self.started += 1
        return a.item

    async def more(self, stop: asyncio.Event) -> WorkItem | None:
        """Wait until an item is granted (it is returned), or the plan closes or the run
        stops (None)."""
        if self._stop_hook is None:
            self._stop_hook = asyncio.ensure_future(stop.wait())
            self._stop_hook.add_done_callback(lambda _t: self._wake(len(self._waiters)))
        loop = asyncio.get_running_loop()
        while not self._queue:
            if self.closed or stop.is_set():
                return None
            f: asyncio.Future[None] = loop.create_future()
            self._waiters.append(f)
            await f
        return self.next(0.0)

    def shut(self) -> None:
        if self._stop_hook is not None:
            self._stop_hook.cancel()

    def assignment(self, item: WorkItem) -> Assignment:
        return self._assigned.pop(item, None) or Assignment(item)


class Outbox:
    """Batches records for the driver: on a timer, when `batch_max` wait, and soon after a
    session commits (the driver grants the next item when it sees it)."""

    def __init__(self, spec: WorkerSpec, channel: WorkerChannel, plan: FeedPlan) -> None:
        self.spec = spec
        self.channel = channel
        self.plan = plan
        self.calls: list[bytes] = []
        self.briefs: list[CallBrief] = []
        self.sessions: list[SessionDone] = []
        self._sent_started = 0
        self._soon: asyncio.Handle | None = None
        self.n_calls = 0
        self.n_sessions = 0
        # A worker on another machine sends its records on the driver's clocks.
        mono, wall = spec.clock_offset_ns
        self._clock = ClockOffset(mono, wall, 0, 0) if mono or wall else None

    def call(self, rec: CallRecord) -> None:
        if self._clock is not None:
            rec = shift_call(rec, self._clock)
        self.calls.append(rec.to_json())
        self.briefs.append(CallBrief(rec.status, rec.completion_tokens, rec.ttft_s, rec.role))
        self.n_calls += 1
        if len(self.calls) >= self.spec.batch_max:
            self.flush()

    def session(self, done: SessionDone) -> None:
        if self._clock is not None:
            done = dataclasses.replace(done, session=shift_record(done.session, self._clock))
        self.sessions.append(done)
        self.n_sessions += 1
        if self._soon is None:
            # Sessions ending in the same loop turn share one message.
            self._soon = asyncio.get_running_loop().call_soon(self.flush)

    def flush(self, stats: WorkerStats | None = None) -> None:
        if self._soon is not None:
            self._soon.cancel()
            self._soon = None
        started = self.plan.started - self._sent_started
        if not (self.calls or self.sessions or started or stats):
            return
        self._sent_started = self.plan.started
        batch = Batch(self.spec.index, self.calls, self.briefs, self.sessions, started, stats)
        self.calls, self.briefs, self.sessions = [], [], []
        self.channel.send(batch)


def _stats(spec: WorkerSpec, t0: float, sched: Scheduler | None, out: Outbox) -> WorkerStats:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    lag = sched.lag if sched is not None else None
    return WorkerStats(
        worker=spec.index,
        pid=os.getpid(),
        host=socket.gethostname(),
        wall_s=time.perf_counter() - t0,
        cpu_s=ru.ru_utime + ru.ru_stime,
        active=sched.active if sched is not None else 0,
        lag_p99_s=lag.recent_p99() if lag is not None else None,
        lag_max_s=max(lag.samples) if lag is not None and lag.samples else None,
        sessions=out.n_sessions,
        calls=out.n_calls,
        max_rss_mb=ru.ru_maxrss / 1024.0,
    )


async def run_worker(spec: WorkerSpec, channel: WorkerChannel) -> None:
    """Run sessions for the driver until it says the plan is done (or stop / abort)."""
    t0 = time.perf_counter()
    plan = FeedPlan()
    out = Outbox(spec, channel, plan)
    try:
        async with contextlib.AsyncExitStack() as stack:
            host = await _setup(spec, out, stack)
            ru = resource.getrusage(resource.RUSAGE_SELF)
            ready = ru.ru_utime + ru.ru_stime
            channel.send(Hello(spec.index, os.getpid(), socket.gethostname(), startup_cpu_s=ready))
            sched = _scheduler(spec, host, plan, out)
            inbox = asyncio.ensure_future(_inbox(channel, plan, sched))
            ticker = asyncio.ensure_future(_ticker(spec, t0, sched, out))
            try:
                with gc_tuned(spec.tune_gc):
                    rep = await sched.run()
            finally:
                inbox.cancel()
                ticker.cancel()
                plan.shut()
            out.flush()
            channel.send(
                Finished(
                    spec.index,
                    rep.to_dict(),
                    list(sched.lag.samples),
                    _stats(spec, t0, sched, out),
                    host.gate.summary(),
                )
            )
    except Exception as e:  # the driver stops the run with this line
        log.debug("worker %d failed", spec.index, exc_info=True)
        out.flush()
        channel.send(Failed(spec.index, f"{type(e).__name__}: {e}" if str(e) else repr(e)))


async def _setup(spec: WorkerSpec, out: Outbox, stack: contextlib.AsyncExitStack) -> SessionHost:

    cfg = spec.cfg
    return await SessionHost.open(
        cfg,
        make_workload(cfg),
        spec.endpoints,
        stack,
        on_record=out.call,
        say=_say_for(spec.index),
    )


def _say_for(index: int) -> Any:
    return lambda msg: say_stderr(f"worker {index}: {msg}")


def _scheduler(spec: WorkerSpec, host: SessionHost, plan: FeedPlan, out: Outbox) -> Scheduler:
    async def run_one(item: WorkItem, intended_ns: int, actual_ns: int) -> None:
        a = plan.assignment(item)
        sid = session_id_for(spec.run_id, item, spec.attempt)
        if a.redo:
            sid += f"-redo{a.redo}"
        res = await host.run_item(
            item,
            sid,
            run_id=spec.run_id,
            attempt=spec.attempt,
            intended_ns=intended_ns,
            actual_ns=actual_ns,
        )
        out.session(SessionDone(a, res.session, res.trajectory))

    # This worker's share of the load; the driver's clock decides the duration.
    load = load_spec(
        spec.cfg,
        spec.slots,
        mode="open" if spec.rate is not None else "closed",
        rate=spec.rate,
        max_concurrency=spec.max_concurrency,
        duration_s=None,
        seed=spec.arrival_seed,
    )
    return host.scheduler(plan, load, run_one)


async def _inbox(channel: WorkerChannel, plan: FeedPlan, sched: Scheduler) -> None:
    while True:
        try:
            msg = await channel.recv()
        except Exception:  # an unreadable message: end as if the driver were gone (not hang)
            log.warning("worker: unreadable message from the driver", exc_info=True)
            msg = None
        if isinstance(msg, Grant):
            plan.feed(msg.items)
        elif isinstance(msg, NoMore):
            plan.close()
        elif isinstance(msg, Stop):
            sched.stop(msg.reason)
        elif isinstance(msg, Abort):
            sched.abort()
        elif msg is None:  # the driver is gone: nobody records what runs now
            sched.abort()
            return


async def _ticker(spec: WorkerSpec, t0: float, sched: Scheduler, out: Outbox) -> None:
    """Flush records on the batch interval; stats ride along on the stats interval."""
    last_stats = 0.0
    while True:
        await asyncio.sleep(spec.batch_interval_s)
        now = time.perf_counter()
        if now - last_stats >= spec.stats_interval_s:
            last_stats = now
            out.flush(_stats(spec, t0, sched, out))
        else:
            out.flush()
