"""Scheduler unit tests with a stand-in episode coroutine (no HTTP)."""

from __future__ import annotations

import asyncio
import time

import pytest

from agentload.scheduler import EpisodePlan, LoadSpec, PlanError, Scheduler, select_tasks
from agentload.scheduler.plan import WorkItem

AVAILABLE = {
    "airline": [f"airline/{i:03d}" for i in range(30)],
    "retail": [f"retail/{i:03d}" for i in range(10)],
}


def test_select_tasks_ranges_and_domains() -> None:
    got = select_tasks(["airline/000-002", "retail/005", "airline/001"], [], AVAILABLE)
    assert got == ["airline/000", "airline/001", "airline/002", "retail/005"]
    assert select_tasks([], ["retail"], AVAILABLE) == AVAILABLE["retail"]
    assert len(select_tasks(["retail"], [], AVAILABLE)) == 10
    with pytest.raises(PlanError, match="unknown domain 'bank'"):
        select_tasks(["bank/001"], [], AVAILABLE)
    with pytest.raises(PlanError, match="matches no task"):
        select_tasks(["retail/050-060"], [], AVAILABLE)


def test_plan_rounds_trials_and_continuation() -> None:
    plan = EpisodePlan(["a/0", "a/1", "a/2"], trials=2, num_episodes=8, shuffle=True, seed=3)
    items = [plan.next(0.0) for _ in range(9)]
    assert items[-1] is None
    keys = [i.key for i in items[:-1] if i]
    assert len(set(keys)) == 8
    # Round r holds every task with trial r, continuing past `trials`.
    assert sorted(t for t, r in keys if r == 0) == ["a/0", "a/1", "a/2"]
    assert sorted(t for t, r in keys if r == 2) == sorted(keys[6][0:1] + keys[7][0:1])
    again = EpisodePlan(["a/0", "a/1", "a/2"], trials=2, num_episodes=8, shuffle=True, seed=3)
    assert [again.next(0.0).key for _ in range(8)] == keys  # deterministic


def test_plan_resume_skips_finished_and_warmup_is_separate() -> None:
    full = EpisodePlan(["a/0", "a/1"], trials=3)
    keys = [full.next(0.0).key for _ in range(6)]
    done = set(keys[:4]) | {("a/0", -1)}
    plan = EpisodePlan(["a/0", "a/1"], trials=3, warmup_episodes=2, finished=done)
    assert plan.resume_done == 4 and plan.to_issue == 2
    warm = plan.next(0.0)
    assert warm is not None and warm.warmup and warm.key == ("a/1", -1)
    rest = [plan.next(0.0) for _ in range(3)]
    assert [r.key for r in rest if r] == keys[4:] and rest[-1] is None


async def _fake_episode(log: list, delay: float = 0.01):
    active = {"n": 0, "max": 0}

    async def run_one(item: WorkItem, intended: int, actual: int) -> None:
        active["n"] += 1
        active["max"] = max(active["max"], active["n"])
        try:
            await asyncio.sleep(delay)
        finally:
            active["n"] -= 1
        log.append((item, intended, actual))

    return run_one, active


async def test_closed_loop_concurrency_and_warmup() -> None:
    log: list = []
    run_one, active = await _fake_episode(log)
    plan = EpisodePlan([f"d/{i}" for i in range(10)], trials=2, warmup_episodes=3)
    rep = await Scheduler(plan, LoadSpec(concurrency=4), run_one).run()
    assert rep.stop_reason == "completed"
    assert rep.finished == 23 and len(log) == 23
    assert active["max"] == 4 == rep.max_active
    assert sum(1 for i, _, _ in log if i.warmup) == 3
    assert len({i.key for i, _, _ in log}) == 23
    assert rep.lag_s["count"] > 0 and rep.sched_delay_s["count"] == 23


