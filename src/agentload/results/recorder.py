"""Recorder: the append-only results directory of one run.

Durability model: each record is one `write()` of a complete JSON line followed by `flush()`,
so the bytes are in the operating system's page cache as soon as the call or episode ends. A
crash or SIGKILL of agentload keeps them (the kernel still writes them out); only a power loss
or kernel crash can lose recent records, and `fsync=True` closes that gap at the cost of one
disk sync per record.

Commit point: an episode counts as finished once its line is in sessions.jsonl. Its trajectory
is written just before and its calls as they complete, so after a kill the files can hold
calls and a trajectory of an episode with no session line. `Recorder(out, resume=True)` moves
those (and a torn last line, and any unreadable line) to `dropped/` (agentload.results.resume),
so that the resumed run re-runs exactly the unfinished (task, trial) pairs, the final files
hold each pair once, and nothing recorded is deleted.

Secrets: one mechanism for every file written here. Known secret values of the run
(`add_secrets`, from `agentload.redact.endpoint_secrets`) are replaced in every record line,
in config.yaml and in run.json before they are written; config.yaml and run.json also go
through `agentload.redact` (secret-named fields, URL passwords, secret-shaped values).
summary.json and the report are built from these files, so they hold no secret either.

A failed write (a full disk, a folder gone read-only) is reported once through
`on_write_error` and kept in `write_error`; the recorder then stops writing rather than
raising into every episode in flight.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import socket
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import IO, Any

import orjson
import yaml

from agentload.client.record import CallRecord
from agentload.redact import REDACTED, Scrubber, redact, redact_meta
from agentload.results.files import (
    CALLS,
    CONFIG,
    DROPPED_DIR,
    RECORD_FILES,
    RUN,
    SERVER_METRICS,
    SESSIONS,
    SUMMARY,
    TRAJECTORIES,
)
from agentload.results.jsonl import ResultsError, atomic_write_bytes, dumps_line, log
from agentload.results.records import (
    Line,
    SessionRecord,
    TrajectoryRecord,
    session_line,
    trajectory_line,
)
from agentload.results.resume import prepare_resume, session_key
from agentload.version import __version__

RUN_SCHEMA = "agentload.run/1"

__all__ = [
    "CALLS",
    "CONFIG",
    "RECORD_FILES",
    "REDACTED",
    "RUN",
    "SERVER_METRICS",
    "SESSIONS",
    "SUMMARY",
    "TRAJECTORIES",
    "Recorder",
    "ResultsWriteError",
    "redact",
    "session_key",
]


class ResultsWriteError(ResultsError):
    """Writing into the results folder failed (full disk, read-only, permissions)."""


def write_error(path: Path, e: OSError) -> ResultsWriteError:
    reason = e.strerror or str(e)
    if e.errno in (errno.ENOSPC, errno.EDQUOT):
        reason += " (the disk is full: free space, then `agentload run --resume` the folder)"
    return ResultsWriteError(f"cannot write {path}: {reason}")


class Recorder:
    """One per run directory; append-only, flushed per record, resumable.

    `resume=False` refuses a directory that already holds records (unless `overwrite=True`,
    which truncates them) so that a finished run is never appended to by mistake.
    """

    def __init__(
        self,
        out_dir: Path | str,
        *,
        resume: bool = False,
        overwrite: bool = False,
        fsync: bool = False,
        config: Mapping[str, Any] | None = None,
        secrets: Any = (),
    ) -> None:
        """`config`: written to config.yaml before the record files are created (and
        `secrets`, sets of values, redacted from it and from every record)."""
        self.out_dir = Path(out_dir)
        self.out_dir.mkdir(parents=True, exist_ok=True)
        self.resume = resume
        self.fsync = fsync
        self._lock = threading.Lock()
        self._finished: set[tuple[str, int]] = set()
        self._finished_sessions: set[str] = set()
        self._prev_meta: dict[str, Any] = {}
        self.dropped_calls = 0
        self.dropped_trajectories = 0
        self.repaired_files: list[str] = []
        self.set_aside: dict[str, int] = {}
        self.rebuilt_sessions = 0
        self.scrubber = Scrubber()
        self.write_error: ResultsWriteError | None = None
        self.on_write_error: Callable[[ResultsWriteError], None] | None = None
        # A writer killed inside atomic_write_bytes leaves its `.NAME.tmpPID`; the folder is
        # this process's now (locked), so none of them is still being written, whether this
        # run resumes it or starts it again (a kill before config.yaml was in place).
        for stale in self.out_dir.glob(".*.tmp*"):
            if stale.name.rpartition(".tmp")[2].isdigit():
                with contextlib.suppress(OSError):
                    stale.unlink()
        if resume:
            self._prepare_resume()
        else:
            existing = [n for n in RECORD_FILES if self._nonempty(n)]
            if existing and not overwrite:
                raise FileExistsError(
                    f"{self.out_dir} already holds results ({', '.join(existing)}); "
                    "resume it or choose another output directory"
                )
            if overwrite:  # lines an earlier resume set aside belong to the replaced run
                shutil.rmtree(self.out_dir / DROPPED_DIR, ignore_errors=True)
        for values in secrets:
            self.add_secrets(values)
        if config is not None:
            # First, atomically: a folder holding record files always has the config.yaml
            # `--resume` reads, whenever the process is killed.
            self.write_config(config)
        mode = "ab" if resume else "wb"
        self._files: dict[str, IO[bytes]] = {
            name: open(self.out_dir / name, mode)  # noqa: SIM115 - closed in close()
            for name in RECORD_FILES
        }
        self.closed = False

    # -- resume -------------------------------------------------------------------------

    def _nonempty(self, name: str) -> bool:
        p = self.out_dir / name
        return p.exists() and p.stat().st_size > 0

    def _prepare_resume(self) -> None:
        st = prepare_resume(self.out_dir)
        self._finished = st.finished
        self._finished_sessions = st.finished_sessions
        self._prev_meta = st.prev_meta
        self.dropped_calls = st.dropped_calls
        self.dropped_trajectories = st.dropped_trajectories
        self.repaired_files = st.repaired_files
        self.set_aside = st.set_aside
        self.rebuilt_sessions = st.rebuilt_sessions

    # -- writing ------------------------------------------------------------------------

    def add_secrets(self, secrets: Any) -> None:
        """Values never to be written (API keys, passwords); replaced in every record."""
        self.scrubber.add(secrets)

    def _append(self, name: str, data: bytes) -> None:
        if self.scrubber:
            data = self.scrubber.bytes(data)
        failed: ResultsWriteError | None = None
        with self._lock:
            if self.closed:
                raise ValueError(f"recorder for {self.out_dir} is closed")
            if self.write_error is not None:
                return  # already reported; the run is stopping
            f = self._files[name]
            try:
                f.write(data)
                f.flush()
                if self.fsync:
                    os.fsync(f.fileno())
            except OSError as e:
                failed = self.write_error = write_error(self.out_dir / name, e)
        if failed is not None:
            if self.on_write_error is not None:
                self.on_write_error(failed)
            else:
                log.error("%s", failed)

    def record_call(self, rec: CallRecord | Mapping[str, Any] | bytes) -> None:
        """Append one call to calls.jsonl (usable directly as `ChatClient(on_record=...)`);
        bytes are a CallRecord's JSON already made (`CallRecord.to_json()`, by a worker)."""
        if isinstance(rec, CallRecord):
            self._append(CALLS, rec.to_json() + b"\n")
        elif isinstance(rec, bytes):
            self._append(CALLS, rec + b"\n")
        else:
            self._append(CALLS, dumps_line(dict(rec)))

    def record_episode(
        self,
        session: Mapping[str, Any] | SessionRecord | Line,
        trajectory: Mapping[str, Any] | TrajectoryRecord | Line | None = None,
    ) -> None:
        """Trajectory first, then the session line: the session line commits the episode.

        Each line is stamped with its schema and `schema_version` and encoded once, as given
        (no validation here; readers validate, agentload.results.records)."""
        if trajectory is not None:
            self._append(TRAJECTORIES, dumps_line(trajectory_line(trajectory)))
        line = session_line(session)
        self._append(SESSIONS, dumps_line(line))
        with self._lock:
            if line.get("session_id") is not None:
                self._finished_sessions.add(str(line["session_id"]))
            if not line.get("warmup"):
                self._finished.add(session_key(line))

    def record_server_metrics(self, sample: Mapping[str, Any]) -> None:
        self._append(SERVER_METRICS, dumps_line(dict(sample)))

    def finished_keys(self) -> set[tuple[str, int]]:
        """(task_id, trial) of every finished non-warmup episode (a session line exists)."""
        with self._lock:
            return set(self._finished)

    # -- metadata -----------------------------------------------------------------------

    def write_config(self, config: Mapping[str, Any]) -> None:
        """config.yaml; secrets are redacted here too, whatever the caller did."""
        text = yaml.safe_dump(redact(config), sort_keys=False, allow_unicode=True)
        atomic_write_bytes(self.out_dir / CONFIG, self.scrubber.bytes(text.encode()))

    def write_meta(self, meta: Mapping[str, Any]) -> None:
        """run.json, merged over what a resumed run had written; atomic replace."""

        out: dict[str, Any] = {
            "schema": RUN_SCHEMA,
            "agentload_version": __version__,
            "hostname": socket.gethostname(),
        }
        out.update(self._prev_meta)
        out.update(redact_meta(meta))
        out["schema"] = RUN_SCHEMA
        if self.resume and self._prev_meta:
            prev = self._prev_meta.get("resume_count", 0)
            out["resume_count"] = (prev if isinstance(prev, int) and prev >= 0 else 0) + 1
        else:
            out.setdefault("resume_count", 0)
        out["written_at"] = time.time()
        data = orjson.dumps(out, option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY)
        atomic_write_bytes(self.out_dir / RUN, self.scrubber.bytes(data))

    def close(self) -> None:
        with self._lock:
            if self.closed:
                return
            self.closed = True
            for f in self._files.values():
                # A full disk fails the final flush again: already reported in write_error.
                with contextlib.suppress(OSError):
                    f.close()

    def __enter__(self) -> Recorder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
