"""Harness cost of a domain episode, per domain, on one core.

What an episode costs the harness apart from LLM calls: a fresh environment, its tool calls
(the gold actions here), then grading (replay on a fresh environment, hash, output check).
The gold hash is cached after the first grade of a task, as in a run.

    python benchmarks/domain_overhead.py [--domain airline] [--rounds 5]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

from agentload.domains import get_domain, own_domain_names
from agentload.domains.base import Domain, Environment, grade


def _per_call(fn: Callable[[], object], n: int) -> float:
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - t0) / n


def bench(domain: Domain, rounds: int) -> dict[str, float]:
    tasks = domain.tasks()
    env = Environment(domain)
    env.db_hash()
    for t in tasks:  # warm: base db parsed, gold hashes cached
        grade(domain, t, list(t.gold_actions), list(t.required_outputs))
    calls = sum(len(t.gold_actions) for t in tasks)

    def episodes() -> None:
        for t in tasks:
            e = Environment(domain)
            for a in t.gold_actions:
                e.execute(a.name, a.arguments)
            grade(domain, t, e.actions, list(t.required_outputs))

    ep = statistics.median(_per_call(episodes, 1) for _ in range(rounds)) / len(tasks)
    tool_time = statistics.median(
        _per_call(lambda: [Environment(domain).replay(t.gold_actions) for t in tasks], 1)
        for _ in range(rounds)
    )
    return {
        "fresh environment (ms)": _per_call(lambda: Environment(domain), 200) * 1e3,
        "db hash (ms)": _per_call(env.db_hash, 50) * 1e3,
        "tool call, mean over gold actions (ms)": tool_time / calls * 1e3,
        "episode: env + gold calls + grade (ms)": ep * 1e3,
        "episodes per second per core": 1 / ep,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--domain", action="append", help="default: every domain")
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    names = args.domain or own_domain_names()
    results = {n: bench(get_domain(n), args.rounds) for n in names}
    metrics = list(next(iter(results.values())))
    print("| metric | " + " | ".join(names) + " |")
    print("| --- |" + " --- |" * len(names))
    for m in metrics:
        print(f"| {m} | " + " | ".join(f"{results[n][m]:.3g}" for n in names) + " |")


if __name__ == "__main__":
    main()
