"""Harness cost of a τ² episode, per domain, on one core: what agentload's own code spends
per tool call, apart from model calls and grading.

Every task of the domain's split runs as an in-process episode with the `oracle` agent and
the `scripted` user (no model at all, so all CPU is agentload's: the orchestration, the τ²
tools on a copy-on-write world, the user's phone in telecom, the records). Grading is timed
inside each episode (the episode's own call of the grader) and subtracted, as the figure
asks. Each round runs every
task once; the median round is reported.

    python benchmarks/tau2_overhead.py [--tau2-data DIR] [--domain tau2-airline] [--rounds 5]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from typing import Any

from agentload.domains import get_domain
from agentload.domains.tau2 import Tau2Domain, configure
from agentload.domains.tau2.grading import grade
from agentload.workloads import EpisodeOptions, EpisodeSpec, run_episode, tau2_episode

DOMAINS = ("tau2-airline", "tau2-retail", "tau2-telecom", "tau2-mock")
OPTIONS = EpisodeOptions(agent="oracle", user="scripted")


_GRADING = [0.0]


def _timed_grade(*args: Any, **kw: Any) -> Any:
    """The episode's own grading call, its CPU time counted apart."""
    t0 = time.process_time()
    try:
        return grade(*args, **kw)
    finally:
        _GRADING[0] += time.process_time() - t0


async def _round(task_ids: list[str]) -> tuple[float, float, int, int]:
    """(episode CPU s, of which grading s, tool calls, episodes) for one pass over the tasks."""
    _GRADING[0] = 0.0
    t0 = time.process_time()
    results = [await run_episode(EpisodeSpec(t, 0, 0, f"bench-{t}"), {}, OPTIONS) for t in task_ids]
    episode_s = time.process_time() - t0
    calls = sum(
        r.session["counts"]["tool_calls"] + r.session["counts"]["user_tool_calls"] for r in results
    )
    return episode_s, _GRADING[0], calls, len(results)


def bench(name: str, rounds: int) -> dict[str, float]:
    domain = get_domain(name)
    assert isinstance(domain, Tau2Domain)
    task_ids = [t.id for t in domain.tasks()]
    asyncio.run(_round(task_ids))  # warm: databases parsed, gold hashes cached
    runs = [asyncio.run(_round(task_ids)) for _ in range(rounds)]
    ep_s, gr_s, calls, n = sorted(runs, key=lambda r: r[0])[len(runs) // 2]
    world_ms = statistics.median(
        _timed(lambda: domain.task_world(domain.get_task(task_ids[0])), 50) for _ in range(3)
    )
    return {
        "episodes": n,
        "tool calls (agent + user)": calls,
        "fresh task world (ms)": world_ms,
        "episode CPU incl. grading (ms)": ep_s / n * 1e3,
        "of which grading (ms per episode)": gr_s / n * 1e3,
        "agentload CPU per tool call, grading excluded (ms)": max(ep_s - gr_s, 0.0)
        / max(calls, 1)
        * 1e3,
    }


def _timed(fn: object, n: int) -> float:
    t0 = time.perf_counter()
    for _ in range(n):
        fn()  # type: ignore[operator]
    return (time.perf_counter() - t0) / n * 1e3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tau2-data", help="τ²-bench data folder (default: $AGENTLOAD_TAU2_DATA)")
    ap.add_argument("--domain", action="append", help="default: every τ² domain")
    ap.add_argument("--split", default="base")
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    configure(args.tau2_data, args.split)
    tau2_episode.grade = _timed_grade  # type: ignore[assignment]
    names = args.domain or list(DOMAINS)
    results = {n: bench(n, args.rounds) for n in names}
    metrics = list(next(iter(results.values())))
    print("| metric | " + " | ".join(names) + " |")
    print("| --- |" + " --- |" * len(names))
    for m in metrics:
        print(f"| {m} | " + " | ".join(f"{results[n][m]:.3g}" for n in names) + " |")


if __name__ == "__main__":
    main()
