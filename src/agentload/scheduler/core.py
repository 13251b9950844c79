"""Load control: closed loop (N active episodes) or open loop (timed arrivals).

The scheduler knows nothing about episodes: it hands a :class:`WorkItem` with its intended and
actual start times to a `run_one` coroutine and keeps the books. Stopping (limits reached, a
signal, `stop()`) stops issuing at once; in-flight episodes get `drain_timeout_s` to finish
before they are cancelled. An event-loop lag probe runs beside the work so the client's own
overhead is measured, not assumed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from array import array
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from agentload.scheduler.outage import OutageGate, OutageGaveUp
from agentload.scheduler.plan import EpisodePlan, WorkItem
from agentload.stats import describe

log = logging.getLogger("agentload.scheduler")

_now_ns = time.perf_counter_ns

RunOne = Callable[[WorkItem, int, int], Awaitable[Any]]
"""run_one(item, intended_start_ns, actual_start_ns); should not raise."""

StopReason = Literal["completed", "duration", "interrupted", "failed"]


@dataclass
class LoadSpec:
    mode: Literal["closed", "open"] = "closed"
    concurrency: int = 8
    rate: float | None = None
    burstiness: float = 1.0
    max_concurrency: int | None = None
    duration_s: float | None = None
    drain_timeout_s: float = 30.0
    lag_interval_s: float = 0.02
    seed: int = 0


@dataclass
class SchedulerReport:
    mode: str
    stop_reason: StopReason
    started: int = 0
    finished: int = 0
    cancelled: int = 0
    """Episodes still in flight after the drain timeout (cancelled, not recorded)."""
    not_started: int = 0
    """Open loop: arrivals that were queued (max_concurrency) when the run stopped."""
    elapsed_s: float = 0.0
    max_active: int = 0
    lag_s: dict[str, Any] = field(default_factory=dict)
    sched_delay_s: dict[str, Any] = field(default_factory=dict)
    rate_target: float | None = None
    rate_offered: float | None = None
    rate_achieved: float | None = None
    error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


def _describe(exc: BaseException) -> str:
    return str(exc) if isinstance(exc, OutageGaveUp) else repr(exc)


class LagMonitor:
    """Measures how late a periodic timer fires: the event loop's scheduling lag."""

    def __init__(self, interval_s: float = 0.02) -> None:
        self.interval_s = interval_s
        self.samples = array("d")
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._loop())

    async def _loop(self) -> None:
        interval = self.interval_s
        expected = time.perf_counter() + interval
        while True:
            await asyncio.sleep(interval)
            now = time.perf_counter()
            self.samples.append(max(0.0, now - expected))
            expected = now + interval

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    def recent_p99(self, n: int = 500) -> float | None:
        if not self.samples:
            return None
        tail = sorted(self.samples[-n:])
        return tail[min(len(tail) - 1, int(0.99 * (len(tail) - 1) + 0.5))]

    def summary(self) -> dict[str, Any]:
        d = describe(self.samples, (50, 90, 99, 99.9))
        d["interval_s"] = self.interval_s
        return d


