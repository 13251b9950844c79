"""The session host: what running sessions needs, built once for every executor.

Whether sessions run in the run's own process, in worker processes or on Ray actors
(agentload.execute), each place that runs them opens one `SessionHost`: the workload
(prepared for the endpoints), a client per role, the outage gate, and the scheduler that
issues the plan. `run_item` runs one planned session with its infrastructure retries and
stamps the run's fields on its record, so a session line reads the same whichever process
wrote it.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import msgspec

from agentload.client import CallRecord, ChatClient, EndpointConfig
from agentload.config import RunConfig
from agentload.results.records import Line
from agentload.scheduler import LoadSpec, Scheduler, WorkItem
from agentload.scheduler.core import RunOne
from agentload.scheduler.outage import OutageGate, OutagePolicy, http_probe, probe_urls
from agentload.workloads.base import SessionOutcome, Workload

Say = Callable[[str], None]


def session_id_for(run_id: str, item: WorkItem, attempt: int) -> str:
    """A session's id: the run's, the task's and the trial's (warmup: its place and attempt)."""
    task = item.task_id.replace("/", "-")
    if item.warmup:
        # Warmup repeats on resume, so its ids carry the attempt to stay unique.
        return f"{run_id}-warmup{attempt}-{item.index}-{task}"
    return f"{run_id}-{task}-t{item.trial}"


def stamp_session(
    session: Line | Mapping[str, Any],
    run_id: str,
    item: WorkItem,
    attempt: int,
    intended_ns: int,
    actual_ns: int,
) -> Line | dict[str, Any]:
    """A new session record with the run's fields (whichever process ran the session); the
    one given is left as it is. A record class of agentload.results.records is rebuilt as
    itself; another workload's mapping as a dict."""
    delay_s = (actual_ns - intended_ns) / 1e9
    if isinstance(session, Line):
        return msgspec.structs.replace(
            session,
            run_id=run_id,
            warmup=item.warmup,
            attempt=attempt,  # groups the monotonic clock's records
            intended_start_ns=intended_ns,
            sched_delay_s=delay_s,
        )
    return {
        **session,
        "run_id": run_id,
        "warmup": item.warmup,
        "attempt": attempt,
        "intended_start_ns": intended_ns,
        "sched_delay_s": delay_s,
    }


def line_of(record: Line | Mapping[str, Any]) -> dict[str, Any]:
    """The JSON object a record is written as (built once; the recorder encodes it). A
    workload's own dict is that object already (read from here on, never edited)."""
    if isinstance(record, Line):
        return record.line()
    return record if type(record) is dict else dict(record)


@dataclass(frozen=True, slots=True)
class SessionLines:
    """A finished session as it is written: its stamped session line and its trajectory."""

    session: dict[str, Any]
    trajectory: dict[str, Any] | None = None


def load_spec(cfg: RunConfig, concurrency: int, **part: Any) -> LoadSpec:
    """The scheduler's load from the run's `load` section; `part` narrows it to a worker's
    share (its slots, rate and seed)."""
    ld = cfg.load
    spec: dict[str, Any] = {
        "mode": ld.mode,
        "concurrency": concurrency,
        "rate": ld.rate,
        "burstiness": ld.burstiness,
        "max_concurrency": ld.max_concurrency,
        "duration_s": ld.duration_s,
        "drain_timeout_s": ld.drain_timeout_s,
        "lag_interval_s": ld.lag_interval_s,
        "seed": cfg.workload.seed,
    }
    return LoadSpec(**{**spec, **part})


def make_gate(
    cfg: RunConfig, endpoints: Mapping[str, EndpointConfig], sim: Any, say: Say
) -> OutageGate:
    """The outage gate of a run: probes the endpoints' model lists; an embedded simulator
    whose process exited can never come back, so the run stops at once."""

    def sim_gone() -> str | None:
        proc = getattr(sim, "proc", None)
        if proc is None or proc.poll() is None:
            return None
        return f"the embedded simulator exited (status {proc.returncode}; see sim.log)"

    return OutageGate(
        http_probe(probe_urls(endpoints)),
        OutagePolicy(give_up_s=cfg.load.outage_timeout_s),
        say=say,
        gone=sim_gone if sim is not None else None,
    )


class SessionHost:
    """A workload ready to run sessions against its endpoints, with its clients and gate."""

    def __init__(
        self,
        cfg: RunConfig,
        workload: Workload,
        gate: OutageGate,
        clients: Mapping[str, ChatClient],
    ) -> None:
        self.cfg = cfg
        self.workload = workload
        self.gate = gate
        self.clients = dict(clients)
        self.sched: Scheduler | None = None
        """The scheduler issuing this host's sessions (stopping: no infrastructure retry)."""

    @classmethod
    async def open(
        cls,
        cfg: RunConfig,
        workload: Workload,
        endpoints: Mapping[str, EndpointConfig],
        stack: contextlib.AsyncExitStack,
        *,
        on_record: Callable[[CallRecord], None],
        say: Say,
        sim: Any = None,
    ) -> SessionHost:
        """Prepare `workload` for `endpoints`, open the gate and a client per role; `stack`
        closes them. Every call record goes to `on_record` and to the gate."""
        stack.push_async_callback(workload.close)
        await workload.prepare(endpoints, embedded=cfg.embedded)
        gate = make_gate(cfg, endpoints, sim, say)
        stack.push_async_callback(gate.close)

        def record(rec: CallRecord) -> None:
            on_record(rec)
            gate.on_record(rec)

        clients = {
            role: await stack.enter_async_context(ChatClient(ep, on_record=record))
            for role, ep in endpoints.items()
        }
        return cls(cfg, workload, gate, clients)

    def scheduler(self, plan: Any, spec: LoadSpec, run_one: RunOne) -> Scheduler:
        """The scheduler that issues `plan` at `spec`'s load through `run_one`."""
        self.sched = Scheduler(plan, spec, run_one, gate=self.gate)
        return self.sched

    async def run_item(
        self,
        item: WorkItem,
        sid: str,
        *,
        run_id: str,
        attempt: int,
        intended_ns: int,
        actual_ns: int,
    ) -> SessionLines:
        """One planned session, retried through outages, stamped with the run's fields: its
        session and trajectory as the lines written."""
        out = await self.run_with_infra_retries(item, sid)
        session = stamp_session(out.session, run_id, item, attempt, intended_ns, actual_ns)
        traj = out.trajectory
        return SessionLines(line_of(session), None if traj is None else line_of(traj))

    async def run_with_infra_retries(self, item: WorkItem, sid: str) -> SessionOutcome:
        """One session; when it ended on infrastructure errors during an outage, it is
        re-queued (not burned): wait the outage out and run it again, up to
        `load.retry_infra` times."""
        gate, retries = self.gate, self.cfg.load.retry_infra
        tries = 0
        while True:
            # A rerun is a new session; the failed one's calls stay unfinished.
            began = time.monotonic()
            out = await self.workload.run_session(
                item, sid if tries == 0 else f"{sid}-rerun{tries}", self.clients
            )
            sched = self.sched
            if (
                out.session.get("termination") != "infra_error"
                or tries >= retries
                or sched is None
                or sched.stopping
                # A lone failure of a live endpoint is a measured failure.
                or not await gate.confirm(began)
                or not await gate.wait_open()
                or sched.stopping
            ):
                return out
            gate.note_retry()
            tries += 1
