"""The driver's bookkeeping over a scripted backend: shares of the concurrency, grants as
sessions commit, redo of a lost worker's sessions, NoMore only once everything committed,
saturation."""

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
        self.killed: list[int] = []

    async def start(self, spec: WorkerSpec) -> None:
        self.specs.append(spec)

    def send(self, worker: int, msg: ToWorker) -> None:
        self.sent.append((worker, msg))

    async def receive(self) -> FromWorker:
        return await self.inbox.get()

    def kill(self, worker: int) -> None:
        self.killed.append(worker)

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


def _done(worker: int, a: Any, stats: WorkerStats | None = None) -> Batch:
    session = {"session_id": a.item.task_id, "termination": "user_stop", "sched_delay_s": 0.0}
    return Batch(worker, sessions=[SessionDone(a, session)], started=1, stats=stats)


async def _settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


async def test_grants_follow_shares_and_a_lost_worker_is_redone() -> None:
    run = _run(concurrency=5, tasks=8)
    be = ScriptedBackend()
    coord = Coordinator(run, {}, be, 2)
    task = asyncio.ensure_future(coord.run())
    await _settle()
    assert [s.index for s in be.specs] == [0, 1] and not be.sent  # nothing before Hello
    for i in (0, 1):
        be.inbox.put_nowait(Hello(i, 100 + i, "h"))
    await _settle()
    # 5 sessions in flight at most, split 3 + 2.
    assert len(be.granted(0)) == 3 and len(be.granted(1)) == 2
    first = be.granted(0)[0]
    be.inbox.put_nowait(_done(0, first))
    await _settle()
    assert len(be.granted(0)) == 4  # its slot refilled
    # Worker 1 dies with 2 sessions in flight: a replacement takes them, marked as redo.
    lost = be.granted(1)
    be.inbox.put_nowait(Exited(1, "exit status -9"))
    await _settle()
    assert [s.index for s in be.specs] == [0, 1, 2]
    assert any("worker 1 exited (exit status -9): 2 unfinished" in m for m in run.said)
    be.inbox.put_nowait(Hello(2, 102, "h"))
    await _settle()
    redo = be.granted(2)
    assert [(a.item, a.redo) for a in redo[:2]] == [(a.item, 1) for a in lost]
    # Finish everything: NoMore goes out only once the last granted session committed.
    while True:
        committed = {r["session_id"] for r in run.recorded}
        todo = [(w, a) for w in (0, 2) for a in be.granted(w) if a.item.task_id not in committed]
        if not todo:
            break
        assert not any(isinstance(m, NoMore) for _, m in be.sent)
        be.inbox.put_nowait(_done(*todo[0]))
        await _settle()
    assert sorted(r["session_id"] for r in run.recorded) == [f"airline/{i:03d}" for i in range(8)]
    assert {w for w, m in be.sent if isinstance(m, NoMore)} == {0, 2}
    stats = WorkerStats(0, 1, "h", 1.0, 0.1, 0)
    for i in (0, 2):
        be.inbox.put_nowait(Finished(i, {"max_active": 3}, [0.001], stats))
        be.inbox.put_nowait(Exited(i, ""))
    rep = await asyncio.wait_for(task, 5)
    assert rep.finished == 8 and rep.stop_reason == "completed" and rep.error is None
    assert [w["exit"] for w in coord.workers_block()] == ["done", "exit status -9", "done"]


async def test_a_saturated_worker_gets_a_helper_in_auto_mode() -> None:
    run = _run(concurrency=8, tasks=40)
    be = ScriptedBackend()
    coord = Coordinator(run, {}, be, 1, max_workers=2)
    task = asyncio.ensure_future(coord.run())
    await _settle()
    be.inbox.put_nowait(Hello(0, 100, "h"))
    await _settle()
    assert len(be.granted(0)) == 8
    for k in range(5):  # a full core for four seconds
        stats = WorkerStats(0, 100, "h", wall_s=1.0 + k, cpu_s=0.95 * (1.0 + k), active=8)
        be.inbox.put_nowait(Batch(0, stats=stats))
    await _settle()
    assert any("worker 0 is saturated" in m and "adding worker 1" in m for m in run.said)
    assert [s.index for s in be.specs] == [0, 1]
    be.inbox.put_nowait(Hello(1, 101, "h"))
    # The shares are 4 + 4 now: worker 0 gets nothing more until it is under 4.
    for a in be.granted(0)[:3]:
        be.inbox.put_nowait(_done(0, a))
    await _settle()
    assert len(be.granted(0)) == 8 and len(be.granted(1)) == 3
    coord.abort()
    for i in (0, 1):
        be.inbox.put_nowait(Exited(i, ""))
    rep = await asyncio.wait_for(task, 5)
    assert rep.stop_reason == "interrupted"
    assert coord.workers_block()[0]["saturated"] is True
