"""One writer per results folder.

`<out>/.agentload.lock` is held with an OS advisory lock (`flock`) for as long as a run,
a resume, an overwrite or a sweep point writes into the folder. The kernel drops the lock when
the holder exits in any way (`kill -9` included), so a stale lock needs no clean-up: the next
writer takes it over and says whose it was. The file also holds the holder's pid, host, start
time and command line so that a refused writer can name it.

The folder itself is locked too, through a descriptor of the directory: a lock file deleted
by hand (or by a clean-up job) during a run would otherwise let the next writer create a new
file of the same name and lock that one. Before metadata is written the holder checks again
(`check_held`) that the folder is still the one it locked, and writes its holder information
back into a lock file that was deleted.

The lock file is never deleted by agentload.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import socket
import stat
import sys
import time
from pathlib import Path
from typing import Any, ClassVar

import orjson

from agentload.redact import redact_argv
from agentload.results.files import ResultsError
from agentload.safeio import NotRegularFile, file_kind

LOCK_FILE = ".agentload.lock"

log = logging.getLogger("agentload.results")


class FolderLocked(RuntimeError):
    """Another live process holds the results folder."""

    def __init__(self, out_dir: Path, holder: dict[str, Any]) -> None:
        self.out_dir = out_dir
        self.holder = holder
        super().__init__(f"{out_dir} is in use by {describe_holder(holder)}")


def describe_holder(holder: dict[str, Any]) -> str:
    if not holder:  # the lock file was emptied or deleted by hand
        return (
            "another process (its lock file holds no holder information); "
            "wait for it to end or choose another output folder"
        )
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


class FolderLost(ResultsError):
    """The results folder this process locked was replaced, or its lock taken, mid-run."""


def _same_file(a: os.stat_result, b: os.stat_result) -> bool:
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


def _lock_dir(out_dir: Path) -> int | None:
    """An exclusive flock on the folder itself; None where the filesystem cannot lock a
    directory (the lock file alone then guards it, as before)."""
    try:
        fd = os.open(out_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise FolderLocked(out_dir, read_holder(out_dir)) from None
    except OSError:
        os.close(fd)
        return None
    return fd


def _lock_file(out_dir: Path) -> int:
    """The lock file, opened and flocked; the name must still point at the locked file (a
    file deleted between open and flock would be a lock nobody else can see)."""
    path = out_dir / LOCK_FILE
    for _ in range(5):
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o644)
        try:
            mode = os.fstat(fd).st_mode
            if not stat.S_ISREG(mode):  # OSError: the caller's "cannot write results" line
                raise NotRegularFile(path, file_kind(mode))
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            if _same_file(os.fstat(fd), os.stat(path)):
                return fd
        except BlockingIOError:
            os.close(fd)
            raise FolderLocked(out_dir, read_holder(out_dir)) from None
        except FileNotFoundError:
            pass
        except BaseException:
            os.close(fd)
            raise
        os.close(fd)
    raise OSError(f"{path}: replaced while it was being locked; retry")


class ResultsLock:
    """`with ResultsLock(out_dir, purpose="run"):` -- raises FolderLocked when held elsewhere.

    Re-entrant within one process (a nested acquire of the same folder is a no-op), since the
    runner's phases may each ask for it.
    """

    _held: ClassVar[dict[str, int]] = {}  # resolved path -> nesting depth, for this process
    _owners: ClassVar[dict[str, ResultsLock]] = {}  # resolved path -> the lock holding it

    def __init__(self, out_dir: Path | str, *, purpose: str = "run") -> None:
        self.out_dir = Path(out_dir)
        self.purpose = purpose
        self.fd: int | None = None
        self.dir_fd: int | None = None
        self.took_over: dict[str, Any] | None = None
        self._key = ""
        self._info: dict[str, Any] = {}

    def acquire(self) -> ResultsLock:
        self.out_dir.mkdir(parents=True, exist_ok=True)
        self._key = str(self.out_dir.resolve())
        if self._key in self._held:
            self._held[self._key] += 1
            return self
        dir_fd = _lock_dir(self.out_dir)
        try:
            fd = _lock_file(self.out_dir)
        except BaseException:
            if dir_fd is not None:
                os.close(dir_fd)
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
        self._info = {
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "started_at": time.time(),
            "purpose": self.purpose,
            "command": redact_argv(sys.argv),
        }
        _write_info(fd, self._info)
        self.fd, self.dir_fd = fd, dir_fd
        self._held[self._key] = 1
        self._owners[self._key] = self
        return self

    def check(self) -> None:
        """Before writing: FolderLost unless the folder is still the one locked. A lock file
        deleted meanwhile is created again with this holder's information (the folder's own
        lock kept every other writer out), so the next refused writer can name it."""
        if self.fd is None:
            return
        if self.dir_fd is not None:
            try:
                same = _same_file(os.fstat(self.dir_fd), os.stat(self.out_dir))
            except OSError:
                same = False
            if not same:
                raise FolderLost(
                    f"{self.out_dir}: the results folder was moved, deleted or replaced "
                    "during the run; nothing more is written to it"
                )
        path = self.out_dir / LOCK_FILE
        try:
            if _same_file(os.fstat(self.fd), os.stat(path)):
                return
        except FileNotFoundError:
            pass
        if self.dir_fd is None:  # only the file guarded the folder: another writer may be in
            raise FolderLost(
                f"{path}: deleted or replaced during the run, so another writer may have "
                "taken the folder; nothing more is written to it"
            )
        try:
            fd = _lock_file(self.out_dir)
        except FolderLocked as e:  # an agentload that locks only the file holds the new one
            raise FolderLost(
                f"{path}: taken during the run by {describe_holder(e.holder)}"
            ) from None
        log.warning("%s: deleted during the run; written again", path)
        _write_info(fd, self._info)
        old, self.fd = self.fd, fd
        os.close(old)

    def release(self) -> None:
        if not self._key or self._key not in self._held:
            return
        self._held[self._key] -= 1
        if self._held[self._key] > 0:
            return
        del self._held[self._key]
        self._owners.pop(self._key, None)
        if self.fd is None:
            return
        with contextlib.suppress(OSError):
            _write_info(self.fd, {**self._info, "released": True, "released_at": time.time()})
        with contextlib.suppress(OSError):
            fcntl.flock(self.fd, fcntl.LOCK_UN)
        os.close(self.fd)
        self.fd = None
        if self.dir_fd is not None:
            with contextlib.suppress(OSError):
                fcntl.flock(self.dir_fd, fcntl.LOCK_UN)
            os.close(self.dir_fd)
            self.dir_fd = None

    close = release  # for contextlib.closing

    def __enter__(self) -> ResultsLock:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


def _write_info(fd: int, info: dict[str, Any]) -> None:
    os.ftruncate(fd, 0)
    os.pwrite(fd, orjson.dumps(info) + b"\n", 0)


def check_held(out_dir: Path | str) -> None:
    """`ResultsLock.check` of the lock this process holds on `out_dir`; nothing when none."""
    if not ResultsLock._owners:
        return
    owner = ResultsLock._owners.get(str(Path(out_dir).resolve()))
    if owner is not None:
        owner.check()
