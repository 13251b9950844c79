"""A worker's plan: a grant wakes one idle scheduler worker per item, the end wakes all."""

from __future__ import annotations

import asyncio

from agentload.distributed.protocol import Assignment
from agentload.distributed.worker import FeedPlan
from agentload.scheduler import WorkItem


def _items(n: int, start: int = 0) -> tuple[Assignment, ...]:
    return tuple(Assignment(WorkItem(f"t/{i:03d}", 0, False, i)) for i in range(start, start + n))


async def test_a_grant_wakes_one_waiter_per_item_and_the_end_wakes_all() -> None:
    plan, stop = FeedPlan(), asyncio.Event()
    woke: list[int] = []

    async def idle(k: int) -> None:
        item = await plan.more(stop)
        woke.append(k if item is not None else -1)

    tasks = [asyncio.ensure_future(idle(k)) for k in range(50)]
    await asyncio.sleep(0)
    assert len(plan._waiters) == 50
    plan.feed(_items(2))
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert sorted(woke) == [0, 1] and len(plan._waiters) == 48  # the others never stirred
    assert plan.started == 2 and plan.assignment(WorkItem("t/000", 0, False, 0)).redo == 0
    plan.close()
    await asyncio.gather(*tasks)
    assert woke.count(-1) == 48
    plan.shut()


async def test_stop_releases_the_waiters() -> None:
    plan, stop = FeedPlan(), asyncio.Event()
    tasks = [asyncio.ensure_future(plan.more(stop)) for _ in range(5)]
    await asyncio.sleep(0)
    stop.set()
    assert await asyncio.wait_for(asyncio.gather(*tasks), 2) == [None] * 5
    plan.shut()