class Scheduler:
    """Issues work items from a plan under closed- or open-loop control."""

    def __init__(
        self,
        plan: EpisodePlan,
        spec: LoadSpec,
        run_one: RunOne,
        *,
        lag: LagMonitor | None = None,
        gate: OutageGate | None = None,
    ) -> None:
        self.plan = plan
        self.gate = gate
        self.spec = spec
        self.run_one = run_one
        self.lag = lag or LagMonitor(spec.lag_interval_s)
        self.active = 0
        self.started = 0
        self.finished = 0
        self.max_active = 0
        self.sched_delays = array("d")
        self.t0_ns = 0
        self._stop_reason: StopReason | None = None
        self._stop = asyncio.Event()
        self._abort = asyncio.Event()
        self._failure: BaseException | None = None
        self._running: set[asyncio.Task[Any]] = set()  # tasks whose episode has started
        self._queued: set[asyncio.Task[Any]] = set()  # open loop: waiting for a slot
        self._first_start_ns: int | None = None
        self._last_start_ns: int | None = None
        self._last_intended_ns: int | None = None
        self._arrivals = 0

    # -- control ---------------------------------------------------------------------------

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    @property
    def stop_reason(self) -> StopReason | None:
        return self._stop_reason

    def stop(self, reason: StopReason = "interrupted") -> None:
        """Stop issuing new episodes; in-flight ones drain (bounded by drain_timeout_s)."""
        if self._stop_reason is None:
            self._stop_reason = reason
        self._stop.set()

    def abort(self) -> None:
        """Cancel in-flight episodes now (a second interrupt)."""
        self.stop("interrupted")
        self._abort.set()

    def elapsed_s(self) -> float:
        return (_now_ns() - self.t0_ns) / 1e9 if self.t0_ns else 0.0

    # -- running ---------------------------------------------------------------------------

    async def _run_item(self, item: WorkItem, intended_ns: int) -> None:
        actual = _now_ns()
        self.sched_delays.append((actual - intended_ns) / 1e9)
        if self._first_start_ns is None:
            self._first_start_ns = actual
        self._last_start_ns = actual
        self.started += 1
        self.active += 1
        if self.active > self.max_active:
            self.max_active = self.active
        try:
            await self.run_one(item, intended_ns, actual)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a harness bug, not an episode failure: stop the run
            log.exception("episode %s trial %s failed inside the harness", *item.key)
            if self._failure is None:
                self._failure = exc
            self.stop("failed")
        else:
            self.finished += 1
        finally:
            self.active -= 1

    async def _next_item(self, elapsed_s: float | None = None) -> tuple[WorkItem | None, bool]:
        """(the next item or None, whether it had to be waited for)."""
        if self._stop.is_set():
            return None, False
        item = self.plan.next(self.elapsed_s() if elapsed_s is None else elapsed_s)
        more = getattr(self.plan, "more", None)
        if item is None and more is not None:
            # A plan fed from elsewhere (a worker's grants): wait for the next item.
            return await more(self._stop), True
        return item, False

    async def _gate_open(self) -> bool:
        """Wait out an outage; False (and the run stops) when the gate gave up."""
        if self.gate is None or await self.gate.wait_open():
            return True
        if self._failure is None:
            self._failure = OutageGaveUp(f"endpoint outage: {self.gate.failed}")
        self.stop("failed")
        return False

    async def _worker(self) -> None:
        intended = _now_ns()
        while True:
            if not await self._gate_open():
                return
            item, waited = await self._next_item()
            if item is None:
                return
            if waited:
                # Granted by a driver that admits sessions globally: due when it came.
                intended = _now_ns()
            await self._run_item(item, intended)
            # Closed loop: the next episode is due the moment this one ends.
            intended = _now_ns()

    async def _closed(self) -> None:
        loop = asyncio.get_running_loop()
        workers = [loop.create_task(self._worker()) for _ in range(self.spec.concurrency)]
        self._running.update(workers)
        try:
            await asyncio.gather(*workers)
        finally:
            self._running.difference_update(workers)

    def _interarrival(self, rng: random.Random) -> float:
        rate = self.spec.rate or 1.0
        shape = self.spec.burstiness
        # Gamma(shape, 1/(rate*shape)) has mean 1/rate; shape 1 is the exponential (Poisson).
        return rng.gammavariate(shape, 1.0 / (rate * shape))

    async def _open(self) -> None:
        loop = asyncio.get_running_loop()
        rng = random.Random(f"{self.spec.seed}:arrivals")
        sem = asyncio.Semaphore(self.spec.max_concurrency) if self.spec.max_concurrency else None
        t_next = self.t0_ns + int(self._interarrival(rng) * 1e9)

        async def arrive(item: WorkItem, intended: int) -> None:
            task = asyncio.current_task()
            assert task is not None
            # During an outage arrivals wait (their scheduling delay shows it).
            if not await self._gate_open() or self._stop.is_set():
                return
            if sem is not None:
                async with sem:
                    self._queued.discard(task)
                    self._running.add(task)
                    await self._run_item(item, intended)
            else:
                self._queued.discard(task)
                self._running.add(task)
                await self._run_item(item, intended)

        while not self._stop.is_set():
            delay = (t_next - _now_ns()) / 1e9
            if delay > 0:
                # Wake on the arrival time or on stop, whichever comes first.
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._stop.wait(), delay)
                if self._stop.is_set():
                    break
            elapsed = (t_next - self.t0_ns) / 1e9
            item, _ = await self._next_item(elapsed)
            if item is None:
                break
            self._arrivals += 1
            self._last_intended_ns = t_next
            task = loop.create_task(arrive(item, t_next))
            self._queued.add(task)
            task.add_done_callback(self._forget)
            t_next += int(self._interarrival(rng) * 1e9)
        # No more arrivals: queued ones never started and are dropped when stopping.
        while self._running or self._queued:
            if self._stop.is_set():
                for t in list(self._queued):
                    t.cancel()
            pending = self._running | self._queued
            await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)

    def _forget(self, task: asyncio.Task[Any]) -> None:
        self._running.discard(task)
        self._queued.discard(task)

    async def run(self) -> SchedulerReport:
        loop = asyncio.get_running_loop()
        self.t0_ns = _now_ns()
        self.lag.start()
        body = loop.create_task(self._closed() if self.spec.mode == "closed" else self._open())
        timer = None
        if self.spec.duration_s is not None:
            timer = loop.call_later(self.spec.duration_s, self.stop, "duration")
        stop_wait = loop.create_task(self._stop.wait())
        try:
            await asyncio.wait({body, stop_wait}, return_when=asyncio.FIRST_COMPLETED)
            cancelled = 0
            if not body.done():
                abort_wait = loop.create_task(self._abort.wait())
                await asyncio.wait(
                    {body, abort_wait},
                    timeout=self.spec.drain_timeout_s,
                    return_when=asyncio.FIRST_COMPLETED,
                )
                abort_wait.cancel()
                if not body.done():
                    cancelled = self.active
                    log.warning("cancelling %d episode(s) still in flight", cancelled)
                    for t in list(self._running | self._queued):
                        t.cancel()
                    # The body then sees its children end and returns.
                    await asyncio.wait({body}, timeout=max(5.0, self.spec.drain_timeout_s))
                    body.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await body
        finally:
            stop_wait.cancel()
            if timer is not None:
                timer.cancel()
            await self.lag.stop()
        not_started = self._arrivals - self.started if self.spec.mode == "open" else 0
        return self._report(cancelled, not_started)

    def _report(self, cancelled: int, not_started: int) -> SchedulerReport:
        elapsed = (_now_ns() - self.t0_ns) / 1e9
        reason: StopReason = self._stop_reason or "completed"
        rep = SchedulerReport(
            mode=self.spec.mode,
            stop_reason=reason,
            started=self.started,
            finished=self.finished,
            cancelled=cancelled,
            not_started=max(0, not_started),
            elapsed_s=elapsed,
            max_active=self.max_active,
            lag_s=self.lag.summary(),
            sched_delay_s=describe(self.sched_delays, (50, 90, 99)),
            error=None if self._failure is None else _describe(self._failure),
        )
        if self.spec.mode == "open":
            rep.rate_target = self.spec.rate
            if self._arrivals and self._last_intended_ns:
                rep.rate_offered = self._arrivals / ((self._last_intended_ns - self.t0_ns) / 1e9)
            if self.started and self._last_start_ns and self._last_start_ns > self.t0_ns:
                rep.rate_achieved = self.started / ((self._last_start_ns - self.t0_ns) / 1e9)
        return rep
