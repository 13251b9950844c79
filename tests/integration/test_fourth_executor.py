"""A fourth executor plugs into the runner through the Executor seam alone: this one runs
each session on a thread with an event loop of its own (docs/architecture.md walks through
it). The runner, the session host and the results are untouched."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from array import array
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import orjson

from agentload.client import CallRecord, EndpointConfig
from agentload.config import build_config
from agentload.runner import execute_run
from agentload.scheduler import SchedulerReport, WorkItem
from agentload.session import SessionHost, session_id_for
from agentload.workloads.base import make_workload


class _Lag:
    samples: array[float] = array("d")

    def recent_p99(self, n: int = 500) -> float | None:
        return None


class _Lane:
    """One thread with its own event loop and its own session host (clients, workload)."""

    def __init__(self, run: Any, endpoints: Mapping[str, EndpointConfig], home: Any) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.stack = contextlib.AsyncExitStack()

        def on_record(rec: CallRecord) -> None:  # the recorder is the run's loop's alone
            home.call_soon_threadsafe(run.recorder.record_call, rec)

        self.host: SessionHost = self.call(
            SessionHost.open(
                run.cfg, make_workload(run.cfg), endpoints, self.stack,
                on_record=on_record, say=run.opts.say,
            )
        ).result(timeout=60)  # fmt: skip

    def call(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def close(self) -> None:
        self.call(self.stack.aclose()).result(timeout=60)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=10)


class ThreadExecutor:
    """The plan's sessions, `lanes` at a time, each on a thread of its own."""

    def __init__(self, run: Any, endpoints: Mapping[str, EndpointConfig], lanes: int) -> None:
        self.run_state, self.endpoints, self.lanes_n = run, endpoints, lanes
        self.lag = _Lag()
        self.active = 0
        self.stopping = False
        self.threads_seen: set[str] = set()

    def stop(self, reason: str = "interrupted") -> None:
        self.stopping = True

    def abort(self) -> None:
        self.stop()

    def client_extra(self, cpu_s: float) -> dict[str, Any]:
        return {"threads": self.lanes_n}

    async def run(self) -> SchedulerReport:
        run, home = self.run_state, asyncio.get_running_loop()
        lanes = [_Lane(run, self.endpoints, home) for _ in range(self.lanes_n)]
        t0, done = time.perf_counter(), 0

        async def lane_loop(lane: _Lane) -> None:
            nonlocal done
            while not self.stopping and (item := run.plan.next(time.perf_counter() - t0)):
                self.active += 1
                out = await asyncio.wrap_future(lane.call(self._one(lane, item)))
                self.active -= 1
                run.recorder.record_episode(out.session, out.trajectory)
                run.tracker.on_episode(out.session)
                done += 1

        try:
            await asyncio.gather(*(lane_loop(lane) for lane in lanes))
        finally:
            for lane in lanes:
                lane.close()
        elapsed = time.perf_counter() - t0
        return SchedulerReport(
            mode="closed", stop_reason="completed", started=done, finished=done, elapsed_s=elapsed
        )

    async def _one(self, lane: _Lane, item: WorkItem) -> Any:
        self.threads_seen.add(threading.current_thread().name)
        run = self.run_state
        sid = session_id_for(run.run_id, item, run.attempt)
        now = time.perf_counter_ns()
        return await lane.host.run_item(
            item, sid, run_id=run.run_id, attempt=run.attempt, intended_ns=now, actual_ns=now
        )


def test_a_thread_executor_runs_a_whole_run(tmp_path: Path) -> None:
    made: list[ThreadExecutor] = []

    async def threads(
        run: Any, endpoints: Mapping[str, EndpointConfig], stack: contextlib.AsyncExitStack
    ) -> ThreadExecutor:
        made.append(ThreadExecutor(run, endpoints, lanes=2))
        return made[0]

    cfg = build_config(
        data={
            "out": str(tmp_path / "run"),
            "workload": {"tasks": ["airline/000-005"]},
            "sim": {"profile": "instant"},
            "report": False,
        }
    )
    outcome = asyncio.run(execute_run(cfg, progress="off", say=lambda _m: None, executor=threads))
    assert outcome.exit_code == 0, outcome.stop_reason
    executor = made[0]
    # Both lanes ran sessions, neither on the run's own thread.
    assert len(executor.threads_seen) == 2
    assert threading.main_thread().name not in executor.threads_seen
    out = tmp_path / "run"
    sessions = [orjson.loads(line) for line in (out / "sessions.jsonl").read_bytes().splitlines()]
    assert sorted(s["task_id"] for s in sessions) == [f"airline/{i:03d}" for i in range(6)]
    assert all(s["run_id"] == sessions[0]["run_id"] and s["attempt"] == 0 for s in sessions)
    calls = [orjson.loads(line) for line in (out / "calls.jsonl").read_bytes().splitlines()]
    assert {c["session_id"] for c in calls} == {s["session_id"] for s in sessions}
    summary = outcome.summary.dump() if outcome.summary else {}
    assert summary["client"]["threads"] == 2
    assert summary["episodes"]["episodes"] == 6
