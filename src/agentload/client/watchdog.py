"""Per-call deadlines (first token, idle, total) checked by one periodic timer per client.

A timer per call (call_later on start, cancel at the end) cost two trips through the event
loop's timer heap per request, and cancelled handles linger in the heap until popped. Instead
each client keeps the calls in flight in a set and one timer, running only while that set is
not empty, checks them every `period` seconds: a deadline fires between 0 and `period` late
(period = the shortest configured deadline / 20, at most 50 ms; 5 % of the deadline or 50 ms,
whichever is less). The stream loop only stores the time of the last chunk, an attribute
write, and never touches the event loop's timers.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

_now_ns = time.perf_counter_ns
PERIOD_MAX_S = 0.05
PERIOD_FRACTION = 1 / 20


class Watchdog:
    """The deadlines of one attempt; on expiry cancels its task and remembers why (`kind`)."""

    __slots__ = ("_task", "_ticker", "first", "idle", "kind", "last_ns", "t0", "total")

    def __init__(
        self,
        ticker: Ticker,
        task: asyncio.Task[Any],
        t0: int,
        first: int | None,
        idle: int | None,
        total: int | None,
    ) -> None:
        self._ticker = ticker
        self._task = task
        self.t0 = t0
        self.first = first  # deadlines in ns, None when disabled
        self.idle = idle
        self.total = total
        self.last_ns: int | None = None  # None until the first token
        self.kind: str | None = None

    def due(self, now: int) -> str | None:
        """The deadline passed at `now`, if any."""
        if self.total is not None and now >= self.t0 + self.total:
            return "timeout_total"
        last = self.last_ns
        if last is None:
            if self.first is not None and now >= self.t0 + self.first:
                return "timeout_first_token"
        elif self.idle is not None and now >= last + self.idle:
            return "timeout_idle"
        return None

    def first_token(self, now: int) -> None:
        self.last_ns = now  # from now on the idle deadline counts

    def stop(self) -> None:
        self._ticker.active.discard(self)

    def uncancel(self) -> None:
        """Take back the cancellation this watchdog made (its timeout is reported instead)."""
        self._task.uncancel()


class Ticker:
    """The periodic check of one client's calls in flight, on one event loop."""

    __slots__ = ("_handle", "_loop", "active", "period")

    def __init__(self, loop: asyncio.AbstractEventLoop, shortest_s: float) -> None:
        self._loop = loop
        self.period = min(PERIOD_MAX_S, shortest_s * PERIOD_FRACTION)
        self.active: set[Watchdog] = set()
        self._handle: asyncio.TimerHandle | None = None

    def watch(
        self, t0: int, first: float | None, idle: float | None, total: float | None
    ) -> Watchdog | None:
        """A watchdog for the current task's attempt started at `t0` (ns); None when no task
        of this ticker's loop is running (the caller is on another loop).

        Asked of this loop, not of the running one: asyncio.current_task() without a loop
        costs a getpid() system call (CPython 3.11 checks the pid), once per call."""
        task = asyncio.current_task(self._loop)
        if task is None:
            return None
        dog = Watchdog(
            self,
            task,
            t0,
            None if first is None else int(first * 1e9),
            None if idle is None else int(idle * 1e9),
            None if total is None else int(total * 1e9),
        )
        if dog.first is not None or dog.idle is not None or dog.total is not None:
            self.active.add(dog)
            if self._handle is None:
                self._handle = self._loop.call_later(self.period, self._tick)
        return dog

    def _tick(self) -> None:
        now = _now_ns()
        active = self.active
        fired = []
        for dog in active:
            kind = dog.due(now)
            if kind is not None:
                dog.kind = kind
                fired.append(dog)
        for dog in fired:
            active.discard(dog)
            dog._task.cancel()
        self._handle = self._loop.call_later(self.period, self._tick) if active else None
