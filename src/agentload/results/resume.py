"""Preparing a results folder for `--resume` without destroying anything that was recorded.

The recorder appends to the folder's files after this ran. What resume takes out of a record
file -- calls and trajectories of episodes that never finished, a torn last line, lines that
are not JSON at all -- is moved, byte for byte, into `<out>/dropped/<file>` (appended, synced
before the record file is replaced), never deleted. So the lines of `<file>` plus those of
`dropped/<file>` after a resume are at least the lines before it.

A missing sessions.jsonl beside trajectories is rebuilt from the trajectories (and the calls'
times), so a lost file does not turn finished episodes into unfinished ones.
"""

from __future__ import annotations

import logging
import os
import stat
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from agentload.config import read_yaml
from agentload.outcome import INFRA
from agentload.results.files import (
    CALLS,
    CONFIG,
    DROPPED_DIR,
    RECORD_FILES,
    RUN,
    SERVER_METRICS,
    SESSIONS,
    TRAJECTORIES,
)
from agentload.results.jsonl import (
    ResultsError,
    atomic_write_bytes,
    dumps_line,
    load_jsonl,
    read_jsonl,
)
from agentload.results.records import (
    SESSION_SCHEMA,
    SESSION_VERSION,
    TrajectoryRecord,
    parse_lenient,
    version_of,
)
from agentload.results.replay_resume import replay_calls_to_keep
from agentload.results.validate import Integrity, clean_sessions
from agentload.safeio import file_kind, read_regular

log = logging.getLogger("agentload.results")


@dataclass
class ResumeState:
    finished: set[tuple[str, int]] = field(default_factory=set)
    finished_sessions: set[str] = field(default_factory=set)
    dropped_calls: int = 0
    dropped_trajectories: int = 0
    set_aside: dict[str, int] = field(default_factory=dict)  # file -> lines moved to dropped/
    repaired_files: list[str] = field(default_factory=list)
    rebuilt_sessions: int = 0
    prev_meta: dict[str, Any] = field(default_factory=dict)


def session_key(session: Mapping[str, Any]) -> tuple[str, int]:
    """(task, trial) identity of an episode; replayed conversations key by conversation id."""
    task = session.get("task_id") or session.get("conversation_id") or session.get("session_id")
    trial = session.get("trial")
    if trial is None:
        trial = 0
    if isinstance(trial, bool) or not isinstance(trial, int | float | str):
        raise ValueError(f"trial is {type(trial).__name__}")
    return (str(task), int(trial))


def check_files(out_dir: Path) -> None:
    """Every record file that exists is a regular file (not a directory, FIFO, device, ...)."""
    for name in (*RECORD_FILES, RUN, CONFIG):
        p = out_dir / name
        try:
            mode = os.stat(p).st_mode
        except OSError:
            continue
        if not stat.S_ISREG(mode):
            raise ResultsError(
                f"{p}: is {file_kind(mode)}, expected a regular file; move it away and retry"
            )


def check_resumable(out_dir: Path) -> None:
    """Before `--resume` reads anything: every file of the run is a regular file, and
    config.yaml still holds settings (an emptied one would silently run the default plan)."""
    check_files(out_dir)
    path = out_dir / CONFIG
    if not path.exists():
        return

    if not read_yaml(path):
        raise ResultsError(
            f"{path}: holds no settings, so the run's plan is unknown; restore it from a copy, "
            "or start a new run in another folder"
        )


def _set_aside(out_dir: Path, name: str, lines: list[bytes]) -> None:
    """Append `lines` to dropped/<name> and sync before the caller replaces <name>."""
    if not lines:
        return
    d = out_dir / DROPPED_DIR
    d.mkdir(exist_ok=True)
    with open(d / name, "ab") as f:
        for line in lines:
            f.write(line if line.endswith(b"\n") else line + b"\n")
        f.flush()
        os.fsync(f.fileno())


