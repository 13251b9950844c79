"""One writer per results folder.

`<out>/.agentload.lock` is held with an OS advisory lock (`flock`) for as long as a run,
a resume, an overwrite or a sweep point writes into the folder. The kernel drops the lock when
the holder exits in any way (`kill -9` included), so a stale lock needs no clean-up: the next
writer takes it over and says whose it was. The file also holds the holder's pid, host, start
time and command line so that a refused writer can name it.

The lock file is never deleted: unlinking it would let two writers lock two different files
of the same name.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import socket
import sys
import time
from pathlib import Path
from typing import Any, ClassVar

import orjson

from agentload.redact import redact_argv

LOCK_FILE = ".agentload.lock"

log = logging.getLogger("agentload.results")


class FolderLocked(RuntimeError):
    """Another live process holds the results folder."""

    def __init__(self, out_dir: Path, holder: dict[str, Any]) -> None:
        self.out_dir = out_dir
        self.holder = holder
        super().__init__(f"{out_dir} is in use by {describe_holder(holder)}")


def describe_holder(holder: dict[str, Any]) -> str:
    if not holder:
        return "another process (no holder information)"
    started = holder.get("started_at")
    when = (
        time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(started))
        if isinstance(started, int | float)
        else "an unknown time"
    )
    cmd = holder.get("command")
    what = f" ({' '.join(cmd)[:120]})" if isinstance(cmd, list) and cmd else ""
    return (
        f"pid {holder.get('pid', '?')} on host {holder.get('host', '?')} "
        f"since {when}{what}; wait for it to end or choose another output folder"
    )


def read_holder(out_dir: Path | str) -> dict[str, Any]:
    """The holder information in the lock file ({} when absent or unreadable)."""
    try:
        data = orjson.loads((Path(out_dir) / LOCK_FILE).read_bytes())
    except (OSError, orjson.JSONDecodeError):
        return {}
    return data if isinstance(data, dict) else {}


class ResultsLock:
    """`with ResultsLock(out_dir, purpose="run"):` -- raises FolderLocked when held elsewhere.

    Re-entrant within one process (a nested acquire of the same folder is a no-op), since the
    runner's phases may each ask for it.
    """

    _held: ClassVar[dict[str, int]] = {}  # resolved path -> nesting depth, for this process

    def __init__(self, out_dir: Path | str, *, purpose: str = "run") -> None:
        self.out_dir = Path(out_dir)
        self.purpose = purpose
        self.fd: int | None = None
        self.took_over: dict[str, Any] | None = None
        self._key = ""

    def acquire(self) -> ResultsLock:
        self.out_dir.mkdir(parents=True, exist_ok=True)
        self._key = str(self.out_dir.resolve())
        if self._key in self._held:
            self._held[self._key] += 1
            return self
        path = self.out_dir / LOCK_FILE
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise FolderLocked(self.out_dir, read_holder(self.out_dir)) from None
        except OSError:
            os.close(fd)
            raise
        previous = read_holder(self.out_dir)
        if previous.get("pid") is not None and not previous.get("released"):
            # The kernel dropped the previous holder's lock: it died without releasing.
            self.took_over = previous
            log.warning(
                "%s: taking over a stale lock of pid %s on host %s (the process is gone)",
                self.out_dir,
                previous.get("pid"),
                previous.get("host"),
            )
        info = {
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "started_at": time.time(),
            "purpose": self.purpose,
            "command": redact_argv(sys.argv),
        }
        os.ftruncate(fd, 0)
        os.pwrite(fd, orjson.dumps(info) + b"\n", 0)
        self.fd = fd
        self._held[self._key] = 1
        return self

    def release(self) -> None:
        if not self._key or self._key not in self._held:
            return
        self._held[self._key] -= 1
        if self._held[self._key] > 0:
            return
        del self._held[self._key]
        if self.fd is None:
            return
        with contextlib.suppress(OSError):
            info = read_holder(self.out_dir)
            info["released"] = True
            info["released_at"] = time.time()
            os.ftruncate(self.fd, 0)
            os.pwrite(self.fd, orjson.dumps(info) + b"\n", 0)
        with contextlib.suppress(OSError):
            fcntl.flock(self.fd, fcntl.LOCK_UN)
        os.close(self.fd)
        self.fd = None

    close = release  # for contextlib.closing

    def __enter__(self) -> ResultsLock:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()
