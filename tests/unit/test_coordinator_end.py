"""How a run over workers ends, over a scripted backend: a worker still starting when the plan
ends, auto growth in the tail, a worker failing after Finished, a start that fails. Each of
these once left the driver waiting for a worker for good."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

from agentload.config import build_config
from agentload.distributed.driver import Coordinator
from agentload.distributed.protocol import (
    Batch,
    Exited,
    Finished,
    FromWorker,
    Grant,
    Hello,
    NoMore,
    SessionDone,
    ToWorker,
    WorkerSpec,
    WorkerStats,
)
from agentload.scheduler import EpisodePlan, ProgressTracker


class ScriptedBackend:
    name = "scripted"

    def __init__(self) -> None:
        self.specs: list[WorkerSpec] = []
        self.sent: list[tuple[int, ToWorker]] = []
        self.inbox: asyncio.Queue[FromWorker] = asyncio.Queue()

    async def start(self, spec: WorkerSpec) -> None:
        self.specs.append(spec)

    def send(self, worker: int, msg: ToWorker) -> None:
        self.sent.append((worker, msg))

    async def receive(self) -> FromWorker:
        return await self.inbox.get()

    def kill(self, worker: int) -> None:
        pass

    async def close(self) -> None:
        pass

    def granted(self, worker: int) -> list[Any]:
        return [a for w, m in self.sent if w == worker and isinstance(m, Grant) for a in m.items]


def _run(concurrency: int, tasks: int) -> Any:
    cfg = build_config(
        data={"out": "unused", "workload": {"tasks": ["airline/000-009"]}, "load": {}}
    )
    recorded: list[dict[str, Any]] = []
    recorder = SimpleNamespace(
        record_call=lambda line: None,
        record_episode=lambda s, t: recorded.append(s),
    )
    said: list[str] = []
    return SimpleNamespace(
        cfg=cfg,
        plan=EpisodePlan([f"airline/{i:03d}" for i in range(tasks)]),
        workers=concurrency,
        recorder=recorder,
        tracker=ProgressTracker(total=tasks),
        opts=SimpleNamespace(say=said.append, tune_gc=False),
        run_id="r",
        attempt=0,
        recorded=recorded,
        said=said,
    )


def _done(worker: int, a: Any) -> Batch:
    session = {"session_id": a.item.task_id, "termination": "user_stop", "sched_delay_s": 0.0}
    return Batch(worker, sessions=[SessionDone(a, session)], started=1)


async def _settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


class SlowStartBackend(ScriptedBackend):
    """Starts from the second worker on wait for `go` (a fresh interpreter takes a while), and
    a message to a worker whose start has not returned is dropped, as the process backend
    drops it; `fail` makes those starts raise instead."""

    def __init__(self, fail: bool = False) -> None:
        super().__init__()
        self.go = asyncio.Event()
        self.fail = fail
        self.started: set[int] = set()

    async def start(self, spec: WorkerSpec) -> None:
        self.specs.append(spec)
        if spec.index > 0:
            await self.go.wait()
            if self.fail:
                raise OSError("cannot spawn")
        self.started.add(spec.index)

    def send(self, worker: int, msg: ToWorker) -> None:
        if worker in self.started:
            super().send(worker, msg)


def _saturate(be: ScriptedBackend, worker: int) -> None:
    for k in range(5):  # a full core for four seconds
        stats = WorkerStats(worker, 100, "h", wall_s=1.0 + k, cpu_s=0.95 * (1.0 + k), active=4)
        be.inbox.put_nowait(Batch(worker, stats=stats))


async def _commit_all(be: ScriptedBackend, run: Any, worker: int) -> None:
    while todo := [
        a
        for a in be.granted(worker)
        if a.item.task_id not in {r["session_id"] for r in run.recorded}
    ]:
        be.inbox.put_nowait(_done(worker, todo[0]))
        await _settle()


async def _finish(be: ScriptedBackend, *workers: int, reason: str = "") -> None:
    stats = WorkerStats(0, 1, "h", 1.0, 0.1, 0)
    for i in workers:
        be.inbox.put_nowait(Finished(i, {"max_active": 1}, [0.001], stats))
        be.inbox.put_nowait(Exited(i, reason))
    await _settle()


async def test_a_worker_still_starting_when_the_plan_ends_is_told_so() -> None:
    run = _run(concurrency=4, tasks=12)
    be = SlowStartBackend()
    coord = Coordinator(run, {}, be, 1, max_workers=2)
    task = asyncio.ensure_future(coord.run())
    await _settle()
    be.inbox.put_nowait(Hello(0, 100, "h"))
    await _settle()
    _saturate(be, 0)  # auto adds worker 1, whose start takes long
    await _settle()
    assert [s.index for s in be.specs] == [0, 1]
    await _commit_all(be, run, 0)  # meanwhile worker 0 runs the whole plan
    assert len(run.recorded) == 12 and (0, NoMore()) in be.sent
    be.go.set()  # worker 1's start returns only now
    await _settle()
    assert (1, NoMore()) in be.sent  # or it would wait for grants for good
    await _finish(be, 0, 1)
    rep = await asyncio.wait_for(task, 5)
    assert rep.finished == 12 and rep.stop_reason == "completed"


async def test_auto_adds_no_worker_once_the_plan_is_handed_out() -> None:
    run = _run(concurrency=8, tasks=4)
    be = ScriptedBackend()
    coord = Coordinator(run, {}, be, 1, max_workers=2)
    task = asyncio.ensure_future(coord.run())
    await _settle()
    be.inbox.put_nowait(Hello(0, 100, "h"))
    await _settle()
    assert len(be.granted(0)) == 4  # the whole plan
    _saturate(be, 0)
    await _settle()
    assert [s.index for s in be.specs] == [0]
    assert not any("adding worker" in m for m in run.said)
    await _commit_all(be, run, 0)
    await _finish(be, 0)
    rep = await asyncio.wait_for(task, 5)
    assert rep.finished == 4


async def test_a_worker_failing_after_finished_is_not_replaced() -> None:
    run = _run(concurrency=4, tasks=6)
    be = ScriptedBackend()
    coord = Coordinator(run, {}, be, 2)
    task = asyncio.ensure_future(coord.run())
    await _settle()
    for i in (0, 1):
        be.inbox.put_nowait(Hello(i, 100 + i, "h"))
    await _settle()
    for i in (0, 1):
        await _commit_all(be, run, i)
    assert {w for w, m in be.sent if isinstance(m, NoMore)} == {0, 1}
    # Its last records and Finished arrived; then its process ends with an error.
    await _finish(be, 0, reason="exit status 3")
    assert [s.index for s in be.specs] == [0, 1]  # no worker in its place
    await _finish(be, 1)
    rep = await asyncio.wait_for(task, 5)
    assert rep.finished == 6 and rep.error is None
    assert [w["exit"] for w in coord.workers_block()] == ["exit status 3", "done"]


async def test_a_worker_that_cannot_start_mid_run_leaves_the_run_to_the_others() -> None:
    run = _run(concurrency=4, tasks=12)
    be = SlowStartBackend(fail=True)
    coord = Coordinator(run, {}, be, 1, max_workers=2)
    task = asyncio.ensure_future(coord.run())
    await _settle()
    be.inbox.put_nowait(Hello(0, 100, "h"))
    await _settle()
    _saturate(be, 0)
    await _settle()
    be.go.set()  # worker 1's start fails
    await _settle()
    assert any("worker 1 could not start: OSError: cannot spawn" in m for m in run.said)
    await _commit_all(be, run, 0)
    await _finish(be, 0)
    rep = await asyncio.wait_for(task, 5)
    assert rep.finished == 12 and rep.error is None
