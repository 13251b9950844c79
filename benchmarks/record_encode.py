"""What building and encoding one session line and one trajectory line costs: the dict
literals the writers built before, against the writers' records (agentload.results.records)
and, for the choice between them, pydantic's `model_construct`.

    python benchmarks/record_encode.py --records 10000 --rounds 7

The values are a real episode's: the oracle agent with the scripted user on `--task` (no
model is called), so the trajectory's messages, tools and grade have a real episode's size.
Each way does what the recording path does per finished episode, from the episode's end
(`EpisodeEnd` and its grade; grading itself is left out) to the bytes appended to the files:

* `dict`: the writer as it was (`episode_records`' dict literals, kept here), the episodes
  kind's copy of the session (`dict(res.session)`), the run's stamp written into it in place,
  the schema stamp (`session_line`) and one orjson encode per line;
* `struct`: today's `episode_records` (`EpisodeSessionLine`, `EpisodeTrajectoryLine`), the
  stamp as a new record (`stamp_session`), each line (`line_of`), the schema stamp and one
  orjson encode per line;
* `pydantic`: the dict literals into `SessionRecord.model_construct(...)` with
  `model_copy(update=stamp)` and `TrajectoryRecord.model_construct(...)`, `dump()` and one
  orjson encode per line.

Rounds alternate the ways; the median and the best of the rounds' µs per episode are
printed, each beside its cost relative to the dict way's. Times are the thread's CPU time, so
that other work on a shared machine does not count (its cache effects still do: the best
round is the steadier figure there).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from collections.abc import Callable
from typing import Any

from agentload.domains import get_domain
from agentload.results.jsonl import dumps_line
from agentload.results.records import (
    SESSION_SCHEMA,
    TRAJECTORY_SCHEMA,
    SessionRecord,
    TrajectoryRecord,
    session_line,
    trajectory_line,
)
from agentload.scheduler.plan import WorkItem
from agentload.session.host import line_of, stamp_session
from agentload.workloads.episode import (
    EpisodeEnd,
    EpisodeOptions,
    EpisodeSpec,
    episode_records,
    episode_seed,
    run_episode,
)


def _episode(task: str) -> tuple[EpisodeEnd, dict[str, Any]]:
    """A real episode's end (what `episode_records` is given) and its grade."""
    spec = EpisodeSpec(task, 0, episode_seed(0, task, 0), f"bench-{task}-t0")
    res = asyncio.run(run_episode(spec, {}, EpisodeOptions(agent="oracle", user="scripted")))
    s, t = res.session, res.trajectory
    domain = get_domain(task.partition("/")[0])
    end = EpisodeEnd(
        spec=spec,
        domain=domain,
        task=domain.get_task(task),
        db_seed=s["db_seed"],
        env=None,
        replies=[],
        agent=s["agent"],
        user=s["user"],
        counts=dict(s["counts"]),
        messages=t["messages"],
        tools=t["tools"],
        action_format=t["action_format"],
        termination=s["termination"],
        error=s["error"],
        started_at=s["started_at"],
        start_ns=s["start_ns"],
        end_ns=s["end_ns"],
        llm_s=s["durations"]["llm_s"],
        tool_s=s["durations"]["tool_s"],
        user_s=s["durations"]["user_s"],
    )
    return end, t["grade"]


def _dict_records(end: EpisodeEnd, grade_dict: dict[str, Any]) -> tuple[dict, dict]:
    """The writer as it was: `episode_records`' dict literals (before the typed records)."""
    reward = float(grade_dict.get("reward", 0.0))
    spec = end.spec
    counts = dict(end.counts)
    if end.termination == "protocol_error":
        counts["protocol_errors"] = counts.get("protocol_errors", 0) + 1
    identity = {
        "session_id": spec.session_id,
        "domain": end.domain.name,
        "task_id": spec.task_id,
        "trial": spec.trial,
        "seed": spec.seed,
    }
    session = {
        "schema": SESSION_SCHEMA,
        **identity,
        "agent": end.agent,
        "user": end.user,
        "reward": reward,
        "reward_breakdown": {
            "db_match": grade_dict.get("db_match"),
            "outputs_ok": grade_dict.get("outputs_ok"),
            "missing_outputs": grade_dict.get("missing_outputs"),
        },
        "grader_version": grade_dict.get("grader_version"),
        "data_version": end.domain.data_version,
        "termination": end.termination,
        "error": end.error,
        "counts": counts,
        "durations": {
            "total_s": (end.end_ns - end.start_ns) / 1e9,
            "llm_s": end.llm_s,
            "tool_s": end.tool_s,
            "user_s": end.user_s,
        },
        "started_at": end.started_at,
        "start_ns": end.start_ns,
        "end_ns": end.end_ns,
        "num_messages": len(end.messages),
        "category": end.task.category,
        "db_seed": end.db_seed,
    }
    trajectory = {
        "schema": TRAJECTORY_SCHEMA,
        **identity,
        "db_seed": end.db_seed,
        "messages": end.messages,
        "tools": end.tools,
        "action_format": end.action_format,
        "reward": reward,
        "termination": end.termination,
        "grade": grade_dict,
    }
    return session, trajectory