def _rewrite(
    out_dir: Path, name: str, keep: Callable[[dict[str, Any]], bool] | None, st: ResumeState
) -> int:
    """Move unreadable lines (and records `keep` refuses) of <name> to dropped/; returns how
    many records `keep` refused. Kept lines stay byte-identical."""
    path = out_dir / name
    if not path.exists():
        return 0
    data = read_regular(path)
    lines = data.split(b"\n")
    tail = lines.pop() if lines else b""
    if tail.strip():  # no final newline (a torn tail): treat it as a line
        lines.append(tail)
    kept: list[bytes] = []
    aside: list[bytes] = []
    refused = 0
    bad_lines: list[int] = []
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            rec = orjson.loads(line)
        except orjson.JSONDecodeError:
            rec = None
        if not isinstance(rec, dict):
            aside.append(line)
            bad_lines.append(i + 1)
            continue
        if keep is not None and not keep(rec):
            aside.append(line)
            refused += 1
            continue
        kept.append(line + b"\n")
    if not aside:
        if tail.strip():  # a complete last record that only lacked its newline
            with open(path, "ab") as f:
                f.write(b"\n")
        return 0
    _set_aside(out_dir, name, aside)
    atomic_write_bytes(path, b"".join(kept))
    st.set_aside[name] = st.set_aside.get(name, 0) + len(aside)
    if bad_lines:
        st.repaired_files.append(name)
        shown = ", ".join(f"{path}:{n}" for n in bad_lines[:5])
        more = f" and {len(bad_lines) - 5} more" if len(bad_lines) > 5 else ""
        log.warning(
            "%s: moved %d unreadable lines (%s%s) to %s/%s",
            path,
            len(bad_lines),
            shown,
            more,
            DROPPED_DIR,
            name,
        )
    return refused


def _trajectories(out_dir: Path) -> list[TrajectoryRecord]:
    """The readable trajectories (a newer version's lines are left out, with a warning)."""
    read = read_jsonl(out_dir / TRAJECTORIES)
    out: list[TrajectoryRecord] = []
    for i, raw in enumerate(read.records):
        try:
            version_of(raw, TrajectoryRecord)
        except ValueError as e:
            log.warning("%s: not used to rebuild sessions: %s", read.where(i), e)
            continue
        out.append(parse_lenient(TrajectoryRecord, raw)[0])
    return out


def _rebuild_sessions(out_dir: Path, st: ResumeState) -> None:
    """sessions.jsonl is gone: one session line per trajectory, timed from its calls."""
    trajs = _trajectories(out_dir)
    calls = read_jsonl(out_dir / CALLS).records
    with_sid = [c for c in calls if c.get("session_id") is not None]
    if not trajs and not with_sid:
        return
    if not trajs:
        raise ResultsError(
            f"{out_dir / SESSIONS}: missing, and no trajectories.jsonl to rebuild it from; "
            f"resuming would set aside the {len(with_sid)} calls of calls.jsonl. Restore "
            "sessions.jsonl, or start a new run in another folder"
        )
    by_sid: dict[str, list[dict[str, Any]]] = {}
    for c in with_sid:
        by_sid.setdefault(str(c["session_id"]), []).append(c)
    out: list[bytes] = []
    seen: set[str] = set()
    for t in trajs:
        sid = t.session_id
        if sid is None or str(sid) in seen:
            continue
        seen.add(str(sid))
        own = by_sid.get(str(sid), [])
        s: dict[str, Any] = {"schema": SESSION_SCHEMA, "schema_version": SESSION_VERSION}
        s.update(t.model_dump(include={"session_id", "domain", "task_id", "trial", "seed"}))
        s["reward"] = t.reward
        s["termination"] = t.termination
        s["warmup"] = "-warmup" in str(sid)
        s["rebuilt_from"] = TRAJECTORIES
        s["counts"] = {
            "agent_calls": sum(1 for c in own if c.get("role") != "user"),
            "user_calls": sum(1 for c in own if c.get("role") == "user"),
            "failed_calls": sum(1 for c in own if c.get("status", "ok") != "ok"),
        }
        starts = [
            (c["end_ns"] - int(1e9 * float(c.get("total_s") or 0)), c.get("started_at"))
            for c in own
            if isinstance(c.get("end_ns"), int)
        ]
        ends = [c["end_ns"] for c in own if isinstance(c.get("end_ns"), int)]
        if starts and ends:
            start_ns, started_at = min(starts, key=lambda x: x[0])
            s["start_ns"], s["end_ns"] = start_ns, max(ends)
            s["started_at"] = started_at
            s["durations"] = {"total_s": (max(ends) - start_ns) / 1e9}
        out.append(dumps_line(s))
    atomic_write_bytes(out_dir / SESSIONS, b"".join(out))
    st.rebuilt_sessions = len(out)
    log.warning(
        "%s: missing; rebuilt %d session lines from %s (reward, termination, times)",
        out_dir / SESSIONS,
        len(out),
        TRAJECTORIES,
    )


