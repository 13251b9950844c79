"""The driver ↔ worker protocol of a run spread over several workers.

The driver is the process `agentload run` started: it keeps the results folder (lock,
recorder), the plan, progress, resume and the summary. Workers run sessions: each one builds
the workload and its clients from a :class:`WorkerSpec` and runs the ordinary scheduler in its
own event loop, with a plan fed by the driver. Nothing here knows how workers are started or
how bytes travel: a :class:`Backend` does that (worker processes on this machine in
`agentload.distributed.process`; a Ray backend implements the same protocol).

The exchange, in order:

- the backend starts worker *i* with its spec; the worker answers :class:`Hello`;
- the driver sends :class:`Grant` messages: work items, each as an :class:`Assignment`. The
  driver is the admission control: in a closed loop a worker holds at most its share of the
  concurrency in granted, unfinished sessions; in an open loop it keeps a short buffer of
  items that the worker's own arrival process takes;
- the worker streams :class:`Batch` messages: finished calls and sessions (the session line is
  the commit point, as in a single process), how many granted items it started, and its
  :class:`WorkerStats` (CPU, event-loop lag, active sessions) at least every second;
- :class:`NoMore` says the plan is exhausted; :class:`Stop` stops issuing (a signal, the
  duration) and lets sessions in flight drain; :class:`Abort` cancels them;
- the worker ends with :class:`Finished` (its scheduler report and lag samples) or
  :class:`Failed`, and the backend reports :class:`Exited` once the worker is gone, after
  every message it sent.

A worker that exits without :class:`Finished` (killed, crashed, its node lost) has its granted
sessions that did not commit run again by the driver, with a new session id (`-redoN`), so a
session is recorded exactly once and the calls of the lost attempt stay as calls of an
unfinished session (set aside to `dropped/` by a later resume).

Every message is a plain picklable dataclass; `PROTOCOL_VERSION` changes when one does.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, NamedTuple, Protocol

if TYPE_CHECKING:
    from agentload.client import EndpointConfig
    from agentload.config import RunConfig
    from agentload.scheduler.plan import WorkItem

PROTOCOL_VERSION = 2

StopReason = Literal["completed", "duration", "interrupted", "failed"]


# ---- what a worker is started with --------------------------------------------------------


@dataclass
class WorkerSpec:
    """Everything one worker needs to run sessions of this run."""

    index: int
    """0-based; stable for the run (a replacement worker takes a new index)."""
    cfg: RunConfig
    """The resolved run configuration (with its secrets: the worker calls the endpoints)."""
    endpoints: Mapping[str, EndpointConfig]
    """By role, as the driver resolved them (the embedded simulator's URL, launched engines)."""
    run_id: str
    attempt: int
    """Resume attempt of the run (warmup session ids carry it)."""
    slots: int
    """Sessions in flight this worker may ever hold (its scheduler's concurrency); the
    driver's grants decide how many it actually holds."""
    rate: float | None = None
    """Open loop: this worker's share of the arrival rate (None: closed loop)."""
    max_concurrency: int | None = None
    """Open loop: this worker's share of the cap on active sessions."""
    arrival_seed: int = 0
    """Seeds this worker's arrival process (distinct per worker, fixed for the run)."""
    tune_gc: bool = True
    """Fewer, cheaper garbage collections while sessions run (as the driver's own loop)."""
    stats_interval_s: float = 1.0
    batch_interval_s: float = 0.05
    """Records are sent at least this often (and as soon as a session commits)."""
    batch_max: int = 512
    """…or as soon as this many records wait."""
    clock_offset_ns: tuple[int, int] = (0, 0)
    """(monotonic, wall) nanoseconds to add to this worker's clocks to get the driver's: set
    by a backend whose worker runs on another machine (agentload.distributed.clock);
    the worker moves its call and session records by it before it sends them."""
    version: int = PROTOCOL_VERSION


# ---- driver → worker ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Assignment:
    """One work item granted to a worker."""

    item: WorkItem
    redo: int = 0
    """>0: the item's earlier worker was lost before it committed; the session id gets
    `-redo{redo}`."""


@dataclass(frozen=True, slots=True)
class Grant:
    items: tuple[Assignment, ...]


@dataclass(frozen=True, slots=True)
class NoMore:
    """The plan is exhausted: run what was granted, then finish."""


@dataclass(frozen=True, slots=True)
class Stop:
    """Stop taking items; sessions in flight get the drain timeout."""

    reason: StopReason = "interrupted"


@dataclass(frozen=True, slots=True)
class Abort:
    """Cancel the sessions in flight now (a second interrupt)."""


ToWorker = Grant | NoMore | Stop | Abort


# ---- worker → driver ----------------------------------------------------------------------


@dataclass(slots=True)
class WorkerStats:
    """A worker's own health, cumulative since it started."""

    worker: int
    pid: int
    host: str
    wall_s: float
    cpu_s: float
    """User + system CPU seconds of the worker process."""
    active: int
    """Sessions in flight now."""
    lag_p99_s: float | None = None
    """Event-loop lag p99 over the recent samples."""
    lag_max_s: float | None = None
    sessions: int = 0
    calls: int = 0
    max_rss_mb: float = 0.0


@dataclass(frozen=True, slots=True)
class SessionDone:
    """A committed session: the assignment it ran, its session line and trajectory."""

    assignment: Assignment
    session: dict[str, Any]
    trajectory: dict[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class Hello:
    worker: int
    pid: int
    host: str
    version: int = PROTOCOL_VERSION
    startup_cpu_s: float = 0.0
    """CPU seconds the worker spent getting ready (interpreter, imports, workload, clients)."""


class CallBrief(NamedTuple):
    """What the driver's progress display reads of a call."""

    status: str
    completion_tokens: int | None
    ttft_s: float | None
    role: str | None = None


@dataclass(slots=True)
class Batch:
    """Records in the order they ended; calls of a session come before its SessionDone."""

    worker: int
    calls: list[bytes] = field(default_factory=list)
    """Each call's calls.jsonl line without its newline (`CallRecord.to_json()`): made once,
    in the worker, as a one-process run makes it once."""
    briefs: list[CallBrief] = field(default_factory=list)
    """The same calls' figures for progress, in the same order."""
    sessions: list[SessionDone] = field(default_factory=list)
    started: int = 0
    """Granted items the worker started since its previous batch."""
    stats: WorkerStats | None = None


@dataclass(slots=True)
class Finished:
    """The worker's scheduler ended (its last records were sent before this)."""

    worker: int
    report: dict[str, Any]
    """`SchedulerReport.to_dict()` of the worker's scheduler."""
    lag_samples: list[float]
    """Every event-loop lag sample of the worker (seconds)."""
    stats: WorkerStats
    outages: dict[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class Failed:
    """The worker could not run (bad setup, a harness error); the driver stops the run."""

    worker: int
    error: str


@dataclass(frozen=True, slots=True)
class Exited:
    """Sent by the backend, not the worker: the worker is gone (after all its messages)."""

    worker: int
    reason: str
    """'' after Finished; otherwise what is known ("exit status -9", "actor died: …")."""


FromWorker = Hello | Batch | Finished | Failed | Exited


# ---- the seams a transport implements -----------------------------------------------------


class Backend(Protocol):
    """Starts workers and carries messages; the driver does every piece of bookkeeping."""

    name: str

    async def start(self, spec: WorkerSpec) -> None:
        """Start worker `spec.index` (returns once it is launched, not once it said Hello)."""

    def send(self, worker: int, msg: ToWorker) -> None:
        """Queue `msg` for a worker; never blocks the driver's loop for long. A message to a
        worker that is gone is dropped."""

    async def receive(self) -> FromWorker:
        """The next message from any worker, in each worker's own order; an :class:`Exited`
        follows the last message of every worker that was started."""

    def kill(self, worker: int) -> None:
        """End a worker at once (its :class:`Exited` still follows)."""

    async def close(self) -> None:
        """Stop every worker still running and release the transport."""


class WorkerChannel(Protocol):
    """The worker's end of the transport."""

    def send(self, msg: FromWorker) -> None:
        """Send to the driver (may block briefly when the transport is full)."""

    async def recv(self) -> ToWorker | None:
        """The next message from the driver; None when the driver is gone."""
