"""The driver's bookkeeping for a run over several workers.

:class:`Coordinator` stands where a one-process run has its `Scheduler` (the runner stops,
aborts and reads it the same way): it starts the workers through a `Backend`, grants them
items of the run's plan under the global load, writes their records through the run's
recorder and progress tracker, runs again the sessions of a worker that was lost, and watches
each worker's CPU and event-loop lag.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from array import array
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from agentload.client import EndpointConfig
from agentload.distributed.protocol import (
    Abort,
    Assignment,
    Backend,
    Batch,
    Exited,
    Failed,
    Finished,
    FromWorker,
    Grant,
    Hello,
    NoMore,
    Stop,
    StopReason,
    WorkerSpec,
    WorkerStats,
)
from agentload.distributed.shares import arrival_seed, split_evenly, split_rate
from agentload.execute.base import RunView
from agentload.scheduler import SchedulerReport, WorkItem
from agentload.stats import describe

CPU_SATURATED = 0.80
"""A worker using this share of a core (or more) over a stats window is close to its limit
(the report's client-health threshold)."""
LAG_SATURATED_S = 0.050
SATURATED_WINDOWS = 3
"""Consecutive stats windows over a threshold before a worker counts as saturated."""
OPEN_BUFFER_S = 0.5
"""Open loop: seconds of a worker's arrivals granted ahead."""
STOP_GRACE_S = 15.0
"""After the drain timeout: how long workers get to finish before they are killed."""


@dataclass
class WorkerState:
    index: int
    rate: float | None = None
    launched: bool = False
    hello: bool = False
    startup_cpu_s: float | None = None
    share: int = 0
    outstanding: dict[WorkItem, Assignment] = field(default_factory=dict)
    """Granted items whose session line has not arrived."""
    unstarted: int = 0
    pid: int | None = None
    host: str | None = None
    stats: WorkerStats | None = None
    last: tuple[float, float] | None = None
    """(wall_s, cpu_s) of the previous stats, for the CPU share of a window."""
    cpu_share: float | None = None
    hot: int = 0
    saturated: bool = False
    finished: bool = False
    exit: str | None = None
    report: dict[str, Any] | None = None
    outages: dict[str, Any] | None = None

    @property
    def alive(self) -> bool:
        return self.exit is None


class MergedLag:
    """The workers' event-loop lag, read like a Scheduler's LagMonitor."""

    def __init__(self, workers: Mapping[int, WorkerState]) -> None:
        self._workers = workers
        self.samples = array("d")

    def recent_p99(self, n: int = 500) -> float | None:
        vals = [
            w.stats.lag_p99_s
            for w in self._workers.values()
            if w.alive and w.stats is not None and w.stats.lag_p99_s is not None
        ]
        return max(vals) if vals else None


class Coordinator:
    """Runs the plan on workers; quacks like a Scheduler for the runner."""

    def __init__(
        self,
        run: RunView,
        endpoints: Mapping[str, EndpointConfig],
        backend: Backend,
        workers: int,
        *,
        max_workers: int | None = None,
    ) -> None:
        self.state = run
        self.cfg = run.cfg
        self.plan = run.plan
        self.endpoints = dict(endpoints)
        self.backend = backend
        self.initial = workers
        self.max_workers = max_workers or workers
        """Auto mode: workers may be added up to this many when one saturates."""
        self.concurrency = run.workers
        self.workers: dict[int, WorkerState] = {}
        self.lag = MergedLag(self.workers)
        self.started = 0
        self.finished = 0
        self.restarts = 0
        self.max_restarts = max(2, workers)
        self.sched_delays = array("d")
        self.max_active = 0
        self.t0 = 0.0
        self._redo: deque[Assignment] = deque()
        self._exhausted = False
        self._no_more_sent = False
        self._stop_reason: StopReason | None = None
        self._aborted = False
        self._failure: str | None = None
        self._kill_timer: asyncio.TimerHandle | None = None
        self._next_index = 0
        self._launching: set[asyncio.Task[None]] = set()
        """Workers started mid-run (auto growth, replacements) whose start has not returned."""
        open_loop = self.cfg.load.mode == "open"
        self._rates = split_rate(self.cfg.load.rate or 0.0, workers) if open_loop else None
        mc = self.cfg.load.max_concurrency
        self._max_conc = split_evenly(mc, workers) if open_loop and mc else None

    # -- what the runner reads -------------------------------------------------------------

    @property
    def active(self) -> int:
        return sum(w.stats.active for w in self.workers.values() if w.alive and w.stats)

    @property
    def stopping(self) -> bool:
        return self._stop_reason is not None

    def stop(self, reason: StopReason = "interrupted") -> None:
        if self._stop_reason is not None:
            return
        self._stop_reason = reason
        for w in self._alive():
            if w.launched:  # one still starting is told by _launch
                self.backend.send(w.index, Stop(reason))
        loop = asyncio.get_running_loop()
        grace = self.cfg.load.drain_timeout_s + STOP_GRACE_S
        self._kill_timer = loop.call_later(grace, self._kill_all)

    def client_extra(self, cpu_s: float) -> dict[str, Any]:
        return client_extra(self, cpu_s)

    def abort(self) -> None:
        self.stop("interrupted")
        if not self._aborted:
            self._aborted = True
            for w in self._alive():
                if w.launched:
                    self.backend.send(w.index, Abort())

    def _kill_all(self) -> None:
        for w in self._alive():
            self.backend.kill(w.index)

    def elapsed_s(self) -> float:
        return time.perf_counter() - self.t0 if self.t0 else 0.0

    # -- the run ---------------------------------------------------------------------------

    async def run(self) -> SchedulerReport:
        loop = asyncio.get_running_loop()
        timer = None
        try:
            first = [
                self._add(self._rates[i] if self._rates else None, i) for i in range(self.initial)
            ]
            for w, spec in first:
                await self._launch(w, spec, grant=False)
            # The run's clock starts once every worker is up (spawned, imported, prepared),
            # as a one-process run's starts once its clients are.
            while any(w.alive and not w.hello for w in self.workers.values()):
                msg = await self._receive()
                if msg is not None:
                    self._on(msg)
            self.t0 = time.perf_counter()
            if self.cfg.load.duration_s is not None:
                timer = loop.call_later(self.cfg.load.duration_s, self.stop, "duration")
            for w in self._alive():
                self._refill(w)
            while any(w.alive for w in self.workers.values()):
                msg = await self._receive()
                if msg is not None:
                    self._on(msg)
        finally:
            if timer is not None:
                timer.cancel()
            if self._kill_timer is not None:
                self._kill_timer.cancel()
            for task in list(self._launching):  # only when the run itself was cancelled
                task.cancel()
            await self.backend.close()
        return self._report()

    async def _receive(self) -> FromWorker | None:
        """The next message; None when a background start ended first (a failed start may
        leave no worker to send anything, and the loop must see that)."""
        if not self._launching:
            return await self.backend.receive()
        get = asyncio.ensure_future(self.backend.receive())
        done, _ = await asyncio.wait({get, *self._launching}, return_when=asyncio.FIRST_COMPLETED)
        if get in done:
            return get.result()
        get.cancel()  # nothing was taken from the queue
        with contextlib.suppress(asyncio.CancelledError):
            await get
        return None

    def _add(self, rate: float | None, slot: int) -> tuple[WorkerState, WorkerSpec]:
        """A new worker's state and spec; the closed loop's shares are split again."""
        idx = self._next_index
        self._next_index += 1
        w = WorkerState(idx, rate=rate)
        self.workers[idx] = w
        self._reshare()
        ld = self.cfg.load
        spec = WorkerSpec(
            index=idx,
            cfg=self.cfg,
            endpoints=self.endpoints,
            run_id=self.state.run_id,
            attempt=self.state.attempt,
            slots=self.concurrency if rate is None else (ld.max_concurrency or 1_000_000),
            rate=rate,
            max_concurrency=self._max_conc[slot] if self._max_conc else None,
            arrival_seed=arrival_seed(self.cfg.workload.seed, idx),
            tune_gc=self.state.opts.tune_gc,
        )
        return w, spec

    async def _launch(self, w: WorkerState, spec: WorkerSpec, *, grant: bool = True) -> None:
        await self.backend.start(spec)
        w.launched = True
        # What the others were told while this one started (a backend drops a message to a
        # worker it has not started yet): without it the worker would wait for good.
        if self.stopping:  # a signal while it started
            self.backend.send(w.index, Stop(self._stop_reason or "interrupted"))
            if self._aborted:
                self.backend.send(w.index, Abort())
            return
        if self._no_more_sent:  # the plan ended while it started: it finishes at once
            self.backend.send(w.index, NoMore())
            return
        if not grant:
            return
        for other in self._alive():
            self._refill(other)

    def _spawn(self, rate: float | None, slot: int) -> None:
        """Start a worker in the background. Its state exists from now on, so the run waits
        for its Exited, and the plan's end (NoMore) reaches it whenever its start returns."""
        w, spec = self._add(rate, slot)
        task = asyncio.get_running_loop().create_task(self._launch_later(w, spec))
        self._launching.add(task)
        task.add_done_callback(self._launching.discard)

    async def _launch_later(self, w: WorkerState, spec: WorkerSpec) -> None:
        try:
            await self._launch(w, spec)
        except asyncio.CancelledError:
            raise
        except Exception as e:  # it never ran: nothing of it to wait for
            w.exit = f"could not start: {type(e).__name__}: {e}"
            self.state.opts.say(f"worker {w.index} {w.exit}")
            alive = self._alive()
            if not alive:
                if self._failure is None:
                    self._failure = f"worker {w.index} {w.exit} and no worker is left"
                self.stop("failed")
                return
            self._reshare()
            for other in alive:
                self._refill(other)

    def _alive(self) -> list[WorkerState]:
        return [w for w in self.workers.values() if w.alive]

    def _reshare(self) -> None:
        """Closed loop: the concurrency split over the workers alive, in index order."""
        alive = self._alive()
        if not alive or self._rates is not None:
            return
        for w, share in zip(alive, split_evenly(self.concurrency, len(alive)), strict=True):
            w.share = share

    # -- grants ----------------------------------------------------------------------------

    def _take(self) -> Assignment | None:
        if self.stopping:
            return None
        if self._redo:
            return self._redo.popleft()
        if self._exhausted:
            return None
        item = self.plan.next(self.elapsed_s())
        if item is None:
            self._exhausted = True
            return None
        return Assignment(item)

    def _refill(self, w: WorkerState) -> None:
        if not w.alive or not w.launched or self.stopping:
            return
        grant: list[Assignment] = []
        if w.rate is None:
            # Its share, and never more than the concurrency in all (while shares move).
            in_flight = sum(len(x.outstanding) for x in self.workers.values())
            room = min(w.share - len(w.outstanding), self.concurrency - in_flight)
        else:
            room = max(2, math.ceil(w.rate * OPEN_BUFFER_S)) - w.unstarted
        for _ in range(room):
            a = self._take()
            if a is None:
                break
            grant.append(a)
            w.outstanding[a.item] = a
        if grant:
            w.unstarted += len(grant)
            self.backend.send(w.index, Grant(tuple(grant)))
        self._maybe_done()

    def _maybe_done(self) -> None:
        """Every granted item committed and nothing left: the workers may finish."""
        if self._no_more_sent or self._redo or not self._exhausted:
            return
        if any(w.outstanding for w in self.workers.values() if w.alive):
            return
        self._no_more_sent = True
        for w in self._alive():
            if w.launched:  # one still starting is told by _launch
                self.backend.send(w.index, NoMore())

    # -- messages --------------------------------------------------------------------------

    def _on(self, msg: FromWorker) -> None:
        w = self.workers.get(msg.worker)
        if w is None:
            return
        if isinstance(msg, Batch):
            self._on_batch(w, msg)
        elif isinstance(msg, Hello):
            w.pid, w.host, w.hello = msg.pid, msg.host, True
            w.startup_cpu_s = msg.startup_cpu_s
        elif isinstance(msg, Finished):
            w.finished = True
            w.report = msg.report
            w.outages = msg.outages
            self.lag.samples.extend(msg.lag_samples)
            self._on_stats(w, msg.stats)
        elif isinstance(msg, Failed):
            if self._failure is None:
                self._failure = f"worker {w.index}: {msg.error}"
            self.stop("failed")
        elif isinstance(msg, Exited):
            self._on_exit(w, msg.reason)

    def _on_batch(self, w: WorkerState, b: Batch) -> None:
        rec, tracker = self.state.recorder, self.state.tracker
        for line in b.calls:
            rec.record_call(line)
        for brief in b.briefs:
            tracker.on_call(brief)
        for done in b.sessions:
            rec.record_episode(done.session, done.trajectory)
            tracker.on_episode(done.session)
            w.outstanding.pop(done.assignment.item, None)
            self.finished += 1
            delay = done.session.get("sched_delay_s")
            if isinstance(delay, float):
                self.sched_delays.append(delay)
        w.unstarted -= b.started
        self.started += b.started
        if b.stats is not None:
            self._on_stats(w, b.stats)
        if b.sessions or b.started:
            self._refill(w)
            if b.sessions and self._rates is None:
                for other in self._alive():  # a slot freed here may be another's share
                    if other is not w:
                        self._refill(other)

    def _on_stats(self, w: WorkerState, s: WorkerStats) -> None:
        w.stats = s
        if w.last is not None and s.wall_s > w.last[0]:
            w.cpu_share = (s.cpu_s - w.last[1]) / (s.wall_s - w.last[0])
        w.last = (s.wall_s, s.cpu_s)
        self.max_active = max(self.max_active, self.active)
        hot = (w.cpu_share or 0.0) >= CPU_SATURATED or (s.lag_p99_s or 0.0) > LAG_SATURATED_S
        w.hot = w.hot + 1 if hot else 0
        if w.hot >= SATURATED_WINDOWS and not w.saturated and not self.stopping:
            w.saturated = True
            self._on_saturated(w)

    def _on_saturated(self, w: WorkerState) -> None:
        say = self.state.opts.say
        lag = (w.stats.lag_p99_s if w.stats else None) or 0.0
        what = f"CPU {100 * (w.cpu_share or 0):.0f} % of a core, loop lag p99 {lag * 1e3:.0f} ms"
        alive = len(self._alive())
        # Not once the plan is handed out: a new worker would get nothing to run.
        ending = self._exhausted or self._no_more_sent
        if self._rates is None and alive < self.max_workers and alive < self.concurrency:
            if ending:
                return
            say(f"worker {w.index} is saturated ({what}): adding worker {self._next_index}")
            self._spawn(None, 0)
            return
        say(
            f"worker {w.index} is saturated ({what}): its latencies include client delay; "
            f"run with --workers {alive + 1} or more"
        )

    def _on_exit(self, w: WorkerState, reason: str) -> None:
        w.exit = reason or "done"
        if w.finished and (not reason or not w.outstanding):
            # Finished came after its last records: nothing of it is lost, whatever its exit
            # status says (a crash in teardown, a slow exit). A replacement would get nothing
            # to run and never be told the plan ended.
            return
        lost = sorted(w.outstanding.values(), key=lambda a: a.item.index)
        w.outstanding.clear()
        w.unstarted = 0
        say = self.state.opts.say
        if self.stopping:
            if lost:
                say(f"worker {w.index} exited ({w.exit}): {len(lost)} sessions left unfinished")
            return
        self._redo.extend(Assignment(a.item, a.redo + 1) for a in lost)
        if self.restarts < self.max_restarts:
            self.restarts += 1
            say(
                f"worker {w.index} exited ({w.exit}): {len(lost)} unfinished sessions run "
                f"again; starting worker {self._next_index} in its place"
            )
            self._spawn(w.rate, 0)
            return
        alive = self._alive()
        if not alive:
            self._failure = f"worker {w.index} exited ({w.exit}) and no worker is left"
            self.stop("failed")
            return
        say(f"worker {w.index} exited ({w.exit}): {len(lost)} sessions run again on the others")
        self._reshare()
        for other in alive:
            self._refill(other)

    # -- the report ------------------------------------------------------------------------

    def _report(self) -> SchedulerReport:

        reports = [w.report for w in self.workers.values() if w.report]
        mode = self.cfg.load.mode

        def total(key: str) -> float:
            return sum(float(r.get(key) or 0) for r in reports)

        rep = SchedulerReport(
            mode=mode,
            stop_reason=self._stop_reason or "completed",
            started=self.started,
            finished=self.finished,
            cancelled=int(total("cancelled")),
            not_started=int(total("not_started")),
            elapsed_s=self.elapsed_s(),
            max_active=max(self.max_active, max((r["max_active"] for r in reports), default=0)),
            lag_s={**describe(self.lag.samples, (50, 90, 99, 99.9)), **self._lag_interval()},
            sched_delay_s=describe(self.sched_delays, (50, 90, 99)),
            error=self._failure,
        )
        if mode == "open":
            rep.rate_target = self.cfg.load.rate
            rep.rate_offered = total("rate_offered") or None
            rep.rate_achieved = total("rate_achieved") or None
        return rep

    def _lag_interval(self) -> dict[str, Any]:
        return {"interval_s": self.cfg.load.lag_interval_s}

    def workers_block(self) -> list[dict[str, Any]]:
        """summary.json client.workers: each worker's own health."""
        out = []
        for w in self.workers.values():
            s = w.stats
            lag = (w.report or {}).get("lag_s") or {}
            out.append(
                {
                    "worker": w.index,
                    "pid": w.pid,
                    "host": w.host,
                    "sessions": s.sessions if s else 0,
                    "calls": s.calls if s else 0,
                    "wall_s": s.wall_s if s else None,
                    "cpu_s": s.cpu_s if s else None,
                    "startup_cpu_s": w.startup_cpu_s,
                    "cpu_share": (s.cpu_s / s.wall_s) if s and s.wall_s else None,
                    "max_rss_mb": s.max_rss_mb if s else None,
                    "event_loop_lag_s": {k: lag.get(k) for k in ("p50", "p99", "max")},
                    "saturated": w.saturated,
                    "exit": w.exit,
                }
            )
        return out

    def outages(self) -> dict[str, Any] | None:
        got = [w.outages for w in self.workers.values() if w.outages]
        return got[0] if len(got) == 1 else ({"workers": got} if got else None)


def coordinator(
    run: RunView, endpoints: Mapping[str, EndpointConfig], backend: Backend
) -> Coordinator:
    """The run's coordinator over `backend`'s workers: processes on this machine
    (ProcessBackend) or Ray actors (agentload.integrations.ray)."""
    start, top = run.processes
    return Coordinator(run, endpoints, backend, start, max_workers=top)


def client_extra(coord: Coordinator, driver_cpu_s: float) -> dict[str, Any]:
    """summary.json client entries of a run over workers: each worker's health, and the
    client's CPU over every process (`cpu_s` stays the driver's own)."""
    workers = coord.workers_block()
    cpu = driver_cpu_s + sum(w["cpu_s"] or 0.0 for w in workers)
    extra: dict[str, Any] = {
        "workers": workers,
        "cpu_s_all_processes": cpu,
        "outages": coord.outages(),
    }
    clocks = getattr(coord.backend, "clock_block", None)
    if clocks is not None:  # workers on other machines: their clocks' offsets and bounds
        extra["clock_offsets"] = clocks()
    return extra


def describe_workers(client: Mapping[str, Any]) -> str | None:
    """One line on each worker's share of the work and its health, for the console."""
    workers = client.get("workers")
    if not isinstance(workers, list) or not workers:
        return None

    def one(w: Mapping[str, Any]) -> str:
        share = w.get("cpu_share")
        lag = (w.get("event_loop_lag_s") or {}).get("p99")
        return (
            f"{w.get('worker')}: {w.get('sessions', 0)} sessions, CPU "
            + ("-" if share is None else f"{share * 100:.0f}%")
            + ", loop lag p99 "
            + ("-" if lag is None else f"{lag * 1e3:.0f} ms")
            + ("" if w.get("exit") in ("done", None) else f", {w.get('exit')}")
        )

    return f"workers ({len(workers)}): " + "; ".join(one(w) for w in workers)
