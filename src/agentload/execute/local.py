"""The in-process executor."""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from agentload.scheduler import Scheduler, WorkItem
from agentload.session.host import SessionHost, load_spec, session_id_for

if TYPE_CHECKING:
    from agentload.client import CallRecord, EndpointConfig
    from agentload.execute.base import Executor, RunView


class LocalExecutor(Scheduler):
    """Sessions on this process's event loop: one Scheduler over one SessionHost."""

    def client_extra(self, cpu_s: float) -> dict[str, Any]:
        return {}  # this process's figures are the client block's own


async def open_local(
    run: RunView, endpoints: Mapping[str, EndpointConfig], stack: contextlib.AsyncExitStack
) -> Executor:
    """The run's sessions in this process, recorded as they end."""
    recorder, tracker = run.recorder, run.tracker

    def on_record(rec: CallRecord) -> None:
        recorder.record_call(rec)
        tracker.on_call(rec)

    host = await SessionHost.open(
        run.cfg, run.workload, endpoints, stack, on_record=on_record, say=run.opts.say, sim=run.sim
    )
    run.gate = host.gate
    tracker.outage = host.gate.status
    run_id, attempt = run.run_id, run.attempt

    async def run_one(item: WorkItem, intended_ns: int, actual_ns: int) -> None:
        sid = session_id_for(run_id, item, attempt)
        out = await host.run_item(
            item, sid, run_id=run_id, attempt=attempt, intended_ns=intended_ns, actual_ns=actual_ns
        )
        recorder.record_episode(out.session, out.trajectory)
        tracker.on_episode(out.session)

    sched = LocalExecutor(run.plan, load_spec(run.cfg, run.workers), run_one, gate=host.gate)
    host.sched = sched
    return sched
