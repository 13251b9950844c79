"""The Executor protocol: what the runner asks of whatever runs its sessions."""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from agentload.client import EndpointConfig
    from agentload.config import RunConfig
    from agentload.results.recorder import Recorder
    from agentload.scheduler import ProgressTracker, SchedulerReport
    from agentload.scheduler.core import StopReason
    from agentload.workloads.base import Workload


class RunView(Protocol):
    """What an executor reads of the run it serves (the runner's RunState has it all)."""

    cfg: RunConfig
    workload: Workload
    plan: Any
    """The scheduler's plan: `next(elapsed_s)` hands out the next WorkItem."""
    recorder: Recorder
    tracker: ProgressTracker
    opts: Any
    """The run's RunOptions (`say`, the progress settings)."""
    workers: int
    """Closed loop: sessions in flight (the configured concurrency, capped at the plan)."""
    processes: tuple[int, int]
    """Worker processes to start, and the most `auto` may grow to."""
    attempt: int
    sim: Any
    gate: Any

    @property
    def run_id(self) -> str: ...


class Lag(Protocol):
    """The event loop's lateness where sessions run (the worst over workers)."""

    @property
    def samples(self) -> Sequence[float]: ...

    def recent_p99(self, n: int = 500) -> float | None: ...


class Executor(Protocol):
    """Runs a run's plan of sessions and says how it went."""

    @property
    def lag(self) -> Lag: ...

    @property
    def active(self) -> int:
        """Sessions in flight now."""
        ...

    @property
    def stopping(self) -> bool: ...

    def stop(self, reason: StopReason = "interrupted") -> None:
        """Issue nothing more; sessions in flight drain (for `load.drain_timeout_s`)."""
        ...

    def abort(self) -> None:
        """Cancel the sessions in flight now."""
        ...

    async def run(self) -> SchedulerReport:
        """Run the plan to its end (or the stop); the report of the whole run."""
        ...

    def client_extra(self, cpu_s: float) -> dict[str, Any]:
        """Its own entries of summary.json's `client` block (`cpu_s`: this process's)."""
        ...


ExecutorFactory = Callable[
    [RunView, Mapping[str, "EndpointConfig"], contextlib.AsyncExitStack], Awaitable[Executor]
]
"""(run state, endpoints, exit stack) -> an executor for the run, with whatever it opened
(clients, workers, scrapers of its own) on the stack."""
