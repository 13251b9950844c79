"""How many workers a run gets: `--workers N`, or auto (what the load needs)."""

from __future__ import annotations

import math
import os
from collections.abc import Callable

from agentload.config import RunConfig

AUTO_SESSIONS_PER_WORKER = 256
"""Auto: a closed loop under this many sessions stays in one process (one event loop holds it
on the simulator and on real engines alike); above it, one worker per this many to start."""


def usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not on Linux
        return os.cpu_count() or 1


def decide_workers(
    cfg: RunConfig, sessions: int, cluster: Callable[[int], tuple[int, str]] | None = None
) -> tuple[int, int, str | None]:
    """(workers to start, most workers auto may grow to, a note for the user or None).

    `sessions` is the closed loop's concurrency as the run will use it. One worker that may
    not grow means the ordinary one-process run. `cluster(cap)` sizes `auto` on a cluster
    (the Ray backend's `cluster_workers`): (workers, a note).
    """
    ld = cfg.load
    cap = sessions if ld.mode == "closed" else (ld.max_concurrency or 1_000_000)
    if cluster is not None and ld.workers == "auto":
        actors, placed = cluster(cap)
        return actors, actors, placed
    if ld.workers != "auto":
        n = min(ld.workers, cap)
        note = (
            f"--workers {ld.workers} is more than the {cap} sessions that can be in flight; "
            f"using {n}"
            if n < ld.workers
            else None
        )
        return n, n, note
    # The driver (recording, progress) keeps a core; workers get the rest.
    spare = usable_cores() - 1
    if ld.mode != "closed" or spare < 2 or sessions < AUTO_SESSIONS_PER_WORKER:
        return 1, 1, None
    top = min(spare, cap)
    n = min(top, math.ceil(sessions / (2 * AUTO_SESSIONS_PER_WORKER)))
    return n, top, f"--workers auto: {n} worker processes to start (up to {top})"