def _dict_way(end: EpisodeEnd, grade: dict[str, Any], n: int) -> int:
    item = WorkItem("t", 0, False, 0)
    out = 0
    for i in range(n):
        session, traj = _dict_records(end, grade)
        session = dict(session)  # the episodes kind's copy into its SessionOutcome
        # stamp_session as it was: the run's fields written into the dict
        session["run_id"] = "bench"
        session["warmup"] = item.warmup
        session["attempt"] = 1
        session["intended_start_ns"] = i
        session["sched_delay_s"] = (i + 1500 - i) / 1e9
        out += len(dumps_line(trajectory_line(traj))) + len(dumps_line(session_line(session)))
    return out


def _struct_way(end: EpisodeEnd, grade: dict[str, Any], n: int) -> int:
    item = WorkItem("t", 0, False, 0)
    out = 0
    for i in range(n):
        session, traj = episode_records(end, grade)
        stamped = stamp_session(session, "bench", item, 1, i, i + 1500)
        out += len(dumps_line(trajectory_line(line_of(traj))))
        out += len(dumps_line(session_line(line_of(stamped))))
    return out


def _pydantic_way(end: EpisodeEnd, grade: dict[str, Any], n: int) -> int:
    out = 0
    for i in range(n):
        s, t = _dict_records(end, grade)
        stamp = {
            "run_id": "bench",
            "warmup": False,
            "attempt": 1,
            "intended_start_ns": i,
            "sched_delay_s": (i + 1500 - i) / 1e9,
        }
        session = SessionRecord.model_construct(**s).model_copy(update=stamp)
        traj = TrajectoryRecord.model_construct(**t)
        out += len(dumps_line(trajectory_line(traj.dump())))
        out += len(dumps_line(session_line(session.dump())))
    return out


WAYS: dict[str, Callable[[EpisodeEnd, dict[str, Any], int], int]] = {
    "dict": _dict_way,
    "struct": _struct_way,
    "pydantic": _pydantic_way,
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=10_000, help="episodes per round")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--task", default="airline/000")
    a = ap.parse_args()
    end, grade = _episode(a.task)
    sizes = {w: f(end, grade, 1) for w, f in WAYS.items()}
    print(
        f"one episode's lines: {sizes['dict']} bytes ({len(end.messages)} messages); "
        f"same bytes struct/pydantic: {sizes['struct']}/{sizes['pydantic']}"
    )
    us: dict[str, list[float]] = {w: [] for w in WAYS}
    for _ in range(a.rounds):
        for w, f in WAYS.items():
            # CPU time of this thread: a shared machine's other work does not count
            t0 = time.thread_time()
            f(end, grade, a.records)
            us[w].append((time.thread_time() - t0) / a.records * 1e6)
    med = {w: statistics.median(v) for w, v in us.items()}
    low = {w: min(v) for w, v in us.items()}
    print(f"µs per episode (its session and trajectory), {a.rounds} rounds of {a.records}")
    print(f"{'way':10} {'median':>8} {'vs dict':>8} {'best':>8} {'vs dict':>8}")
    for w in WAYS:
        print(
            f"{w:10} {med[w]:8.2f} {med[w] / med['dict'] - 1:+8.1%}"
            f" {low[w]:8.2f} {low[w] / low['dict'] - 1:+8.1%}"
        )


if __name__ == "__main__":
    main()
