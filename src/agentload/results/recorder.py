"""Recorder: the append-only results directory of one run.

Durability model: each record is one `write()` of a complete JSON line followed by `flush()`,
so the bytes are in the operating system's page cache as soon as the call or episode ends. A
crash or SIGKILL of agentload keeps them (the kernel still writes them out); only a power loss
or kernel crash can lose recent records, and `fsync=True` closes that gap at the cost of one
disk sync per record.

Commit point: an episode counts as finished once its line is in sessions.jsonl. Its trajectory
is written just before and its calls as they complete, so after a kill the files can hold
calls and a trajectory of an episode with no session line. `Recorder(out, resume=True)` drops
those (atomic rewrite) and cuts a torn last line, so that the resumed run re-runs exactly the
unfinished (task, trial) pairs and the final files hold each pair once.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import IO, Any

import orjson
import yaml

from agentload.client.record import CallRecord
from agentload.results.jsonl import (
    atomic_write_bytes,
    atomic_write_lines,
    dumps_line,
    load_jsonl,
    log,
    repair_torn_tail,
)

RUN_SCHEMA = "agentload.run/1"

CALLS = "calls.jsonl"
SESSIONS = "sessions.jsonl"
TRAJECTORIES = "trajectories.jsonl"
SERVER_METRICS = "server_metrics.jsonl"
CONFIG = "config.yaml"
RUN = "run.json"
SUMMARY = "summary.json"
RECORD_FILES = (CALLS, SESSIONS, TRAJECTORIES, SERVER_METRICS)

REDACTED = "<redacted>"
_SECRET_NAMES = frozenset(
    {
        "api_key",
        "apikey",
        "authorization",
        "proxy-authorization",
        "password",
        "secret",
        "token",
        "access_token",
        "refresh_token",
        "bearer",
        "x-api-key",
        "client_secret",
    }
)
_SECRET_SUFFIXES = ("api_key", "_token", "_secret", "_password", "-api-key", "-token")


def _is_secret_key(key: str) -> bool:
    k = key.lower()
    if k.endswith("_env"):  # the name of an environment variable, not its value
        return False
    return k in _SECRET_NAMES or k.endswith(_SECRET_SUFFIXES)


def redact(obj: Any) -> Any:
    """A copy of `obj` with the values of secret-looking keys replaced by `<redacted>`."""
    if isinstance(obj, Mapping):
        out: dict[Any, Any] = {}
        for k, v in obj.items():
            if isinstance(k, str) and _is_secret_key(k) and v not in (None, ""):
                out[k] = REDACTED
            else:
                out[k] = redact(v)
        return out
    if isinstance(obj, list | tuple):
        return [redact(v) for v in obj]
    return obj


def session_key(session: Mapping[str, Any]) -> tuple[str, int]:
    """(task, trial) identity of an episode; replayed conversations key by conversation id."""
    task = session.get("task_id") or session.get("conversation_id") or session.get("session_id")
    return (str(task), int(session.get("trial") or 0))


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
    ) -> None:
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
        if resume:
            self._prepare_resume()
        else:
            existing = [n for n in RECORD_FILES if self._nonempty(n)]
            if existing and not overwrite:
                raise FileExistsError(
                    f"{self.out_dir} already holds results ({', '.join(existing)}); "
                    "resume it or choose another output directory"
                )
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
        for name in RECORD_FILES:
            if repair_torn_tail(self.out_dir / name):
                self.repaired_files.append(name)
        sessions = load_jsonl(self.out_dir / SESSIONS)
        for s in sessions:
            if s.get("session_id") is not None:
                self._finished_sessions.add(str(s["session_id"]))
            if not s.get("warmup"):
                self._finished.add(session_key(s))
        done = self._finished_sessions

        def keep(rec: Mapping[str, Any]) -> bool:
            sid = rec.get("session_id")
            return sid is None or str(sid) in done

        trajectories = load_jsonl(self.out_dir / TRAJECTORIES)
        kept_t = [t for t in trajectories if keep(t)]
        if len(kept_t) != len(trajectories):
            self.dropped_trajectories = len(trajectories) - len(kept_t)
            atomic_write_lines(self.out_dir / TRAJECTORIES, kept_t)
        self._drop_orphan_calls(keep)
        if self.dropped_calls or self.dropped_trajectories:
            log.warning(
                "%s: resume dropped %d calls and %d trajectories of unfinished episodes",
                self.out_dir,
                self.dropped_calls,
                self.dropped_trajectories,
            )
        run = self.out_dir / RUN
        if run.exists():
            try:
                self._prev_meta = orjson.loads(run.read_bytes())
            except orjson.JSONDecodeError:
                log.warning("%s: unreadable, starting fresh run metadata", run)

    def _drop_orphan_calls(self, keep: Any) -> None:
        # Rewritten line by line (not re-serialised) so the kept records stay byte-identical.
        path = self.out_dir / CALLS
        if not path.exists():
            return
        lines = path.read_bytes().splitlines(keepends=True)
        kept: list[bytes] = []
        for i, line in enumerate(lines):
            if not line.strip():
                continue
            try:
                rec = orjson.loads(line)
            except orjson.JSONDecodeError:
                from agentload.results.jsonl import JsonlError

                raise JsonlError(path, i + 1, "invalid JSON") from None
            if keep(rec):
                kept.append(line if line.endswith(b"\n") else line + b"\n")
        if len(kept) != len(lines):
            self.dropped_calls = sum(1 for ln in lines if ln.strip()) - len(kept)
            atomic_write_bytes(path, b"".join(kept))

    # -- writing ------------------------------------------------------------------------

    def _append(self, name: str, data: bytes) -> None:
        with self._lock:
            if self.closed:
                raise ValueError(f"recorder for {self.out_dir} is closed")
            f = self._files[name]
            f.write(data)
            f.flush()
            if self.fsync:
                os.fsync(f.fileno())

    def record_call(self, rec: CallRecord | Mapping[str, Any]) -> None:
        """Append one call to calls.jsonl (usable directly as `ChatClient(on_record=...)`)."""
        if isinstance(rec, CallRecord):
            self._append(CALLS, rec.to_json() + b"\n")
        else:
            self._append(CALLS, dumps_line(dict(rec)))

    def record_episode(
        self, session: Mapping[str, Any], trajectory: Mapping[str, Any] | None = None
    ) -> None:
        """Trajectory first, then the session line: the session line commits the episode."""
        if trajectory is not None:
            self._append(TRAJECTORIES, dumps_line(dict(trajectory)))
        self._append(SESSIONS, dumps_line(dict(session)))
        with self._lock:
            if session.get("session_id") is not None:
                self._finished_sessions.add(str(session["session_id"]))
            if not session.get("warmup"):
                self._finished.add(session_key(session))

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
        atomic_write_bytes(self.out_dir / CONFIG, text.encode())

    def write_meta(self, meta: Mapping[str, Any]) -> None:
        """run.json, merged over what a resumed run had written; atomic replace."""
        from agentload import __version__

        out: dict[str, Any] = {
            "schema": RUN_SCHEMA,
            "agentload_version": __version__,
            "hostname": socket.gethostname(),
        }
        out.update(self._prev_meta)
        out.update(redact(dict(meta)))
        out["schema"] = RUN_SCHEMA
        if self.resume and self._prev_meta:
            out["resume_count"] = int(self._prev_meta.get("resume_count", 0)) + 1
        else:
            out.setdefault("resume_count", 0)
        out["written_at"] = time.time()
        atomic_write_bytes(
            self.out_dir / RUN,
            orjson.dumps(out, option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY),
        )

    def close(self) -> None:
        with self._lock:
            if self.closed:
                return
            self.closed = True
            for f in self._files.values():
                f.close()

    def __enter__(self) -> Recorder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