def prepare_resume(out_dir: Path) -> ResumeState:
    """Repair the folder for appending; returns what is finished and what was set aside."""
    st = ResumeState()
    check_files(out_dir)
    if not (out_dir / SESSIONS).exists():
        _rebuild_sessions(out_dir, st)
    _rewrite(out_dir, SESSIONS, None, st)
    # The summary's own rules decide what is finished: a session line it would skip (another
    # schema version, no usable trial) does not finish its episode, which runs again.
    for s in clean_sessions(read_jsonl(out_dir / SESSIONS), Integrity()):
        if s.session_id is not None:
            st.finished_sessions.add(str(s.session_id))
        if not s.warmup:
            st.finished.add(s.key)
    done = st.finished_sessions

    # A dataset-history replay keeps its answered turns: it resumes after them.
    sent = replay_calls_to_keep(out_dir)

    def keep(rec: Mapping[str, Any]) -> bool:
        sid = rec.get("session_id")
        return sid is None or str(sid) in done or (sent is not None and sent(rec))

    st.dropped_trajectories = _rewrite(out_dir, TRAJECTORIES, keep, st)
    st.dropped_calls = _rewrite(out_dir, CALLS, keep, st)
    _rewrite(out_dir, SERVER_METRICS, None, st)
    if st.dropped_calls or st.dropped_trajectories:
        log.warning(
            "%s: resume set aside %d calls and %d trajectories of unfinished episodes in %s/",
            out_dir,
            st.dropped_calls,
            st.dropped_trajectories,
            DROPPED_DIR,
        )
    run = out_dir / RUN
    if run.exists():
        try:
            meta = orjson.loads(read_regular(run))
        except orjson.JSONDecodeError:
            meta = None
        if isinstance(meta, dict):
            st.prev_meta = meta
        else:
            log.warning("%s: unreadable, starting fresh run metadata", run)
    return st


def count_infra_episodes(out_dir: Path) -> int:
    """Measured episodes of a results folder that ended on infrastructure errors."""
    return sum(
        1
        for s in load_jsonl(out_dir / "sessions.jsonl")
        if not s.get("warmup") and s.get("termination") == INFRA
    )


def drop_infra_sessions(out_dir: Path) -> int:
    """Before a resume: take the session lines of episodes that ended on infrastructure
    errors out of sessions.jsonl, so they count as unfinished and run again (their calls and
    trajectories then go the way of any unfinished episode's). Returns how many.

    Lines are removed byte for byte; a line that does not parse is left for the recorder's
    own checks.
    """
    path = out_dir / "sessions.jsonl"
    if not path.exists():
        return 0
    data = path.read_bytes()
    kept: list[bytes] = []
    dropped = 0
    for line in data.splitlines(keepends=True):
        try:
            obj = orjson.loads(line) if line.strip() else None
        except orjson.JSONDecodeError:
            obj = None
        if isinstance(obj, dict) and obj.get("termination") == INFRA and not obj.get("warmup"):
            dropped += 1
            continue
        kept.append(line)
    if dropped:
        atomic_write_bytes(path, b"".join(kept))
    return dropped