async def test_time_warmup() -> None:
    log: list = []
    run_one, _ = await _fake_episode(log, delay=0.02)
    plan = EpisodePlan(["d/0", "d/1"], trials=5, warmup_seconds=0.1)
    await Scheduler(plan, LoadSpec(concurrency=2), run_one).run()
    warm = [i for i, _, _ in log if i.warmup]
    assert 4 <= len(warm) <= 14
    assert sum(1 for i, _, _ in log if not i.warmup) == 10


async def test_open_loop_rate_and_max_concurrency() -> None:
    log: list = []
    run_one, active = await _fake_episode(log, delay=0.05)
    plan = EpisodePlan([f"d/{i}" for i in range(50)], trials=4)
    spec = LoadSpec(mode="open", rate=200.0, burstiness=50.0, max_concurrency=20)
    rep = await Scheduler(plan, spec, run_one).run()
    assert rep.finished == 200
    assert active["max"] <= 20
    assert rep.rate_achieved is not None and abs(rep.rate_achieved / 200.0 - 1) < 0.10
    # Queued arrivals show up as scheduling delay (coordinated omission made visible).
    assert max((a - i) for _, i, a in log) > 0


async def test_stop_drains_then_cancels() -> None:
    log: list = []
    run_one, _ = await _fake_episode(log, delay=5.0)
    plan = EpisodePlan(["d/0"], trials=100)
    sched = Scheduler(plan, LoadSpec(concurrency=3, drain_timeout_s=0.2), run_one)
    asyncio.get_running_loop().call_later(0.1, sched.stop)
    t = time.perf_counter()
    rep = await sched.run()
    assert time.perf_counter() - t < 2.0
    assert rep.stop_reason == "interrupted" and rep.cancelled == 3 and rep.finished == 0


async def test_duration_limit() -> None:
    log: list = []
    run_one, _ = await _fake_episode(log, delay=0.01)
    plan = EpisodePlan(["d/0", "d/1"], unbounded=True)
    rep = await Scheduler(plan, LoadSpec(concurrency=2, duration_s=0.2), run_one).run()
    assert rep.stop_reason == "duration" and rep.cancelled == 0
    assert 10 < rep.finished < 60
    assert len({i.key for i, _, _ in log}) == rep.finished


async def test_harness_error_stops_run() -> None:
    async def run_one(item: WorkItem, intended: int, actual: int) -> None:
        raise RuntimeError("boom")

    plan = EpisodePlan(["d/0"], trials=10)
    rep = await Scheduler(plan, LoadSpec(concurrency=2), run_one).run()
    assert rep.stop_reason == "failed" and "boom" in (rep.error or "")


def test_progress_line_speaks_of_the_workloads_sessions() -> None:
    from agentload.scheduler.progress import ProgressTracker, progress_line

    episodes = progress_line(ProgressTracker(total=10).snapshot())
    assert episodes.startswith("episodes 0/10") and "success -" in episodes
    replay = ProgressTracker(total=10, noun="conversations", graded=False).snapshot()
    line = progress_line(replay)
    assert line.startswith("conversations 0/10") and "success" not in line


def test_progress_success_leaves_out_infra_errors_as_the_summary_does() -> None:
    from agentload.scheduler.progress import ProgressTracker, progress_line

    p = ProgressTracker(total=10)
    for reward, termination in [(1.0, "done"), (0.0, "done"), (1.0, "done")]:
        p.on_episode({"reward": reward, "termination": termination})
    p.on_episode({"reward": 0.0, "termination": "infra_error"})
    p.on_episode({"reward": 1.0, "termination": "done", "reward_partial": True})
    s = p.snapshot()
    assert s["episodes"] == 5 and s["success_rate"] == 2 / 3
    assert "success 67%" in progress_line(s)
    only_infra = ProgressTracker(total=2)
    only_infra.on_episode({"reward": 0.0, "termination": "infra_error"})
    assert only_infra.snapshot()["success_rate"] is None
